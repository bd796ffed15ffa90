"""A block or tail task is covered by the replay only through calls whose gold run executes the deleted lines: a
call of the enclosing function that never enters the block checks the rest of the function, not the task."""

from __future__ import annotations

import pickle
import sys
import textwrap
from pathlib import Path

import pytest
from corpus_support import write

from crf_prime.featdel import record
from crf_prime.featdel.deletion import apply_unified_diff
from crf_prime.featdel.generate import GenerateConfig, check_replay, generate, unreplayed
from crf_prime.featdel.grader import Grader, grade_changes
from crf_prime.featdel.models import FeatdelTask, Rejection
from crf_prime.featdel.record import deleted_lines, record_replay, split_reached, with_reach
from crf_prime.featdel.replay import targets_of
from crf_prime.featdel.replay_box import REACH, reaching

GATE = textwrap.dedent(
    '''\
    """Fixture: two blocks; the replay reaches one, and the other only under a setting a test changes."""

    STYLE = {"loud": False}


    def render(n):
        """Text for ``n`` in the module's style."""
        text = str(n)
        if STYLE["loud"]:
            text = text.upper() + "!"
            text = "<" + text + ">"
        return text


    def shout(n, times=1):
        """``n`` repeated ``times`` times, marked when repeated."""
        text = str(n)
        if times > 1:
            text = text * times
            text = text + "!"
        return text
    '''
)

GATE_TESTS = textwrap.dedent(
    """\
    from gate import STYLE, render, shout


    def test_render():
        assert render(2) == "2"
        STYLE["loud"] = True  # gold's replay outside this test reads loud False: this call is dropped
        try:
            assert render(3) == "<3!>"
        finally:
            STYLE["loud"] = False


    def test_shout():
        assert shout(2, 3) == "222!"
    """
)


def test_deleted_lines_are_the_original_lines_the_snapshot_lacks() -> None:
    original = "def f(x):\n    y = x\n    if y:\n        y += 1\n        y *= 2\n    return y\n"
    broken = "def f(x):\n    y = x\n    if y:\n        raise NotImplementedError\n    return y\n"
    assert deleted_lines(broken, original) == [4, 5]
    assert deleted_lines(original, original) == []
    assert deleted_lines("def f(x):\n    return x\n", "def f(x):\n    y = x\n    return x\n") == [2]


def test_the_box_reports_the_deleted_lines_a_call_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    src = "def f(x):\n    if x:\n        x = -x\n        x = x * 2\n    return x\n\n\ndef g(x):\n    return f(x)\n"
    namespace: dict = {}
    exec(compile(src, "/fixture/gate.py", "exec"), namespace)
    monkeypatch.setitem(REACH, "/fixture/gate.py", frozenset({3, 4}))
    assert reaching(lambda: namespace["g"](0)) == (0, {})
    assert reaching(lambda: namespace["g"](3)) == (-6, {"/fixture/gate.py": [3, 4]})
    assert sys.gettrace() is None  # the tracer is gone after the call
    # an iterator's deleted lines run when it is consumed: the whole outcome is traced
    lazy = "def h(n):\n    for i in range(n):\n        i = i + 1\n        yield i\n"
    exec(compile(lazy, "/fixture/lazy.py", "exec"), namespace)
    monkeypatch.setitem(REACH, "/fixture/lazy.py", frozenset({3}))
    assert reaching(lambda: list(namespace["h"](2)))[1] == {"/fixture/lazy.py": [3]}
    assert reaching(lambda: namespace["h"](2))[1] == {}
    # a line is watched in the code object that owns it: a nested function's, a comprehension's, a lambda's
    nested = (
        "def k(n):\n    def inner(m):\n        m = m + 1\n        return m\n"
        "    twice = lambda v: (\n        v * 2)\n    return [inner(i) for i in\n        range(n)], twice(n)\n"
    )
    exec(compile(nested, "/fixture/nested.py", "exec"), namespace)
    monkeypatch.setitem(REACH, "/fixture/nested.py", frozenset({3, 6, 8}))
    assert reaching(lambda: namespace["k"](2)) == (([1, 2], 4), {"/fixture/nested.py": [3, 6, 8]})
    assert reaching(lambda: namespace["k"](0)) == (([], 0), {"/fixture/nested.py": [6, 8]})


def test_reached_lines_are_taken_out_of_gold_outcomes(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    first = {
        "c0": {"returned": 1, "reached": {str(repo / "gate.py"): [10]}},
        "c0~1": {"returned": 2, "reached": {}},
        "c0@seq": {"returned": 1},
    }
    outcomes, ran = split_reached(first, repo)
    assert outcomes == {"c0": {"returned": 1}, "c0~1": {"returned": 2}, "c0@seq": {"returned": 1}}
    assert ran == {"c0": {"gate.py": {10}}, "c0~1": {}}
    keep = [{"id": "c0"}, {"id": "c0~1"}]
    assert with_reach(keep, ran, {"gate.py": [10, 11]}) == [
        {"id": "c0", "reaches": True},
        {"id": "c0~1", "reaches": False},
    ]
    assert with_reach(keep, ran, {"gate.py": [12]}) == [
        {"id": "c0", "reaches": False},
        {"id": "c0~1", "reaches": False},
    ]
    assert with_reach(keep, ran, {}) is keep  # whole bodies deleted: every call runs them


def _times(payload: bytes) -> object:
    args, kwargs, _method = pickle.loads(payload)
    return kwargs.get("times", args[1] if len(args) > 1 else 1)


def _check(render: FeatdelTask, shout: FeatdelTask, out: Path, cfg: GenerateConfig) -> None:
    """render(2) and the calls derived from it are replayed, but none enters the loud block (the call that did ran
    under the test's setting and is dropped): the block task has no replay coverage of its own. shout's block runs
    exactly when times > 1, and each kept call says so."""
    strict = cfg.model_copy(update={"allow_unreplayed": False})
    render_calls = Grader(render, out).replay_data()
    assert render_calls is not None and render_calls.calls and all(not c.reaches for c in render_calls.calls)
    assert unreplayed(render, out) == ("render",)
    verdict = check_replay(render, out, strict)
    assert isinstance(verdict, Rejection)
    assert (verdict.reason, verdict.detail) == ("no-replay-coverage", "no replayed call of render")
    shout_calls = Grader(shout, out).replay_data()
    assert shout_calls is not None and unreplayed(shout, out) == ()
    assert [c.reaches for c in shout_calls.calls] == [_times(c.payload) > 1 for c in shout_calls.calls]  # type: ignore[operator]
    assert any(c.reaches for c in shout_calls.calls) and not all(c.reaches for c in shout_calls.calls)
    assert check_replay(shout, out, strict) == shout


def _recorded_alone(task: FeatdelTask, out: Path) -> FeatdelTask:
    """``task`` with its replay recorded on its own (generation recorded the package's batch in one run)."""
    grader = Grader(task, out)
    original = apply_unified_diff(dict(task.broken_files), task.gold_patch)
    info, _dropped = record_replay(task, out, original, sandbox=grader.sandbox, env=grader.env)
    return task.model_copy(update={"replay": info})


@pytest.mark.slow
@pytest.mark.bwrap
def test_a_block_is_covered_only_by_calls_that_run_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = {"pyproject.toml": '[project]\nname = "gate"\nversion = "0.1"\n', "gate.py": GATE}
    src = write(tmp_path / "src", {**project, "tests/test_gate.py": GATE_TESTS})
    out = tmp_path / "out"
    cfg = GenerateConfig(source=str(src), out=out, max_tasks=4, workers=2, granularities=["block"], allow_unreplayed=True, mutants_per_task=0)  # fmt: skip
    tasks, _summary = generate(cfg)
    by = {t.targets[0].qualname: t for t in tasks}
    assert sorted(by) == ["render", "shout"] and all(t.granularity == "block" for t in tasks)
    assert by["render"].unreplayed_targets == ("render",) and by["shout"].unreplayed_targets == ()
    _check(by["render"], by["shout"], out, cfg)  # one recording for the package's batch
    render, shout = _recorded_alone(by["render"], out), _recorded_alone(by["shout"], out)
    _check(render, shout, out, cfg)  # each task recorded on its own

    # the defence off (every call of the enclosing function counts, as before): render's block task is served as if
    # its block were checked, and an agent that answers the one loud input the hidden test uses, instead of writing
    # the block, scores 1.0: the tests pass and no replayed call enters the block
    monkeypatch.setattr(record, "REACHING", frozenset())
    render = _recorded_alone(render, out)
    assert unreplayed(render, out) == ()
    served = check_replay(render, out, cfg.model_copy(update={"allow_unreplayed": False}))
    assert served == render.model_copy(update={"unreplayed_targets": ()})
    table = GATE.replace('text = text.upper() + "!"\n        text = "<" + text + ">"', 'return "<3!>"')
    assert table != GATE
    assert grade_changes(render, out, {"gate.py": table}).score == 1.0
    assert grade_changes(render, out, {"gate.py": GATE}).score == 1.0


@pytest.mark.slow
@pytest.mark.bwrap
def test_every_call_of_gold_s_first_box_says_which_deleted_lines_it_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    double = '\n\ndef double(n):\n    """``n`` twice, as text."""\n    text = str(n)\n    return text + text\n'
    tests = GATE_TESTS + "\n\ndef test_double():\n    from gate import double\n\n    assert double(4) == '44'\n"
    project = {"pyproject.toml": '[project]\nname = "gate"\nversion = "0.1"\n', "gate.py": GATE + double}
    src = write(tmp_path / "src", {**project, "tests/test_gate.py": tests})
    boxes: list[tuple[list[str], dict]] = []  # the first gold box of each recording: its calls' targets, its outcomes
    real = record.run_driver

    def run_driver(sandbox, env, task, run_dir, calls, **kw):
        got = real(sandbox, env, task, run_dir, calls, **kw)
        if kw.get("reach"):
            names = [t["qualname"] for t in targets_of(task)]
            boxes.append(([names[c["target"]] for c in calls], {c["id"]: got[c["id"]] for c in calls}))
        return got

    monkeypatch.setattr(record, "run_driver", run_driver)
    out = tmp_path / "out"
    cfg = GenerateConfig(source=str(src), out=out, max_tasks=6, workers=1, granularities=["function", "block"], allow_unreplayed=True, mutants_per_task=0)  # fmt: skip
    tasks, _summary = generate(cfg)
    kinds = {(t.granularity, t.targets[0].qualname) for t in tasks}
    assert {("function", "double"), ("block", "shout")} <= kinds and ("block", "double") not in kinds
    (traced,) = [b for b in boxes if "double" in b[0]]  # one recording for the batch, double's calls among them
    names, outcomes = traced
    assert all("reached" in outcome for outcome in outcomes.values())  # mutation testing narrows by them
    source = (GATE + double).splitlines()
    start = source.index("def double(n):")
    lines = [source.index(t, start) + 1 for t in ("    text = str(n)", "    return text + text")]  # its deleted body
    for name, outcome in zip(names, outcomes.values(), strict=True):
        if name == "double":
            assert [sorted(ls) for ls in outcome["reached"].values()] == [lines], outcome
    shout = next(t for t in tasks if t.granularity == "block" and t.targets[0].qualname == "shout")
    shout_calls = Grader(shout, out).replay_data()
    assert shout_calls is not None and any(c.reaches for c in shout_calls.calls)
    assert [c.reaches for c in shout_calls.calls] == [_times(c.payload) > 1 for c in shout_calls.calls]  # type: ignore[operator]
