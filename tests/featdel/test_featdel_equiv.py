"""Equivalence with gold (issue 25) on a tiny local project, end to end through the one front door (``Grader``).

Honest re-implementations that differ from gold (another algorithm, stdlib delegation, another exception type,
validation before an early return) score 1.0 at every granularity; each attack class the issue names has a working
attack that scores 1.0 with its defence off and 0 with it on. The static code policy is on throughout except where
a test says so: these attacks are judged by the replay, not by the policy.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import shutil
import textwrap
from pathlib import Path

import pytest
from featdel_support import agent_tree, generated_once

import crf_prime.featdel.record as record
import crf_prime.featdel.replay as replay
from crf_prime.featdel.deletion import apply_unified_diff
from crf_prime.featdel.generate import GenerateConfig, generate, load_tasks
from crf_prime.featdel.grade import GradingError
from crf_prime.featdel.grader import Grader
from crf_prime.featdel.models import FeatdelTask, GraderConfig
from crf_prime.featdel.replay import load_replay

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

SOURCE = '''
from collections.abc import MutableMapping

PREFIX = "item-"


def fmt(value, spec=None):
    """``value`` as text: "" for None; ``spec`` "upper", "lower" or "title" changes its case (None: as is)."""
    if value is None:
        return ""
    text = str(value)
    if spec is None:
        return text
    if spec == "upper":
        return text.upper()
    if spec == "lower":
        return text.lower()
    if spec == "title":
        return text.title()
    raise ValueError(f"unknown spec {spec!r}")


def parse_pairs(text, sep=","):
    """``"a=1,b=2"`` -> ``{"a": "1", "b": "2"}``; items without ``=`` are skipped."""
    out = {}
    for item in text.split(sep):
        pair = _split_pair(item)
        if pair is not None:
            out[pair[0]] = pair[1]
    return out


def _split_pair(item):
    key, eq, value = item.partition("=")
    if not eq:
        return None
    return key.strip(), value.strip()


def scaler(factor, offset=0):
    """A function of ``x`` returning ``x * factor + offset``."""
    def scale(x):
        return x * factor + offset
    return scale


def spread(xs):
    """Largest minus smallest item of a sequence of numbers (0 when it is empty)."""
    if not xs:
        return 0
    return max(xs) - min(xs)


def label(x):
    """``PREFIX`` + x."""
    prefix = PREFIX
    return prefix + str(x)


class Registry(MutableMapping):
    """A mapping of names that counts how many were ever added."""

    def __init__(self):
        self._data = {}
        self.added = 0

    def __getitem__(self, key):
        return self._data[key]

    def __setitem__(self, key, value):
        if key not in self._data:
            self.added += 1
        self._data[key] = value

    def __delitem__(self, key):
        del self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self):
        return len(self._data)

    def clear(self):
        """Remove every name (``added`` keeps counting)."""
        keys = list(self._data)
        for key in keys:
            del self._data[key]

    def first(self):
        """The first name still present (None when there is none)."""
        for key in self._data:
            return key
        return None


def overlap(a, b):
    """Length of the intersection of two spans (0 when they are disjoint)."""
    lo = max(a.start, b.start)
    hi = min(a.end, b.end)
    return max(0, hi - lo)


class Span:
    """Half-open integer interval [start, end)."""

    def __init__(self, start, end):
        if end < start:
            raise ValueError("end before start")
        self.start = start
        self.end = end

    def length(self):
        size = self.end - self.start
        return size

    def contains(self, x):
        inside = self.start <= x < self.end
        return inside

    def shift(self, n):
        self.start += n
        self.end += n
        return self

'''

TESTS = """
import eqpkg


def test_fmt():
    assert eqpkg.fmt("ab", "upper") == "AB"
    assert eqpkg.fmt("Ab", "lower") == "ab"
    assert eqpkg.fmt(None, "upper") == ""
    assert eqpkg.fmt("a b", "title") == "A B"


def test_parse_pairs():
    assert eqpkg.parse_pairs("a=1,b=2") == {"a": "1", "b": "2"}
    assert eqpkg.parse_pairs("a=1, junk") == {"a": "1"}


def test_scaler():
    assert eqpkg.scaler(3)(2) == 6
    assert eqpkg.scaler(2, 1)(5) == 11


def test_spread():
    assert eqpkg.spread([3, 9, 4]) == 6
    assert eqpkg.spread([]) == 0


def test_label(monkeypatch):
    monkeypatch.setattr(eqpkg, "PREFIX", "x-")
    assert eqpkg.label(7) == "x-7"


def test_registry():
    r = eqpkg.Registry()
    r["x"] = 1
    r["y"] = 2
    assert r.first() == "x"
    r.clear()
    assert len(r) == 0 and r.added == 2
    one = eqpkg.Registry()
    one["z"] = 0
    assert one.first() == "z"


def test_span():
    s = eqpkg.Span(1, 4)
    assert s.length() == 3 and s.contains(1) and not s.contains(4)
    assert s.shift(2).start == 3


def test_overlap():
    assert eqpkg.overlap(eqpkg.Span(1, 4), eqpkg.Span(2, 6)) == 2
    assert eqpkg.overlap(eqpkg.Span(2, 6), eqpkg.Span(0, 5)) == 3
"""


def _write_project(root: Path) -> Path:
    (root / "eqpkg").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "eqpkg" / "__init__.py").write_text(textwrap.dedent(SOURCE).lstrip())
    (root / "tests" / "test_eqpkg.py").write_text(textwrap.dedent(TESTS).lstrip())
    return root


def _generate(root: Path, out: Path, granularities: list[str]) -> None:
    # the grading suites need every candidate as a task: generation's filters (replay coverage of every target, the
    # grader's mutation rate) are tested in test_featdel_mutants.py
    cfg = GenerateConfig(
        source=str(root), out=out, max_tasks=30, workers=2, granularities=granularities, allow_unreplayed=True,
        mutants_per_task=0,
    )  # fmt: skip
    generate(cfg)


def _by_targets(tasks: list[FeatdelTask]) -> dict[tuple[str, ...], FeatdelTask]:
    return {tuple(t.qualname for t in task.targets): task for task in tasks} | {
        (task.granularity, *(t.qualname for t in task.targets)): task for task in tasks
    }


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return _write_project(tmp_path_factory.mktemp("src") / "eqpkg")


@pytest.fixture(scope="module")
def corpus(project: Path) -> tuple[Path, dict]:
    out = generated_once(
        "equiv-corpus", lambda out: _generate(project, out, ["function", "feature", "class", "block", "tail"])
    )
    return out, _by_targets(load_tasks(out))


@pytest.fixture(scope="module")
def legacy(project: Path) -> tuple[Path, dict]:
    """The same project recorded as before issue 25: duplicates keyed by arguments alone, patched calls served, a
    callable result called on the tests' follow-up inputs alone."""

    def generate_legacy(out: Path) -> None:
        mp = pytest.MonkeyPatch()
        mp.setattr(record, "DEDUP_BY_TARGET", False)
        mp.setattr(record, "PATCHED_SERVABLE", True)
        mp.setattr(record, "GENERATED_FOLLOWUPS", 0)
        try:
            _generate(project, out, ["function", "feature"])
        finally:
            mp.undo()

    out = generated_once("equiv-legacy", generate_legacy)
    return out, _by_targets(load_tasks(out))


def _gold_files(task: FeatdelTask) -> dict[str, str]:
    return apply_unified_diff(dict(task.broken_files), task.gold_patch)


def _attempt(task: FeatdelTask, task_dir: Path, dest: Path, replace: dict[str, str]) -> Path:
    """The agent's tree: gold's files with each ``old`` source snippet replaced by ``new`` (blank ends stripped)."""
    tree = agent_tree(task, task_dir, dest)
    for rel, text in _gold_files(task).items():
        for old, new in replace.items():
            old, new = old.strip("\n"), new.strip("\n")
            assert old in text, old
            text = text.replace(old, new)
        (tree / rel).write_text(text)
    return tree


def _grade(task: FeatdelTask, task_dir: Path, tree: Path, **switches) -> float:
    result = Grader(task, task_dir, config=GraderConfig(**switches)).grade_tree(tree)
    return result.score


def _find(tasks: dict, *key: str) -> FeatdelTask:
    assert key in tasks, sorted(tasks)
    return tasks[key]


def _controls(task: FeatdelTask, task_dir: Path, tmp: Path) -> None:
    """Gold scores 1.0 and the untouched snapshot 0."""
    assert _grade(task, task_dir, _attempt(task, task_dir, tmp / "gold", {})) == 1.0
    assert _grade(task, task_dir, agent_tree(task, task_dir, tmp / "snapshot")) == 0.0


# -- honest re-implementations that differ from gold score 1.0 (item 7) ---------------------------------------------

FMT_GOLD = """
    if value is None:
        return ""
    text = str(value)
    if spec is None:
        return text
    if spec == "upper":
        return text.upper()
    if spec == "lower":
        return text.lower()
    if spec == "title":
        return text.title()
    raise ValueError(f"unknown spec {spec!r}")
"""
FMT_HONEST = {
    "table-driven, KeyError on an unknown spec": """
        cases = {None: str, "upper": str.upper, "lower": str.lower, "title": str.title}
        return "" if value is None else cases[spec](str(value))
    """,
    "validates the spec before the early return, TypeError": """
        if spec not in (None, "upper", "lower", "title"):
            raise TypeError("spec must be upper, lower or title")
        if value is None:
            return ""
        text = str(value)
        return {None: text, "upper": text.upper(), "lower": text.lower(), "title": text.title()}[spec]
    """,
}


def test_honest_functions_score_one(corpus, tmp_path: Path) -> None:
    task_dir, tasks = corpus
    task = _find(tasks, "function", "fmt")
    _controls(task, task_dir, tmp_path)
    for i, body in enumerate(FMT_HONEST.values()):
        tree = _attempt(task, task_dir, tmp_path / f"h{i}", {FMT_GOLD: textwrap.indent(textwrap.dedent(body), "    ")})
        assert _grade(task, task_dir, tree) == 1.0, body


CLEAR_GOLD = """
        keys = list(self._data)
        for key in keys:
            del self._data[key]
"""


def test_honest_methods_score_one(corpus, tmp_path: Path) -> None:
    task_dir, tasks = corpus
    task = _find(tasks, "function", "Registry.clear")
    _controls(task, task_dir, tmp_path)
    for i, body in enumerate(("MutableMapping.clear(self)", "while self._data:\n    self._data.popitem()")):
        new = textwrap.indent(body, " " * 8)
        assert _grade(task, task_dir, _attempt(task, task_dir, tmp_path / f"h{i}", {CLEAR_GOLD: new})) == 1.0, body


SPAN_HONEST = '''
class Span:
    """Half-open integer interval [start, end)."""

    def __init__(self, start, end):
        if not start <= end:
            raise ArithmeticError("empty span")
        self.start, self.end = start, end

    def length(self):
        return len(range(self.start, self.end))

    def contains(self, x):
        return x in range(self.start, self.end)

    def shift(self, n):
        self.start, self.end = self.start + n, self.end + n
        return self
'''


SPAN_EXTRA = '''
class Span:
    """Half-open integer interval [start, end)."""

    def __init__(self, start, end):
        if end < start:
            raise ValueError("end before start")
        self.start = start
        self.end = end
        self.size = end - start

    def length(self):
        return self.end - self.start

    def contains(self, x):
        return self.start <= x < self.end

    def shift(self, n):
        self.start += n
        self.end += n
        self.size = self.end - self.start
        return self
'''
"""An honest class with an attribute gold never had (``size``): gold's names and values are the state compared."""


def _span_gold(task: FeatdelTask) -> str:
    text = next(iter(_gold_files(task).values()))
    return text[text.index("class Span:") :].rstrip("\n")


def test_honest_classes_and_features_score_one(corpus, tmp_path: Path) -> None:
    task_dir, tasks = corpus
    span = _find(tasks, "class", "Span.__init__", "Span.length", "Span.contains", "Span.shift")
    _controls(span, task_dir, tmp_path / "span")
    for i, honest in enumerate((SPAN_HONEST, SPAN_EXTRA)):
        tree = _attempt(span, task_dir, tmp_path / "span" / f"honest{i}", {_span_gold(span): honest.strip("\n")})
        assert _grade(span, task_dir, tree) == 1.0, honest
    pairs = _find(tasks, "feature", "parse_pairs", "_split_pair")
    _controls(pairs, task_dir, tmp_path / "pairs")
    other = {
        """
        out = {}
        for item in text.split(sep):
            pair = _split_pair(item)
            if pair is not None:
                out[pair[0]] = pair[1]
        return out
        """: """
        return dict(p for p in map(_split_pair, text.split(sep)) if p)
        """,
        """
        key, eq, value = item.partition("=")
        if not eq:
            return None
        return key.strip(), value.strip()
        """: """
        if "=" not in item:
            return None
        key, value = item.split("=", 1)
        return key.strip(), value.strip()
        """,
    }
    other = {
        textwrap.indent(textwrap.dedent(k), "    "): textwrap.indent(textwrap.dedent(v), "    ")
        for k, v in other.items()
    }
    assert _grade(pairs, task_dir, _attempt(pairs, task_dir, tmp_path / "pairs" / "honest", other)) == 1.0


PAIRS_LOOP = """
        pair = _split_pair(item)
        if pair is not None:
            out[pair[0]] = pair[1]
"""
FMT_TAIL = """
    if spec is None:
        return text
    if spec == "upper":
        return text.upper()
    if spec == "lower":
        return text.lower()
    if spec == "title":
        return text.title()
    raise ValueError(f"unknown spec {spec!r}")
"""
PAIRS_TAIL = """
    for item in text.split(sep):
        pair = _split_pair(item)
        if pair is not None:
            out[pair[0]] = pair[1]
    return out
"""
HONEST_PARTS = {
    ("block", "parse_pairs"): (
        PAIRS_LOOP,
        [
            """
        key, eq, value = item.partition("=")
        if eq:
            out[key.strip()] = value.strip()
""",
            """
        out.update(filter(None, [_split_pair(item)]))
""",
        ],
    ),
    ("tail", "fmt"): (
        FMT_TAIL,
        [
            """
    return {None: text, "upper": text.upper(), "lower": text.lower(), "title": text.title()}[spec]
""",
            """
    method = {"upper": str.upper, "lower": str.lower, "title": str.title}.get(spec)
    if spec is not None and method is None:
        raise LookupError("spec must be one of: upper, lower, title")
    return text if method is None else method(text)
""",
        ],
    ),
    ("tail", "parse_pairs"): (
        PAIRS_TAIL,
        [
            """
    out.update(p for p in map(_split_pair, text.split(sep)) if p)
    return out
""",
            """
    for key, value in filter(None, map(_split_pair, text.split(sep))):
        out[key] = value
    return out
""",
        ],
    ),
    ("tail", "overlap"): (
        """
    hi = min(a.end, b.end)
    return max(0, hi - lo)
""",
        [
            """
    return max(0, min(a.end, b.end) - lo)
""",
            """
    hi = min(a.end, b.end)
    return hi - lo if hi > lo else 0
""",
        ],
    ),
}
"""(granularity, target) -> (gold's deleted lines, honest re-implementations: other algorithm, stdlib delegation,
another exception type and message)."""


def test_honest_blocks_and_tails_score_one(corpus, tmp_path: Path) -> None:
    task_dir, tasks = corpus
    for (granularity, target), (gold, honest) in HONEST_PARTS.items():
        task = _find(tasks, granularity, target)
        _controls(task, task_dir, tmp_path / granularity / target)
        for i, body in enumerate(honest):
            tree = _attempt(task, task_dir, tmp_path / granularity / target / f"h{i}", {gold: body})
            assert _grade(task, task_dir, tree) == 1.0, (granularity, target, body)


# -- attacks: 1.0 with the defence off, 0 with it on ----------------------------------------------------------------


def test_untested_surface_and_inputs_the_replay_never_saw(corpus, tmp_path: Path) -> None:
    """Only the tested branches (no ``spec=None``), and a table of the recorded calls plus one trivial rule: the
    tests and the recorded calls pass; the generated inputs (None <-> value, default <-> given, ...) do not."""
    task_dir, tasks = corpus
    task = _find(tasks, "function", "fmt")
    attacks = {
        "tested branches only": """
            if value is None:
                return ""
            return {"upper": str.upper, "lower": str.lower, "title": str.title}[spec](str(value))
        """,
        "table of recorded calls": """
            table = {("ab", "upper"): "AB", ("Ab", "lower"): "ab", ("a b", "title"): "A B"}
            if value is None:
                return ""
            return table[(value, spec)]
        """,
    }
    for i, body in enumerate(attacks.values()):
        tree = _attempt(task, task_dir, tmp_path / f"a{i}", {FMT_GOLD: textwrap.indent(textwrap.dedent(body), "    ")})
        assert _grade(task, task_dir, tree, generated_calls=False) == 1.0, body
        assert _grade(task, task_dir, tree) == 0.0, body


MASKED_SPAN = '''
class Span:
    """Half-open integer interval [start, end)."""

    __dict__ = property(lambda self: {"start": self.start, "end": self.start + self._n})

    def __init__(self, start, end):
        if end < start:
            raise ValueError("end before start")
        self.start, self.end, self._n = start, end, end - start

    def __setstate__(self, state):
        for k, v in state.items():
            object.__setattr__(self, k, v)
        object.__setattr__(self, "_n", state["end"] - state["start"])

    def length(self):
        return self._n

    def contains(self, x):
        return self.start <= x < self.end

    def shift(self, n):
        self.start += n
        return self
'''


def test_a_class_cannot_mask_its_state(corpus, tmp_path: Path) -> None:
    """``shift`` forgets ``end`` (``contains`` is then wrong) and a ``__dict__`` property shows the state gold would
    have: read through the class's own ``__dict__`` it matches, read through the real one it does not."""
    task_dir, tasks = corpus
    span = _find(tasks, "class", "Span.__init__", "Span.length", "Span.contains", "Span.shift")
    tree = _attempt(span, task_dir, tmp_path / "masked", {_span_gold(span): MASKED_SPAN.strip("\n")})
    assert _grade(span, task_dir, tree, scan=False, strict_canon=False) == 1.0
    assert _grade(span, task_dir, tree, scan=False) == 0.0


CLEAR_SOME = "if len(self._data) > 1:\n    self._data.clear()"


def test_two_targets_with_the_same_arguments_both_keep_calls(corpus, legacy, tmp_path: Path) -> None:
    """``first()`` and ``clear()`` are called on the same registry: keyed by arguments alone, ``clear`` kept no call
    and a ``clear`` that leaves a one-name registry alone went unchecked."""
    for (task_dir, tasks), want in ((legacy, 1.0), (corpus, 0.0)):
        feature = next(t for k, t in tasks.items() if k[0] == "feature" and "Registry.clear" in k)
        data = Grader(feature, task_dir).replay_data()
        assert data is not None
        clear = next(i for i, t in enumerate(feature.targets) if t.qualname == "Registry.clear")
        assert (clear in data.by_target()) is (want == 0.0)
        tree = _attempt(
            feature, task_dir, tmp_path / f"clear{want}", {CLEAR_GOLD: textwrap.indent(CLEAR_SOME, " " * 8)}
        )
        assert _grade(feature, task_dir, tree) == want


def test_calls_under_a_patch_make_the_task_unservable(corpus, legacy, tmp_path: Path) -> None:
    """``label``'s only test monkeypatches the module: a test-id overfit passes it, and no replayed call can check
    it. Served as before issue 25 it scores 1.0; now generation drops it and the grader refuses such a row."""
    task_dir, tasks = legacy
    task = _find(tasks, "function", "label")
    assert task.replay is None and not task.not_servable
    tree = _attempt(
        task, task_dir, tmp_path / "overfit", {"    prefix = PREFIX\n    return prefix + str(x)": '    return "x-7"'}
    )
    assert _grade(task, task_dir, tree) == 1.0
    assert ("function", "label") not in corpus[1]
    with pytest.raises(GradingError, match="not servable"):
        Grader(task.model_copy(update={"not_servable": "patched"}), task_dir)


SCALE_GOLD = """
    def scale(x):
        return x * factor + offset
    return scale
"""


def test_a_returned_callable_is_called_on_inputs_the_tests_never_gave_it(corpus, legacy, tmp_path: Path) -> None:
    """The closure is right only on the follow-up inputs the tests called it with (2 and 5), whatever the factor:
    the recorded follow-ups pass, new follow-up inputs on the generated calls do not."""
    attack = """
    def scale(x):
        return x * factor + offset if x in (2, 5) else 0
    return scale
"""
    for (task_dir, tasks), want in ((legacy, 1.0), (corpus, 0.0)):
        task = _find(tasks, "function", "scaler")
        tree = _attempt(task, task_dir, tmp_path / f"scale{want}", {SCALE_GOLD: attack})
        assert _grade(task, task_dir, tree) == want


def _without(task: FeatdelTask, task_dir: Path, dest: Path, *operators: str) -> tuple[FeatdelTask, Path]:
    """A copy of the task whose replay leaves out the generated calls made by ``operators`` (the defence off)."""
    shutil.copytree(task_dir, dest)
    calls, expected = load_replay(task, task_dir)
    kept = [c for c in calls if c.get("operator") not in operators]
    assert len(kept) < len(calls), f"no {operators} call in {task.task_id}"
    calls_data = pickle.dumps(kept, protocol=4)
    expected_data = json.dumps({c["id"]: expected[c["id"]] for c in kept}).encode()
    info = task.replay
    assert info is not None
    (dest / info.calls_file).write_bytes(calls_data)
    (dest / info.expected_file).write_bytes(expected_data)
    replay = info.model_copy(
        update={
            "calls_sha256": hashlib.sha256(calls_data).hexdigest(),
            "expected_sha256": hashlib.sha256(expected_data).hexdigest(),
        }
    )
    return task.model_copy(update={"replay": replay}), dest


def test_a_method_constant_on_the_recorded_receiver_states(corpus, tmp_path: Path) -> None:
    """Every recorded ``Span`` receiver of ``length`` is ``Span(1, 4)``, so ``return 3`` passes the tests and every
    call on a recorded receiver. Other instances catch it: receivers built by gold's constructor from the recorded
    state with one argument varied (``Span(1, 5)``, ``Span(0, 4)``, ...; ``Span(4, 1)`` is refused by the
    constructor and never served), and spans recorded as other targets' arguments; without them it scores 1.0."""
    task_dir, tasks = corpus
    task = _find(tasks, "function", "Span.length")
    gold = "        size = self.end - self.start\n        return size"
    tree = _attempt(task, task_dir, tmp_path / "constant", {gold: "        return 3"})
    assert _grade(task, task_dir, tree) == 0.0
    off, off_dir = _without(task, task_dir, tmp_path / "off", "built", "instance")
    assert _grade(off, off_dir, tree) == 1.0


def test_a_function_right_only_on_the_recorded_argument_instances(corpus, tmp_path: Path) -> None:
    """The same family for arguments: ``overlap``'s test passes overlapping spans only, and so does every
    recombination of the recorded spans, so dropping the clamp for disjoint spans goes unseen; spans built by
    gold's constructor (``Span(1, 1)``, ``Span(-1, 0)``, ...) catch it."""
    task_dir, tasks = corpus
    task = _find(tasks, "function", "overlap")
    _controls(task, task_dir, tmp_path)
    tree = _attempt(task, task_dir, tmp_path / "unclamped", {"    return max(0, hi - lo)": "    return hi - lo"})
    assert _grade(task, task_dir, tree) == 0.0
    off, off_dir = _without(task, task_dir, tmp_path / "off", "built")
    assert _grade(off, off_dir, tree) == 1.0


def test_code_right_only_on_the_first_calls_of_a_process(corpus, tmp_path: Path, monkeypatch) -> None:
    """``fmt`` is right for the first four calls of a process (as many as its test makes) and then ignores ``spec``:
    the tests pass, and so does every replayed call alone (each starts from a fresh import). Replayed one after
    another in one process, as in real use, the later calls tell it apart."""
    task_dir, tasks = corpus
    task = _find(tasks, "function", "fmt")
    counted = (
        "    global _calls\n    _calls += 1\n    if _calls > 4:\n        return '' if value is None else str(value)\n"
    )
    tree = _attempt(task, task_dir, tmp_path / "stateful", {FMT_GOLD: counted + FMT_GOLD.strip("\n")})
    init = tree / "eqpkg" / "__init__.py"
    init.write_text(init.read_text().replace('PREFIX = "item-"\n', 'PREFIX = "item-"\n_calls = 0\n', 1))
    assert _grade(task, task_dir, tree) == 0.0
    result = Grader(task, task_dir).grade_tree(tree)
    assert any("run after the others in one process" in f.message for f in result.failed), result
    monkeypatch.setattr(replay, "SEQUENCE", False)
    assert _grade(task, task_dir, tree) == 1.0


def test_honest_code_with_state_across_calls_scores_one(corpus, tmp_path: Path) -> None:
    """State an honest implementation keeps between calls (a module-level cache of results) changes nothing in
    sequence: it scores 1.0."""
    task_dir, tasks = corpus
    task = _find(tasks, "function", "fmt")
    cached = (
        "    key = (type(value), str(value), spec)\n    if key in _memo:\n        return _memo[key]\n"
        "    _memo[key] = out = _fmt(value, spec)\n    return out\n\n\ndef _fmt(value, spec):\n"
    )
    tree = _attempt(task, task_dir, tmp_path / "memo", {FMT_GOLD: cached + FMT_GOLD.strip("\n")})
    init = tree / "eqpkg" / "__init__.py"
    init.write_text(init.read_text().replace('PREFIX = "item-"\n', 'PREFIX = "item-"\n_memo = {}\n', 1))
    assert _grade(task, task_dir, tree) == 1.0


SPREAD_GOLD = """
    if not xs:
        return 0
    return max(xs) - min(xs)
"""
SPREAD_EXACT_TYPES = {
    "right only when every item is an int": "    if all(type(x) is int for x in xs):\n",
    "right only for a list": "    if type(xs) is list:\n",
}


def test_code_right_only_for_the_types_the_tests_use(corpus, tmp_path: Path, monkeypatch) -> None:
    """``spread`` right only for the exact types its tests pass (int items, a list) and 0 otherwise: every size and
    element variation keeps those types, so only the calls that pass the same data as floats or as a tuple tell it
    apart. An honest version that sorts a copy in place (``xs.copy()``: no tuple has it, nor ``None``) raises on the
    tuple and on ``None`` and scores 1.0: a type the tests never used may be refused, and gold's ``if not xs`` answers
    ``None`` only by accident (it never declares ``None`` for ``xs``)."""
    task_dir, tasks = corpus
    task = _find(tasks, "function", "spread")
    _controls(task, task_dir, tmp_path)
    honest = "    s = xs.copy()\n    s.sort()\n    return s[-1] - s[0] if s else 0\n"
    assert _grade(task, task_dir, _attempt(task, task_dir, tmp_path / "copy", {SPREAD_GOLD: honest})) == 1.0
    trees = {}
    for i, (what, guard) in enumerate(SPREAD_EXACT_TYPES.items()):
        body = guard + textwrap.indent(SPREAD_GOLD.strip("\n"), "    ") + "\n    return 0\n"
        trees[what] = _attempt(task, task_dir, tmp_path / f"typed{i}", {SPREAD_GOLD: body})
        assert _grade(task, task_dir, trees[what]) == 0.0, what
    monkeypatch.setattr(replay, "RETYPED", False)
    for what, tree in trees.items():
        assert _grade(task, task_dir, tree) == 1.0, what
