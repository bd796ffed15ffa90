"""Kinds of input the tests never pass, end to end through the one front door (``Grader``), on a tiny local project.

Streams: a function that returns an iterator over its input is replayed on a long stream of a recorded list's
items. An eager rewrite (every input read into a list first, then gold's logic) returns the same items as gold on
every finite input the tests and the other generated calls pass: it scores 1.0 without the stream calls and 0 with
them. Honest rewrites that read their input at another pace score 1.0, and a function whose gold returns no iterator
keeps no stream call (an honest ``xs[0]`` is not judged on an iterator the tests never passed).

Mixed numbers: a list of ints with one item as its equal float. Items compared by their text (``repr``) look
distinct there where ``==`` says they are not: such a rewrite scores 1.0 without those calls and 0 with them.
"""

from __future__ import annotations

import pickle
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from featdel_support import agent_tree, generated_once

from crf_prime.featdel.deletion import apply_unified_diff
from crf_prime.featdel.generate import GenerateConfig, generate, load_tasks
from crf_prime.featdel.grader import Grader
from crf_prime.featdel.inputs import STAND_IN, STREAM
from crf_prime.featdel.models import FeatdelTask
from crf_prime.featdel.record import write_replay
from crf_prime.featdel.replay import SEQ, load_replay

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

SOURCE = '''
def differ(*seqs):
    """Tuples of the items at each position of ``seqs`` (iterables, read as the result is: any may be endless) where
    they are not all equal, up to the shortest."""
    for items in zip(*seqs):
        if any(x != items[0] for x in items[1:]):
            yield items


def running(xs, start=0):
    """Running totals of ``xs`` from ``start``, as an iterator (``xs`` is read as the result is)."""
    total = start
    for x in xs:
        total += x
        yield total


def distinct(xs):
    """Whether no two items of ``xs`` are equal."""
    seen = set()
    for x in xs:
        if x in seen:
            return False
        seen.add(x)
    return True


def first(xs):
    """The first item of a non-empty sequence."""
    for x in xs:
        return x
    raise IndexError("empty")
'''

TESTS = """
import streampkg


def test_differ():
    assert list(streampkg.differ([1, 2, 3], [1, 5, 3])) == [(2, 5)]
    assert list(streampkg.differ([1, 2], [1, 2], [0, 2])) == [(1, 1, 0)]


def test_running():
    assert list(streampkg.running([1, 2, 3])) == [1, 3, 6]
    assert list(streampkg.running([4, 1], start=1)) == [5, 6]


def test_distinct():
    assert streampkg.distinct([1, 2, 3]) is True
    assert streampkg.distinct([1, 2, 1]) is False
    assert streampkg.distinct(["a", "b"]) is True


def test_first():
    assert streampkg.first([3, 4]) == 3
    assert streampkg.first((5,)) == 5
"""

DIFFER_GOLD = """
    for items in zip(*seqs):
        if any(x != items[0] for x in items[1:]):
            yield items
"""
RUNNING_GOLD = """
    total = start
    for x in xs:
        total += x
        yield total
"""
DISTINCT_GOLD = """
    seen = set()
    for x in xs:
        if x in seen:
            return False
        seen.add(x)
    return True
"""
FIRST_GOLD = """
    for x in xs:
        return x
    raise IndexError("empty")
"""


def _generated(tmp_path_factory, package: str, source: str, tests: str, name: str) -> tuple[Path, dict]:
    """Tasks of a one-module local project (generated once per run), by target."""
    root = tmp_path_factory.mktemp("src") / package
    (root / package).mkdir(parents=True)
    (root / "tests").mkdir()
    (root / package / "__init__.py").write_text(textwrap.dedent(source).lstrip())
    (root / "tests" / f"test_{package}.py").write_text(textwrap.dedent(tests).lstrip())

    def run(out: Path) -> None:
        cfg = GenerateConfig(
            source=str(root), out=out, max_tasks=10, workers=2, granularities=["function"], mutants_per_task=0,
            allow_unreplayed=True,
        )  # fmt: skip
        generate(cfg)

    out = generated_once(name, run)
    return out, {t.targets[0].qualname: t for t in load_tasks(out)}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, dict[str, FeatdelTask]]:
    return _generated(tmp_path_factory, "streampkg", SOURCE, TESTS, "streams-corpus")


def _attempt(task: FeatdelTask, task_dir: Path, dest: Path, gold: str, body: str) -> Path:
    tree = agent_tree(task, task_dir, dest)
    for rel, text in apply_unified_diff(dict(task.broken_files), task.gold_patch).items():
        old, new = gold.strip("\n"), textwrap.indent(textwrap.dedent(body), "    ").strip("\n")
        assert old in text, old
        (tree / rel).write_text(text.replace(old, new))
    return tree


def _streams(task: FeatdelTask, task_dir: Path) -> list[dict]:
    return [c for c in load_replay(task, task_dir)[0] if c.get("operator") == STREAM]


def _mixed(call: dict) -> bool:
    """Whether a call passes a list or tuple holding both ints and floats."""
    args, kwargs, _ = pickle.loads(call["payload"])
    kinds = [{type(x) for x in v} for v in (*args, *kwargs.values()) if type(v) in (list, tuple)]
    return any({int, float} <= k for k in kinds)


def _without(task: FeatdelTask, task_dir: Path, dest: Path, leave_out) -> tuple[FeatdelTask, Path]:
    """The task with the calls ``leave_out`` picks left out of its replay (the grader as it was before them), in
    ``dest``."""
    calls, expected = load_replay(task, task_dir)
    gone = {c["id"] for c in calls if leave_out(c)}
    assert gone
    keep = [c for c in calls if c["id"] not in gone]
    left = {i: want for i, want in expected.items() if i.removesuffix(SEQ) not in gone}
    (dest / "replay").mkdir(parents=True)
    (dest / task.base_archive).parent.mkdir(parents=True, exist_ok=True)
    (dest / task.base_archive).write_bytes((task_dir / task.base_archive).read_bytes())
    info = write_replay(task, dest, keep, left, Counter())
    return task.model_copy(update={"replay": info}), dest


def _grade(task: FeatdelTask, task_dir: Path, tree: Path) -> float:
    return Grader(task, task_dir).grade_tree(tree).score


def test_an_eager_rewrite_of_a_lazy_function_is_caught_by_a_stream(corpus, tmp_path: Path) -> None:
    """``differ`` (``*seqs``) and ``running`` (a named parameter) read every input into a list first, then gold's
    logic: the same items on every finite input, so 1.0 without the stream calls, and 0 with them (read whole, the
    stream ends in StreamEnd). Honest rewrites that read ahead or in another order score 1.0."""
    task_dir, tasks = corpus
    cases = {
        "differ": (
            DIFFER_GOLD,
            """
            seqs = [list(s) for s in seqs]
            for items in zip(*seqs):
                if any(x != items[0] for x in items[1:]):
                    yield items
            """,
            [
                """
                its = [iter(s) for s in reversed(seqs)]
                while True:
                    items = []
                    for it in its:
                        try:
                            items.append(next(it))
                        except StopIteration:
                            return
                    items.reverse()
                    if any(x != items[0] for x in items[1:]):
                        yield tuple(items)
                """
            ],
        ),
        "running": (
            RUNNING_GOLD,
            """
            xs = list(xs)
            yield from [start + sum(xs[: i + 1]) for i in range(len(xs))]
            """,
            [
                """
                from itertools import accumulate

                yield from (start + t for t in accumulate(xs))
                """
            ],
        ),
    }
    for name, (gold, eager, honest) in cases.items():
        task = tasks[name]
        streams = _streams(task, task_dir)
        assert streams, f"{name}: no stream call kept"
        assert _grade(task, task_dir, _attempt(task, task_dir, tmp_path / name / "gold", gold, gold)) == 1.0
        assert _grade(task, task_dir, agent_tree(task, task_dir, tmp_path / name / "snapshot")) == 0.0
        tree = _attempt(task, task_dir, tmp_path / name / "eager", gold, eager)
        assert _grade(task, task_dir, tree) == 0.0, name
        off, off_dir = _without(task, task_dir, tmp_path / name / "off", lambda c: c.get("operator") == STREAM)
        assert _grade(off, off_dir, tree) == 1.0, name
        for i, body in enumerate(honest):
            assert _grade(task, task_dir, _attempt(task, task_dir, tmp_path / name / f"h{i}", gold, body)) == 1.0


def test_a_function_that_returns_no_iterator_keeps_no_stream_call(corpus, tmp_path: Path) -> None:
    """``first`` returns an item: gold reads one item of a stream and returns, but how it reads its input is not its
    contract, so no stream call is kept and an honest ``xs[0]`` (an iterator raises there) scores 1.0."""
    task_dir, tasks = corpus
    task = tasks["first"]
    assert task.replay is not None and task.replay.dropped.get("not-streamed", 0) >= 1, task.replay
    assert not _streams(task, task_dir)
    honest = """
    if not len(xs):
        raise IndexError("empty")
    return xs[0]
    """
    assert _grade(task, task_dir, _attempt(task, task_dir, tmp_path / "first", FIRST_GOLD, honest)) == 1.0


def test_items_compared_by_their_text_are_caught_by_an_int_among_equal_floats(corpus, tmp_path: Path) -> None:
    """``distinct`` by ``repr``: right on every recorded and generated list whose items are all ints, or all floats
    (``[1.0, 2.0, 1.0]``: two distinct texts), and wrong on ``[1, 2, 1.0]`` (three texts, two values): 1.0 without the
    mixed calls, 0 with them. Honest rewrites by a set of the items and by sorting score 1.0."""
    task_dir, tasks = corpus
    task = tasks["distinct"]
    assert any(_mixed(c) for c in load_replay(task, task_dir)[0])
    attack = """
    texts = [repr(x) for x in xs]
    return len(texts) == len(set(texts))
    """
    tree = _attempt(task, task_dir, tmp_path / "attack", DISTINCT_GOLD, attack)
    assert _grade(task, task_dir, tree) == 0.0
    off, off_dir = _without(task, task_dir, tmp_path / "off", _mixed)
    assert _grade(off, off_dir, tree) == 1.0
    honest = [
        "    return len(set(xs)) == len(xs)\n",
        "    s = sorted(xs)\n    return all(a != b for a, b in zip(s, s[1:]))\n",
    ]
    for i, body in enumerate(honest):
        assert _grade(task, task_dir, _attempt(task, task_dir, tmp_path / f"h{i}", DISTINCT_GOLD, body)) == 1.0, body


FORMS_SOURCE = '''
def thread(val, *forms):
    """``val`` threaded through ``forms``: a function ``f`` makes ``f(val)``, a tuple ``(f, *args)`` makes
    ``f(val, *args)``."""
    for form in forms:
        if callable(form):
            val = form(val)
        else:
            func, *args = form
            val = func(val, *args)
    return val


def checked(f, x):
    """``f(x)``, which must be an int."""
    got = f(x)
    if type(got) is not int:
        raise ValueError("not an int")
    return got
'''

FORMS_TESTS = """
import pytest

import formpkg


def inc(x):
    return x + 1


def add(x, y):
    return x + y


def test_thread():
    assert formpkg.thread(1) == 1
    assert formpkg.thread(1, inc) == 2
    assert formpkg.thread(1, (add, 2), inc) == 4
    assert formpkg.thread(3, (add, 1), (add, 2)) == 6


def test_checked():
    assert formpkg.checked(inc, 1) == 2
    assert formpkg.checked(abs, -3) == 3
    with pytest.raises(ValueError):
        formpkg.checked(str, 1)
"""

THREAD_GOLD = """
    for form in forms:
        if callable(form):
            val = form(val)
        else:
            func, *args = form
            val = func(val, *args)
    return val
"""
CHECKED_GOLD = """
    got = f(x)
    if type(got) is not int:
        raise ValueError("not an int")
    return got
"""


@pytest.fixture(scope="module")
def forms(tmp_path_factory) -> tuple[Path, dict[str, FeatdelTask]]:
    return _generated(tmp_path_factory, "formpkg", FORMS_SOURCE, FORMS_TESTS, "stand-ins-corpus")


def _stand_ins(call: dict) -> bool:
    return call.get("operator") == STAND_IN


def test_code_right_only_for_the_arities_the_tests_used_is_caught_by_a_stand_in(forms, tmp_path: Path) -> None:
    """``thread`` unpacking each form as ``func, arg``: right on every form the tests pass (their ``add`` takes two
    arguments, so every longer form a variation makes is out of gold's domain), 1.0 without the stand-in calls and 0
    with them (a variadic stand-in makes ``(f, a, b)`` forms gold threads through). Honest rewrites score 1.0."""
    task_dir, tasks = forms
    task = tasks["thread"]
    assert any(_stand_ins(c) for c in load_replay(task, task_dir)[0])
    assert _grade(task, task_dir, _attempt(task, task_dir, tmp_path / "gold", THREAD_GOLD, THREAD_GOLD)) == 1.0
    two = """
    for form in forms:
        if callable(form):
            val = form(val)
        else:
            func, arg = form
            val = func(val, arg)
    return val
    """
    tree = _attempt(task, task_dir, tmp_path / "two", THREAD_GOLD, two)
    assert _grade(task, task_dir, tree) == 0.0
    off, off_dir = _without(task, task_dir, tmp_path / "off", _stand_ins)
    assert _grade(off, off_dir, tree) == 1.0
    honest = [
        """
        for form in forms:
            val = form(val) if callable(form) else form[0](val, *form[1:])
        return val
        """,
        """
        from functools import reduce

        def step(v, form):
            if not isinstance(form, tuple):
                return form(v)
            return form[0](*(v,) + form[1:])

        return reduce(step, forms, val)
        """,
    ]
    for i, body in enumerate(honest):
        assert _grade(task, task_dir, _attempt(task, task_dir, tmp_path / f"h{i}", THREAD_GOLD, body)) == 1.0, body


def test_a_stand_in_call_where_gold_raises_is_not_kept(forms, tmp_path: Path) -> None:
    """``checked`` raises on a stand-in's result (a tuple, not an int): which error an implementation raises on a value
    the tests' functions never return is not the task, so no such call is kept and an honest rewrite that raises
    ``TypeError`` there scores 1.0."""
    task_dir, tasks = forms
    task = tasks["checked"]
    assert task.replay is not None and task.replay.dropped.get("stand-in-raised", 0) >= 1, task.replay
    honest = """
    got = f(x)
    if isinstance(got, bool) or not isinstance(got, int):
        raise (ValueError if isinstance(got, str | float) else TypeError)("not an int")
    return got
    """
    assert _grade(task, task_dir, _attempt(task, task_dir, tmp_path / "checked", CHECKED_GOLD, honest)) == 1.0
