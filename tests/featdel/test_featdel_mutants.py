"""Gold mutants and the grader's strength: operators, determinism, and generation keeping only verifiable tasks whose
grader rejects the behaviour-changing mutants (a branch only held-out inputs reach is a weak grader)."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import os
import pickle
import random
import re
import select
import textwrap
import time
from pathlib import Path

import pytest
from corpus_support import write
from featdel_support import TOOLZ, generated

from crf_prime.featdel import mutants as mutants_module
from crf_prime.featdel import replay as replay_module
from crf_prime.featdel import replay_box, strength
from crf_prime.featdel.corpus_build import CorpusSummary, PackageRow, mutation_card, mutation_tables
from crf_prime.featdel.corpus_meta import TaskMeta
from crf_prime.featdel.deletion import apply_unified_diff, delete_bodies
from crf_prime.featdel.generate import GenerateConfig, generate
from crf_prime.featdel.grader import Grader
from crf_prime.featdel.models import FeatdelTask, GraderConfig, MutationScore, RateStats
from crf_prime.featdel.mutants import OPERATORS, Mutant, file_mutants, gold_mutants, restored_lines
from crf_prime.featdel.pycache import source_entry
from crf_prime.featdel.replay import (
    LENIENT,
    SEQ,
    TYPE_LOOSE,
    ReplayVerdict,
    judged,
    judged_texts,
    load_replay,
    only_timeouts,
)
from crf_prime.featdel.replay_box import _forked
from crf_prime.featdel.strength import (
    MUTANT_CALL_TIMEOUT_S,
    mutation_score,
    mutation_seed,
    replay_verdicts,
    verdict_of_tests,
)
from crf_prime.placement import GRADING_LIMITS, GradingSandbox
from crf_prime.sandbox import Sandbox

SRC = textwrap.dedent(
    '''\
    """Module doc."""


    def kept(a):
        return a + 1


    def score(xs, limit=3, strict=False):
        """Doc stays in the snapshot."""
        total = 0
        for x in xs:
            if x > limit and not strict:
                total += x * 2
            elif x == 0 or strict:
                total -= 1
            else:
                total = total
        label = f"total {total}"
        return total
    '''
)


def _changed(original: str, mutated: str) -> set[int]:
    return {i + 1 for i, (a, b) in enumerate(zip(original.splitlines(), mutated.splitlines(), strict=True)) if a != b}


def test_mutants_cover_every_operator_and_only_the_restored_lines() -> None:
    broken = delete_bodies(SRC, ["score"])
    lines = restored_lines(broken, SRC)
    assert min(lines) > SRC.splitlines().index('    """Doc stays in the snapshot."""') + 1  # the docstring stays
    mutants = file_mutants("m.py", SRC, lines)
    assert {m.operator for m in mutants} == set(OPERATORS)
    dumps = {ast.dump(ast.parse(m.text)) for m in mutants}
    assert len(dumps) == len(mutants) and ast.dump(ast.parse(SRC)) not in dumps  # all distinct, none is gold
    for m in mutants:
        assert _changed(SRC, m.text) <= lines and m.line in lines
        assert "def kept(a):\n    return a + 1\n" in m.text  # code outside the deleted bodies is gold's own text
    texts = {m.text for m in mutants}
    for edit in (
        "if (x >= limit) and not strict:",  # compare
        "elif (x != 0) or strict:",
        "if (x > limit or not strict):",  # boolean
        "if x > limit and (strict):",  # a `not` removed
        "total -= x * 2",  # arithmetic (augmented)
        "total += (x / 2)",  # arithmetic
        "total += x * (3)",  # constant
        "if False:",  # branch
        "elif True:",
        "return None",  # return
    ):
        assert any(edit in t for t in texts), edit
    assert not any("XXtotal" in t for t in texts)  # f-strings are left alone


FAILS = textwrap.dedent(
    """\
    def check(n, cause):
        if n < 0:
            raise ValueError("negative: %d" % (n + 1)) from KeyError("k" * 2)
        assert n != 3, "three is " + "out"
        return n
    """
)


def test_what_a_failure_says_is_not_mutated_but_whether_it_fails_is() -> None:
    """The replay judges a raise only as raised: the exception a ``raise`` builds (its message, its cause) and an
    ``assert``'s message are left alone; the raise and the assert themselves, and their conditions, are mutated."""
    mutants = file_mutants("m.py", FAILS, frozenset(range(1, 6)))
    changed = {line for m in mutants for line in _changed(FAILS, m.text)}
    texts = [m.text for m in mutants]
    assert changed == {2, 3, 4, 5}
    for kept in ('("negative: %d" % (n + 1))', 'KeyError("k" * 2)', '"three is " + "out"'):
        assert all(kept in t or re.search(r"^ +pass$", t, re.M) for t in texts), kept  # gone with its statement only
    for edit in ("if (n <= 0):", "if False:", "        pass\n    assert", "assert (n == 3), ", "return None"):
        assert any(edit in t for t in texts), edit
    for left_alone in ("XX", "(n - 1)", "(n + 2)", '"k" * (3)', '"k" / 2'):  # inside the raise and the message
        assert not any(left_alone in t for t in texts), left_alone


def _whole_file_mutants(source: str, lines: frozenset[int]) -> list[tuple[int, str, str]]:
    """The definition file_mutants implements: every edit on ``lines``, kept when the whole mutated file parses to a
    tree neither gold's nor an earlier mutant's."""
    tree = ast.parse(source)
    raw = source.encode().splitlines(keepends=True)
    skip = mutants_module._unmutable(tree)
    seen = {ast.dump(tree)}
    out = []
    nodes = sorted(
        (n for n in ast.walk(tree) if hasattr(n, "lineno") and id(n) not in skip),
        key=lambda n: (n.lineno, n.col_offset, -n.end_lineno, -n.end_col_offset),
    )
    for node in nodes:
        for edit in mutants_module._edits(node):
            if not set(range(edit.node.lineno, edit.node.end_lineno + 1)) <= lines:
                continue
            text = mutants_module._apply(raw, edit.node, edit.replacement)
            try:
                dump = ast.dump(ast.parse(text))
            except SyntaxError:
                continue
            if dump not in seen:
                seen.add(dump)
                out.append((edit.node.lineno, edit.operator, text))
    return out


EDGES = textwrap.dedent(
    """\
    import functools
    x = 1; y = (2 +
        3)
    BIG = 1e16  # its constant mutant, 1e16 + 1, is 1e16 again: gold's own tree


    @functools.lru_cache(maxsize=None if x else 2)
    def f(a, b=1):
        if a > b: return a - 1; b += 2
        return (a
                + b) * 2


    class C:
        z = [1, 2] if x else (3,)

        def g(self, n):
            while n > 0 and not self.z:
                n -= 1
            else:
                pass
            return n
    """
)


@pytest.mark.parametrize("module", ["textwrap", "difflib", "json.decoder", "EDGES"])
def test_parsing_only_the_edited_statement_gives_the_whole_file_s_mutants(module: str) -> None:
    """file_mutants re-parses only the top-level statement holding an edit: the same mutants, in the same order, as
    re-parsing the whole file (stdlib modules on three windows of lines each; statements sharing a line), and the same
    again when the windows are asked in another order."""
    import importlib
    import inspect

    source = EDGES if module == "EDGES" else inspect.getsource(importlib.import_module(module))
    n = len(source.splitlines())
    windows = [frozenset(range(1, n + 1))] if module == "EDGES" else []
    windows += [frozenset(range(a, min(a + 40, n + 1))) for a in (n // 5, n // 2, 4 * n // 5)]
    total = 0
    first = {}
    for lines in windows:
        first[lines] = [(m.line, m.operator, m.text, m.reach) for m in file_mutants("m.py", source, lines)]
        assert [m[:3] for m in first[lines]] == _whole_file_mutants(source, lines)
        total += len(first[lines])
    assert total > 20
    for lines in reversed(windows):  # the text's facts are kept between calls: other windows first change nothing
        assert [(m.line, m.operator, m.text, m.reach) for m in file_mutants("m.py", source, lines)] == first[lines]


def test_a_mutant_names_the_lines_a_call_runs_exactly_when_it_runs_the_mutated_code() -> None:
    source = textwrap.dedent(
        """\
        X = 1 + 2
        def f(a, b=3):
            if a > 1:
                return (a +
                        b)
            g = lambda z: z * 2
            return [x + 1 for x in range(a)]
        class C:
            K = 4
            def m(self):
                return self.K - 1
        """
    )
    reach = {(m.line, m.operator): m.reach for m in file_mutants("m.py", source, frozenset(range(1, 12)))}
    # run at import (module and class bodies, a default): in every call
    assert {k for k, r in reach.items() if r is None} == {
        (1, "statement"), (1, "arithmetic"), (1, "constant"), (2, "constant"), (9, "statement"), (9, "constant"),
    }  # fmt: skip
    # in a body: the edited node's lines and its statement's first line (the `if`'s test, a return's whole value)
    assert reach[(3, "branch")] == reach[(3, "compare")] == frozenset({3})
    assert reach[(4, "return")] == reach[(4, "arithmetic")] == frozenset({4, 5})
    assert reach[(6, "arithmetic")] == frozenset({6}) and reach[(11, "return")] == frozenset({11})
    # a call narrows a mutant's replay only with its lines known; one without them (an older task) keeps every call
    at = dataclasses.replace(file_mutants("m.py", source, frozenset(range(1, 12)))[0], path="m.py")
    calls = [
        {"id": "c0", "lines": {"m.py": [3, 7]}},
        {"id": "c1", "lines": {"m.py": [3, 4, 5]}},
        {"id": "c2", "lines": {}},
    ]
    assert strength.reaching_calls(calls, dataclasses.replace(at, reach=frozenset({4, 5}))) == {"c1"}
    assert strength.reaching_calls(calls, dataclasses.replace(at, reach=frozenset({3}))) == {"c0", "c1"}
    assert strength.reaching_calls(calls, dataclasses.replace(at, reach=frozenset({6}))) == frozenset()
    assert strength.reaching_calls(calls, dataclasses.replace(at, reach=None)) is None
    assert strength.reaching_calls([*calls, {"id": "c3"}], dataclasses.replace(at, reach=frozenset({3}))) is None
    other = dataclasses.replace(at, path="n.py", reach=frozenset({3}))
    assert strength.reaching_calls(calls, other) == frozenset()


def test_mutants_are_deterministic_for_a_seed_and_capped() -> None:
    broken = {"m.py": delete_bodies(SRC, ["score"])}
    original = {"m.py": SRC}
    a = gold_mutants(broken, original, cap=6, seed="0:t")
    assert [m.text for m in a] == [m.text for m in gold_mutants(broken, original, cap=6, seed="0:t")]
    assert len(a) == 6 and len({m.operator for m in a}) == 6  # operators take turns
    everything = gold_mutants(broken, original, cap=1000, seed="0:t")
    assert len(everything) == len(file_mutants("m.py", SRC, restored_lines(broken["m.py"], SRC)))
    others = [gold_mutants(broken, original, cap=6, seed=f"{s}:t") for s in range(1, 6)]
    assert any([m.text for m in o] != [m.text for m in a] for o in others)


def _meta(task_id: str, granularity: str, rate: float | None, changing: int = 10) -> TaskMeta:
    rejected = round((rate or 0) * changing)
    score = MutationScore(mutants=12, behaviour_changing=changing, rejected=rejected, rate=rate)
    return TaskMeta(
        task_id=task_id,
        project=task_id.split("-")[0],
        version="1",
        granularity=granularity,  # type: ignore[arg-type]
        deleted_lines=3,
        deleted_statements=3,
        cyclomatic=1,
        target_tests=1,
        callers=0,
        exact_key=task_id,
        near_key=task_id,
        mutation=score,
    )


def test_rates_per_package_and_granularity_with_median_and_p5() -> None:
    stats = RateStats.of([MutationScore(mutants=5, behaviour_changing=4, rejected=4, rate=1.0)] * 19 + [None])
    assert (stats.tasks, stats.unmeasured, stats.median, stats.p5) == (19, 1, 1.0, 1.0)
    rates = [0.5] + [1.0] * 19
    stats = RateStats.of([MutationScore(mutants=2, behaviour_changing=2, rejected=round(2 * r), rate=r) for r in rates])
    assert (stats.median, stats.p5) == (1.0, 0.5)  # nearest rank: the 1st of 20
    rows = [
        ("a", _meta("a-1", "function", 1.0)),
        ("a", _meta("a-2", "block", 0.9)),
        ("b", _meta("b-1", "function", 0.96)),
        ("b", _meta("b-2", "function", None, changing=0)),
    ]
    assert mutation_tables([("a", rows[0][1].model_copy(update={"mutation": None}))]) == {}  # nothing measured
    tables = mutation_tables(rows)
    assert tables["mutation"].median == 0.96 and tables["mutation"].p5 == 0.9 and tables["mutation"].unmeasured == 1
    assert {k: (v.tasks, v.median) for k, v in tables["mutation_by_package"].items()} == {
        "a": (2, 0.95),
        "b": (1, 0.96),
    }
    assert {k: (v.tasks, v.median) for k, v in tables["mutation_by_granularity"].items()} == {
        "function": (2, 0.98),
        "block": (1, 0.9),
    }
    packages = {s: PackageRow(spec=f"pypi:{s}==1", status="done") for s in ("a", "b")}
    summary = CorpusSummary(
        tasks=4, splits={}, packages_done=2, packages_failed=0, duplicates_exact=0, duplicates_near=0,
        packages=packages, **tables,
    )  # fmt: skip
    card = "\n".join(mutation_card(summary))
    assert "| function | 2 | 98% | 96% | 20/20 | 1 |" in card and "| block | 1 | 90% | 90% | 9/10 | 0 |" in card
    assert "| pypi:a==1 | 2 | 95% | 90% | 19/20 | 0 |" in card and "| pypi:b==1 | 1 | 96% | 96% | 10/10 | 1 |" in card


REACH = textwrap.dedent(
    '''\
    """Fixture: a branch only inputs two steps from the tests reach, and a method whose calls cannot be replayed."""


    def describe(n):
        """Text for ``n``."""
        if n == 4:
            return "square"
        text = str(n * 2)
        return text


    MODE = {"scale": 1}


    class Meter:
        """A reading scaled by the module's MODE."""

        def __init__(self, v):
            self.v = v
            self.reads = 0

        def read(self):
            self.reads += 1
            return self.v * MODE["scale"]

        def reset(self):
            self.reads = 0
            self.v = 0
    '''
)

REACH_TESTS = textwrap.dedent(
    """\
    from reach import MODE, Meter, describe


    def test_describe():
        assert describe(2) == "4"


    def test_meter():
        MODE["scale"] = 3  # gold's replay outside this test reads scale 1: the calls of read are dropped
        try:
            m = Meter(2)
            assert m.read() == 6 and m.reads == 1
        finally:
            MODE["scale"] = 1
    """
)


def _reach(root: Path) -> Path:
    return write(
        root,
        {
            "pyproject.toml": '[project]\nname = "reach"\nversion = "0.1"\n',
            "reach/__init__.py": REACH,
            "tests/test_reach.py": REACH_TESTS,
        },
    )


@pytest.mark.slow
@pytest.mark.bwrap
def test_generation_keeps_only_verifiable_tasks_with_a_strong_grader(tmp_path: Path) -> None:
    src = _reach(tmp_path / "src")
    cfg = GenerateConfig(source=str(src), out=tmp_path / "out", max_tasks=10, workers=2, granularities=["function", "tail", "class"])  # fmt: skip
    tasks, summary = generate(cfg)
    why = {r.candidate: (r.reason, r.detail) for r in summary.rejections}
    # describe's `n == 4` branch: the test calls describe(2); the served inputs are one step from it (3, 1, 0, -2,
    # 5..7, ...), never 4; the held-out ones are two steps away (3 + 1): the branch's mutants survive the grader
    reason, detail = why["src-local__reach.describe"]
    assert reason == "weak-grader" and "reach/__init__.py:6:branch" in detail and "reach/__init__.py:7:" in detail
    # read's only calls ran under the test's setting: no replayed call checks it, alone or in its class
    assert why["src-local__reach.Meter.read"] == ("no-replay-coverage", "no replayed call of Meter.read")
    assert why["src-local__class__reach.Meter"][0] == "no-replay-coverage"
    # reset runs under no test: never a target
    assert all("reset" not in t.task_id and all(g.qualname != "Meter.reset" for g in t.targets) for t in tasks)
    assert [t.task_id for t in tasks] == ["src-local__tail__reach.describe"]
    (tail,) = tasks
    assert tail.mutation is not None and tail.mutation.rate == 1.0 and tail.mutation.survivors == ()
    assert tail.mutation.mutants == tail.mutation.behaviour_changing == tail.mutation.rejected >= 3
    assert tail.unreplayed_targets == ()
    # gold's first box says which restored lines each kept call ran (describe's control flow, in closed form)
    original = apply_unified_diff(dict(tail.broken_files), tail.gold_patch)
    path = "reach/__init__.py"
    restored = restored_lines(tail.broken_files[path], original[path])

    def ran(n: object) -> set[int]:
        if n == 4:
            return {6, 7}
        try:
            str(n * 2)  # type: ignore[operator]
        except Exception:
            return {6, 8}
        return {6, 8, 9}

    calls = load_replay(tail, cfg.out)[0]
    assert restored and any(c.get("derived") for c in calls)
    for c in calls:
        args, kwargs, _ = pickle.loads(c["payload"])
        n = args[0] if args else kwargs["n"]
        assert c["lines"] == ({path: sorted(ran(n) & restored)} if ran(n) & restored else {}), (n, c["lines"])
    assert summary.mutation is not None and (summary.mutation.tasks, summary.mutation.median) == (1, 1.0)
    assert summary.rejected == {"no-replay-coverage": 2, "weak-grader": 1}

    # asked for explicitly, a task whose target has no replayed call is written, and its row says so
    loose = GenerateConfig(source=str(src), out=tmp_path / "loose", max_tasks=10, workers=2, granularities=["function"], allow_unreplayed=True, mutants_per_task=0)  # fmt: skip
    tasks, summary = generate(loose)
    read = next(t for t in tasks if t.task_id == "src-local__reach.Meter.read")
    assert read.unreplayed_targets == ("Meter.read",) and read.mutation is None
    assert summary.mutation is None and "weak-grader" not in summary.rejected


# -- many trees in one box: the verdicts of one box per tree ----------------------------------------------------------


def _looping_first(text: str, qualname: str) -> str:
    """``text`` with a loop that never ends before the first statement of function ``qualname``."""
    return _before_first(text, qualname, "while True:\n    pass")


def _sleeping_first(text: str, qualname: str, seconds: float) -> str:
    """``text`` with a sleep of ``seconds`` before the first statement of function ``qualname``: gold, slow."""
    return _before_first(text, qualname, f"__import__('time').sleep({seconds!r})")


def _before_first(text: str, qualname: str, code: str) -> str:
    """``text`` with ``code`` before the first statement of function ``qualname`` (after its docstring)."""
    node: ast.AST = ast.parse(text)
    for name in qualname.split("."):
        node = next(n for n in ast.iter_child_nodes(node) if getattr(n, "name", None) == name)
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):  # after the docstring
        first = node.body[1] if len(node.body) > 1 else first
    lines = text.splitlines(keepends=True)
    pad = " " * first.col_offset
    lines.insert(first.lineno - 1, "".join(f"{pad}{line}\n" for line in code.splitlines()))
    return "".join(lines)


def kind(v: ReplayVerdict) -> str:
    """:func:`replay_verdicts`' word for a verdict under the served limit."""
    return "pass" if v.ok else "rejected"


def _hanging(task: FeatdelTask) -> dict[str, str | None]:
    """The snapshot with its first deleted body replaced by a loop that never ends."""
    path = task.targets[0].path
    text = task.broken_files[path]
    indent = re.search(r"^( *)raise NotImplementedError$", text, re.M)
    assert indent is not None
    pad = indent.group(1)
    return {path: text.replace(indent.group(0), f"{pad}while True:\n{pad}    pass", 1)}


@pytest.mark.bwrap
@pytest.mark.slow
def test_one_box_for_many_trees_gives_each_tree_s_own_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    task_dir, tasks, _ = generated(TOOLZ, 2)
    task = tasks[0]
    original = apply_unified_diff(dict(task.broken_files), task.gold_patch)
    broken = {p: task.broken_files[p] for p in original}
    mutants = gold_mutants(broken, original, cap=4, seed=mutation_seed(task))
    gold = dict(original)
    attempts = [gold, {}, *({m.path: m.text} for m in mutants), _hanging(task), gold]
    grader = Grader(task, task_dir, config=GraderConfig(scan=False, call_timeout_s=1.0))
    alone = [grader.replay(a) for a in attempts]
    together = grader.replay_many(attempts)
    assert [v.ok for v in together] == [v.ok for v in alone]
    assert [v.calls for v in together] == [v.calls for v in alone]
    assert together[0].ok and together[-1].ok  # gold, also after a tree whose calls time out
    assert not together[1].ok and not together[-2].ok  # the snapshot raises NotImplementedError; the loop times out
    boxes: list[bool] = []
    real_run_variants = replay_module.run_variants

    def run_variants(*args, **kwargs):
        boxes.append(kwargs["differs"] is not None)
        return real_run_variants(*args, **kwargs)

    same = dataclasses.replace(mutants[0], text=original[mutants[0].path])  # gold's own text: no call differs
    with monkeypatch.context() as m:
        m.setattr(replay_module, "run_variants", run_variants)
        # the grader's own limit is the mutants' (1 s): a timeout there is the served grader's rejection
        assert replay_verdicts(grader, [*mutants, same]) == [*map(kind, together[2:-2]), "pass"]
    # one box, each tree stopped at its first difference (a tree stopped at one the host does not count is run again,
    # in full: not a stop-early box)
    assert boxes.count(True) == 1 and boxes[0]
    # the base's compiled modules beside every tree: the snapshot's and the mutants' files are not the source of
    # their compiled file (gold's), which Python then never runs: the same verdicts
    archive = task_dir / task.base_archive
    pycs = source_entry(archive, task.base_sha256, task.source_files, sandbox=grader.sandbox, env=grader.env)
    assert pycs is not None
    target = Path(task.targets[0].path)
    assert [p.name for p in (pycs / target.parent / "__pycache__").glob(f"{target.stem}.*.pyc")]
    compiled = grader.replay_many(attempts, pycs=pycs)
    assert [v.ok for v in compiled] == [v.ok for v in alone]
    # and the test runs of generation: the snapshot still fails, gold still passes
    for changes, score in (({}, 0.0), (gold, 1.0)):
        assert grader.score_run(grader.run_tests(changes, first_failure=True, pycs=pycs), changes).score == score


def _first(n: int, seed: int) -> int:
    """The call the replay box runs first with ``seed`` (``replay_box._run_calls``' shuffle)."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return order[0]


@pytest.mark.bwrap
@pytest.mark.slow
def test_a_mutant_s_tree_stops_at_its_first_difference_with_the_same_verdicts(monkeypatch: pytest.MonkeyPatch) -> None:
    task_dir, tasks, _ = generated(TOOLZ, 2)
    task = tasks[0]
    original = apply_unified_diff(dict(task.broken_files), task.gold_patch)
    broken = {p: task.broken_files[p] for p in original}
    mutants = gold_mutants(broken, original, cap=4, seed=mutation_seed(task))
    attempts = [dict(original), {}, *({m.path: m.text} for m in mutants), _hanging(task)]
    grader = Grader(task, task_dir, config=GraderConfig(scan=False, call_timeout_s=1.0))
    whole = grader.replay_many(attempts)
    # an order whose first call differs from gold's for the snapshot as the host counts it (one call does not: its
    # text differs, the host's judgement does not, and a tree stopped there is replayed in full, as asserted below)
    calls = [c["id"] for c in load_replay(task, task_dir)[0]]
    counted = set(whole[1].mismatches)
    seed = next(s for s in range(1000) if calls[_first(len(calls), s)] in counted)
    monkeypatch.setattr(replay_module, "order_seed", lambda: seed)
    stopped = grader.replay_many(attempts, stop_early=True)
    assert [v.ok for v in stopped] == [v.ok for v in whole] and not whole[1].ok and whole[0].ok
    assert [v.calls for v in stopped] == [v.calls for v in whole]
    # a rejected tree ran up to its first difference (a hanging one up to its timeout): what it found, the whole
    # replay finds too; the snapshot stopped after its first mismatching call, and so did each mutant unless the
    # first difference was one the host does not count (then it was replayed in full)
    assert all(set(s.mismatches) <= set(w.mismatches) for s, w in zip(stopped, whole, strict=True))
    for s, w in zip(stopped[1:-1], whole[1:-1], strict=True):
        assert len(s.mismatches) == 1 or s.mismatches == w.mismatches, (s, w)
    assert len(stopped[1].mismatches) == 1 < len(whole[1].mismatches)
    # a difference in text the host does not count (here: every text differs from gold's) stops a tree after one
    # call; gold's agrees with itself there, so its tree is replayed in full: still accepted, every call checked
    monkeypatch.setattr(replay_module, "judged_texts", lambda expected: dict.fromkeys(expected, "differs"))
    runs: list[tuple[list[int] | None, bool]] = []
    real_run_variants = replay_module.run_variants

    def run_variants(*args, **kwargs):
        runs.append((kwargs["only"], kwargs["differs"] is not None))
        return real_run_variants(*args, **kwargs)

    monkeypatch.setattr(replay_module, "run_variants", run_variants)
    again = grader.replay_many(attempts, stop_early=True)
    assert runs[0] == (None, True) and len(runs) == 2 and runs[1][1] is False and 0 in (runs[1][0] or [])
    assert [v.ok for v in again] == [v.ok for v in whole]
    assert len(again[1].mismatches) == 1  # the snapshot: its first call differs to the host too
    assert again[0].ok and again[0].calls == whole[0].calls


@pytest.mark.bwrap
@pytest.mark.slow
def test_a_mutant_s_tree_runs_alone_only_the_calls_that_reach_its_code(monkeypatch: pytest.MonkeyPatch) -> None:
    task_dir, tasks, _ = generated(TOOLZ, 2)
    grader_of = {t.task_id: Grader(t, task_dir, config=GraderConfig(scan=False, call_timeout_s=1.0)) for t in tasks}
    boxes: list[tuple[list, list[object]]] = []
    sent: list[bool] = []
    real_run_variants, real_launch = replay_module.run_variants, replay_module._launch

    def run_variants(*args, **kwargs):
        outs = real_run_variants(*args, **kwargs)
        boxes.append((kwargs["alone"], outs))
        return outs

    def launch(*args, **kwargs):
        real_launch(*args, **kwargs)
        with open(args[3] / "in" / "calls.pkl", "rb") as fh:  # what the box was given
            sent.append(any("lines" in c for c in pickle.load(fh)))

    narrowed = 0
    for task in tasks:
        grader = grader_of[task.task_id]
        calls = load_replay(task, task_dir)[0]
        assert calls and all("lines" in c for c in calls)  # every kept call says what gold's run of it reached
        mutants = task_mutants_of(task)
        # a mutant whose code no call runs (a line past the file's end), and gold's own text: neither can differ
        unreached = dataclasses.replace(mutants[0], reach=frozenset({10**6}))
        same = dataclasses.replace(mutants[0], text=apply_unified_diff(dict(task.broken_files), task.gold_patch)[mutants[0].path])  # fmt: skip
        every = [kind(v) for v in grader.replay_many([{m.path: m.text} for m in mutants], stop_early=True)]
        boxes.clear()
        with monkeypatch.context() as m:
            m.setattr(replay_module, "run_variants", run_variants)
            m.setattr(replay_module, "_launch", launch)
            got = replay_verdicts(grader, [*mutants, same])
            assert got == [*every, "pass"]  # the verdicts of every call alone
            assert replay_verdicts(grader, [unreached]) == [every[0]]  # its in-sequence run still sees every call
        alone, outs = boxes[0]
        want = [strength.reaching_calls(calls, m) for m in [*mutants, same]]
        assert alone == want
        for ids, out in zip(alone, outs, strict=True):
            if ids is not None and isinstance(out, dict):  # a narrowed tree ran alone only its calls
                assert {k for k in out if not k.endswith(SEQ)} <= set(ids)
                narrowed += len(ids) < len(calls)
        assert boxes[-1][0] == [frozenset()] and not {k for k in boxes[-1][1][0] if not k.endswith(SEQ)}
    assert narrowed  # some mutant's code is reached by some of the calls only
    assert sent and not any(sent)  # what gold's run reached stays with the host
    # a tree stopped at a difference the host does not count (here: every text differs) is run again, narrowed too:
    # the same verdicts, gold's outcomes standing for the calls it does not run alone
    task = tasks[0]
    mutants = task_mutants_of(task)
    every = [kind(v) for v in grader_of[task.task_id].replay_many([{m.path: m.text} for m in mutants])]
    monkeypatch.setattr(replay_module, "judged_texts", lambda expected: dict.fromkeys(expected, "differs"))
    boxes.clear()
    monkeypatch.setattr(replay_module, "run_variants", run_variants)
    assert replay_verdicts(grader_of[task.task_id], mutants) == every
    assert len(boxes) == 2 and boxes[1][0] == boxes[0][0]  # the second box: the trees run again, as narrowed


@pytest.mark.bwrap
def test_held_out_calls_run_alone_only_where_gold_s_run_reached_a_mutant_s_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    task_dir, tasks, _ = generated(TOOLZ, 2)
    spied: list[tuple[list, list[object]]] = []
    real_run_variants = strength.run_variants

    def run_variants(*args, **kwargs):
        outs = real_run_variants(*args, **kwargs)
        spied.append((kwargs["alone"], outs))
        return outs

    narrowed = survived = 0
    for task in tasks:
        grader = Grader(task, task_dir, config=GraderConfig(scan=False))
        original, mutants = strength.task_mutants(task, 10)
        gold = dataclasses.replace(mutants[0], text=original[mutants[0].path])
        held = strength.HeldOut(grader, original)
        calls = held.calls()
        assert calls and all("lines" in c for c in calls)  # each held-out call says what gold's run of it reached
        with grader.shared_base() as base:
            with monkeypatch.context() as m:
                m.setattr(strength, "reaching_calls", lambda calls, mutant: None)
                every = strength.held_out_verdicts(grader, [*mutants, gold], held, base)
            spied.clear()
            with monkeypatch.context() as m:
                m.setattr(strength, "run_variants", run_variants)
                got = strength.held_out_verdicts(grader, [*mutants, gold], held, base)
        assert got == every and got[-1] == "equivalent"  # the same verdicts as every call alone; gold is gold
        survived += got.count("survived")
        ((alone, outs),) = spied
        assert alone == [strength.reaching_calls(calls, m) for m in [*mutants, gold]]
        for ids, out in zip(alone, outs, strict=True):
            if ids is not None and isinstance(out, dict):  # a narrowed tree ran alone only its calls, all in sequence
                assert {k for k in out if not k.endswith(SEQ)} <= set(ids)
                narrowed += len(ids) < len(calls)
    assert survived and narrowed  # behaviour-changing mutants differ there; some reach only some calls


def test_the_trace_follows_a_call_into_the_threads_it_starts(tmp_path: Path) -> None:
    module = tmp_path / "pooled.py"
    module.write_text(
        "from concurrent.futures import ThreadPoolExecutor\n"
        "def work(x):\n"
        "    if x > 1:\n"
        "        return x * 2\n"
        "    return x\n"
        "def run(xs):\n"
        "    with ThreadPoolExecutor(2) as pool:\n"
        "        return list(pool.map(work, xs))\n"
    )
    spec = importlib.util.spec_from_file_location("pooled", module)
    assert spec is not None and spec.loader is not None
    pooled = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pooled)
    real = os.path.realpath(module)
    before = replay_box.REACH
    replay_box.REACH = {real: frozenset({3, 4, 5, 7})}
    try:
        got, reached = replay_box.reaching(lambda: pooled.run([1, 3]))
        _, alone = replay_box.reaching(lambda: pooled.work(1))
    finally:
        replay_box.REACH = before
    # the pool's workers ran lines 3-5: a mutant there changes this call's outcome
    assert got == [1, 6] and reached == {real: [3, 4, 5, 7]} and alone == {real: [3, 5]}


def task_mutants_of(task: FeatdelTask) -> list[Mutant]:
    return strength.task_mutants(task, 10)[1]


def test_the_box_judges_an_outcome_as_the_host_does() -> None:
    outcomes = [
        {"returned": ["int", 1], "args_after": []},
        {"raised": "ValueError", "args_after": [["int", 2]]},
        {"callable": [{"returned": ["str", "x"]}, {"raised": "KeyError"}], "args_after": []},
        {"timeout": 1.0},
        None,
    ]
    for outcome in outcomes:
        assert replay_box.judged_text(outcome) == json.dumps(judged(outcome), sort_keys=True)
    # gold's lenient or retyped marks are the host's: the text the box compares is the outcome's
    marked = {"returned": ["int", 1], "args_after": [], LENIENT: True, TYPE_LOOSE: True}
    assert judged_texts({"a": marked, "a" + SEQ: marked}) == {"a": replay_box.judged_text(outcomes[0])}


LOOP_UNDER_PYTEST = "\n\nimport sys as _sys\n\nif '_pytest' in _sys.modules:  # never in the replay's box\n    while True:\n        pass\n"
"""Appended to a gold file: a mutant that the replay passes and whose test run never ends."""


@pytest.mark.bwrap
@pytest.mark.slow
def test_a_mutant_whose_tests_outrun_their_limit_is_on_neither_side_of_the_rate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    task_dir, tasks, _ = generated(TOOLZ, 2)
    task = next(t for t in tasks if t.replay is not None and not t.unreplayed_targets)
    original = apply_unified_diff(dict(task.broken_files), task.gold_patch)
    path = task.targets[0].path
    looping = Mutant(path, 1, "statement", original[path] + LOOP_UNDER_PYTEST)
    grader = Grader(task, task_dir, config=GraderConfig(scan=False))
    with grader.shared_base() as base:
        assert replay_verdicts(grader, [looping], base=base) == ["pass"]  # the replay cannot tell it from gold
        assert verdict_of_tests(grader, looping, base, wall_s=2.0) == "timeout"  # under the served limit: unknown
        gold = Mutant(path, 1, "statement", original[path])
        assert verdict_of_tests(grader, gold, base, wall_s=2.0) == "pass"
        served = Sandbox(GradingSandbox(limits=GRADING_LIMITS.model_copy(update={"wall_seconds": 2.0})))
        strict = Grader(task, task_dir, sandbox=served, env=grader.env, config=GraderConfig(scan=False))
        assert verdict_of_tests(strict, looping, base, wall_s=2.0) == "fail"  # the served limit itself: rejected
    # a mutant whose calls never end in the replay: its first call through the target outruns the mutants' short
    # limit, and nothing else told it from gold
    hanging = Mutant(path, 1, "statement", _looping_first(original[path], task.targets[0].qualname))
    limits: list[float] = []
    real_run_variants = replay_module.run_variants

    def run_variants(*args, **kwargs):
        limits.append(kwargs["call_timeout_s"])
        return real_run_variants(*args, **kwargs)

    monkeypatch.setattr(replay_module, "run_variants", run_variants)
    short, served = MUTANT_CALL_TIMEOUT_S, grader.config.call_timeout_s
    assert short < served
    # gold runs the call it timed out on within the short limit: the mutant is counted apart
    with grader.shared_base() as base:
        assert replay_verdicts(grader, [hanging], base=base, gold=original) == ["timeout"]
    assert limits == [short, short]  # the mutants' box, then gold's on that call
    # gold's own run of it outlasts the short limit (or gold is not given): the served limit decides, and a call
    # past that is the grader's rejection
    slow_gold = {path: _sleeping_first(original[path], task.targets[0].qualname, seconds=short * 1.5)}
    for gold in (slow_gold, None):
        limits.clear()
        with grader.shared_base() as base:
            assert replay_verdicts(grader, [hanging], base=base, gold=gold) == ["rejected"]
        assert limits == ([short, short, served] if gold else [short, served])
    broken = {p: task.broken_files[p] for p in original}
    real = gold_mutants(broken, original, cap=10, seed=mutation_seed(task))
    monkeypatch.setattr(strength, "gold_mutants", lambda *a, **k: [*real, looping, hanging])
    score = mutation_score(task, task_dir, cap=12, sandbox=grader.sandbox, env=grader.env, tests_wall_s=2.0)
    measured = task.mutation  # generation's score: the same mutants but the looping and hanging ones
    assert measured is not None and (measured.mutants, measured.timed_out) == (len(real), 0)
    assert (score.mutants, score.timed_out) == (len(real) + 2, 2)
    assert (score.behaviour_changing, score.rejected, score.rate) == (
        measured.behaviour_changing,
        measured.rejected,
        measured.rate,
    )


def test_a_verdict_is_a_timeout_only_when_every_mismatched_call_it_ran_outran_its_limit() -> None:
    timeout, value = {"timeout": 1.0}, {"returned": ["int", 2], "args_after": []}
    assert only_timeouts(("a",), {"a": timeout})
    assert only_timeouts(("a", "b"), {"a": timeout})  # the calls after a timeout never ran
    assert not only_timeouts(("a", "b"), {"a": value, "b": timeout})  # a value told it from gold first
    assert not only_timeouts(("a",), {"a": value})
    assert not only_timeouts((), {"a": timeout})  # no mismatch: nothing timed out
    assert not only_timeouts(("a",), None)  # the box gave nothing back


def test_a_timed_out_child_is_killed_with_its_own_children() -> None:
    """A tree's child that runs out of time takes the call children it forked with it (its process group)."""
    r, w = os.pipe()  # held open by the grandchild alone once we close our end: EOF means it is gone

    def body(_fd: int) -> None:
        if os.fork() == 0:
            time.sleep(600)  # a call that never returns
            os._exit(0)
        time.sleep(600)

    data, status = _forked(body, 0.5, group=True)
    os.close(w)
    assert data is None and os.WIFSIGNALED(status)
    ready, _, _ = select.select([r], [], [], 60)
    assert ready and os.read(r, 1) == b"", "the grandchild outlived its parent's group kill"
    os.close(r)
