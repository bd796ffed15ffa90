"""Grading from many threads at once (issue 19, item 5): no ``SystemError: AST constructor recursion depth mismatch``.

Root cause (CPython 3.11, ``Python/Python-ast.c``): the AST converter keeps its recursion counter in interpreter-wide
state; a garbage collection during the conversion runs finalizers (Python code), the GIL passes to another thread,
whose ``ast.parse`` overwrites the counter. Reference cycles with ``__del__`` make collections run finalizers often,
as a busy env server's heap does. crf_prime.featdel.syntax serialises every parse; the stress tests below run many
policy scans and gradings concurrently under that pressure.
"""

from __future__ import annotations

import ast
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from featdel_support import INFLECTION, agent_tree, generated

import crf_prime.featdel.policy as policy
from crf_prime.featdel.deletion import apply_unified_diff
from crf_prime.featdel.grade import collect_changes, detect_hack
from crf_prime.featdel.grader import grade_tree

SOURCE = Path(policy.__file__).read_text()  # a large real module: long conversions, many allocations


class _Cycle:
    """Garbage only the cycle collector frees, with a finalizer that runs bytecode (a thread switch point)."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        sum(range(50))


def _hammer(fn: Callable[[], object], threads: int = 8, rounds: int = 150) -> list[BaseException]:
    """Run ``fn`` ``rounds`` times in each of ``threads`` threads started together; the errors they raised. The first
    error stops every thread at its next round: it already decides the test, and the rounds left only cost time."""
    errors: list[BaseException] = []
    start = threading.Barrier(threads)
    failed = threading.Event()

    def work() -> None:
        start.wait()
        for _ in range(rounds):
            if failed.is_set():
                return
            for _ in range(20):
                _Cycle()
            try:
                fn()
            except Exception as e:  # collected, not swallowed: the test asserts on them
                errors.append(e)
                failed.set()
                return

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return errors


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the race is reproduced here on CPython 3.11")
def test_bare_ast_parse_races_in_threads() -> None:
    """The root cause, shown: unserialised ``ast.parse`` fails under the same load."""
    errors = _hammer(lambda: ast.parse(SOURCE), rounds=300)
    assert errors and all(isinstance(e, SystemError) for e in errors)
    assert "AST constructor recursion depth mismatch" in str(errors[0])


@pytest.mark.slow
def test_policy_scans_in_threads() -> None:
    allowed = frozenset({"sys", "sys.version_info"})
    expected = policy.violations(SOURCE, allowed)
    results: list[object] = []
    errors = _hammer(lambda: results.append(policy.violations(SOURCE, allowed)), rounds=6)
    assert errors == []
    assert len(results) == 8 * 6 and all(r == expected for r in results)


@pytest.mark.bwrap
@pytest.mark.slow
def test_concurrent_gradings(tmp_path: Path) -> None:
    task_dir, tasks, _ = generated(INFLECTION, 2)
    trees = []
    for i, task in enumerate(tasks):
        tree = agent_tree(task, task_dir, tmp_path / f"agent{i}")
        for rel, text in apply_unified_diff(dict(task.broken_files), task.gold_patch).items():
            (tree / rel).write_text(text + "\n\ndef _added_helper(x):\n    return [y for y in x if y]\n")
        trees.append((task, tree))
    # the in-process half of grading (collect + policy scan) many times over, then full sandboxed gradings
    errors = _hammer(lambda: [detect_hack(t, task_dir, collect_changes(t, task_dir, tr)) for t, tr in trees], rounds=4)
    assert errors == []
    scores: list[float] = []
    runs = [(t, tr) for t, tr in trees for _ in range(2)]
    graders = [
        threading.Thread(target=lambda t=t, tr=tr: scores.append(grade_tree(t, task_dir, tr).score)) for t, tr in runs
    ]
    for g in graders:
        g.start()
    for g in graders:
        g.join()
    assert scores == [1.0] * len(runs)
