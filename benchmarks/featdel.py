"""Feature Deletion generator throughput: validated tasks per minute on a real PyPI package, in the sandbox.

Runs the whole generator (coverage run + validation of every sampled candidate: gold passes, snapshot fails, suite
collects, replay recorded) three times on the same source after a warm-up that fills the sdist and test-venv caches:
one validation worker with one gold run and one replay recording per task (no sharing: the baseline), one worker with
those runs shared by each batch of candidates (crf_prime/featdel/shared.py; the default), and one worker per CPU core.
Prints a table with the ratios. Target: >= 10 validated tasks/min on 2 cores.

Then the grading cost of a rollout (issue 25): every task of the last run graded on its gold patch through the one
front door (``Grader``), tests only (``GraderConfig(replay=False)``) and with the full verdict (policy + tests +
equivalence with gold on the recorded and generated calls), alternating per task so that load hits both alike.
Prints the medians over the tasks and their ratio. Target: <= 2x. ``--grading-only`` skips the throughput runs;
``--tasks DIR`` grades the tasks of an existing directory instead (a ``featdel corpus`` output: up to
``--per-package`` tasks of each package, medians over all of them and per package).

    .venv/bin/python benchmarks/featdel.py [--source pypi:toolz==1.2.0] [--max-tasks 20] [--grading-only]
    .venv/bin/python benchmarks/featdel.py --tasks out/featdel-corpus [--per-package 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import crf_prime.featdel.generate as gen
from crf_prime.featdel import grade, lookup_guard
from crf_prime.featdel.deletion import apply_unified_diff
from crf_prime.featdel.generate import DEFAULT_SOURCE, GenerateConfig, generate, load_tasks
from crf_prime.featdel.grader import Grader
from crf_prime.featdel.models import FeatdelTask, GraderConfig, GradeResult


def run(source: str, max_tasks: int, workers: int, out: Path, *, shared: bool = True) -> dict[str, float]:
    real = gen.shared_gold, gen.shared_replay
    if not shared:  # every task then takes the fallback path: its own gold run and its own recording
        gen.shared_gold, gen.shared_replay = (lambda *a, **k: {}), (lambda *a, **k: {})
    try:
        t0 = time.perf_counter()
        tasks, summary = generate(GenerateConfig(source=source, out=out, max_tasks=max_tasks, workers=workers))
        wall = time.perf_counter() - t0
    finally:
        gen.shared_gold, gen.shared_replay = real
    validate_s = summary.seconds["validate"]
    return {
        "runs": "shared" if shared else "per task",
        "workers": workers,
        "valid": len(tasks),
        "checked": summary.checked,
        "coverage_s": summary.seconds["coverage"],
        "validate_s": validate_s,
        "wall_s": wall,
        "per_min_validate": 60 * len(tasks) / validate_s,
        "per_min_wall": 60 * len(tasks) / wall,
    }


def _timed_grade(
    grader: Grader, gold: dict, *, lookups: bool | None = None, rewritten: bool | None = None
) -> tuple[float, GradeResult]:
    """Seconds to grade ``gold`` and the result; ``lookups``: the lookup guard on or off for this run only;
    ``rewritten``: the grading tree with or without pytest's rewritten test modules (crf_prime/featdel/pycache.py)."""
    was = lookup_guard.ENABLED, grade.REWRITTEN_TESTS
    lookup_guard.ENABLED = was[0] if lookups is None else lookups
    grade.REWRITTEN_TESTS = was[1] if rewritten is None else rewritten
    try:
        t0 = time.perf_counter()
        result = grader.grade(gold)
        return time.perf_counter() - t0, result
    finally:
        lookup_guard.ENABLED, grade.REWRITTEN_TESTS = was


def grading_cost(tasks: list[FeatdelTask], task_dir: Path, repeat: int = 2) -> dict[str, Any]:
    """Median seconds to grade one rollout (gold's patch) tests-only and with the full verdict (as configured), and
    their ratio; and tests-only with the lookup guard (crf_prime/featdel/lookup_guard.py) on against off, for the
    guard's own cost, over the tasks whose gold passes with it."""
    tests_only, full, calls, guard_on, guard_off, plain_tests = [], [], [], [], [], []
    refused = 0
    for task in tasks:
        gold = dict(apply_unified_diff(dict(task.broken_files), task.gold_patch))
        base = Grader(task, task_dir, config=GraderConfig(replay=False))
        whole = Grader(task, task_dir, sandbox=base.sandbox, env=base.env)
        a = b = c = d = e = float("inf")
        for _ in range(repeat):  # alternating, fastest of each: a shared machine's load otherwise decides
            t, plain = _timed_grade(base, gold)
            assert plain.score == 1.0, plain.failed
            a = min(a, t)
            t, result = _timed_grade(whole, gold)
            assert result.score == 1.0, result.failed
            b = min(b, t)
            t, off = _timed_grade(base, gold, lookups=False)
            c = min(c, t)
            t, on = _timed_grade(base, gold, lookups=True)
            d = min(d, t) if on.score == 1.0 and off.score == 1.0 else d
            t, unrewritten = _timed_grade(base, gold, rewritten=False)
            assert unrewritten.score == 1.0, unrewritten.failed
            e = min(e, t)
        tests_only.append(a)
        plain_tests.append(e)
        full.append(b)
        calls.append(result.replay_calls)
        if d < float("inf"):
            guard_off.append(c)
            guard_on.append(d)
        else:
            refused += 1
    return {
        "tasks": len(tasks),
        "per_task": [b / a for a, b in zip(tests_only, full, strict=True)],
        "calls": statistics.median(calls) if calls else 0,
        "tests_s": statistics.median(tests_only),
        "full_s": statistics.median(full),
        "ratio": statistics.median(full) / statistics.median(tests_only),
        "guard_ratio": statistics.median(guard_on) / statistics.median(guard_off) if guard_on else float("nan"),
        "guard_refused": refused,
        "rewritten_ratio": statistics.median(tests_only) / statistics.median(plain_tests),
    }


def print_grading(source: str, cost: dict[str, Any], console: Console) -> None:
    console.print(
        f"grading a rollout on {source}: {cost['tasks']} tasks, median {cost['calls']:.0f} replayed calls/task; "
        f"tests only {cost['tests_s']:.2f} s, full verdict {cost['full_s']:.2f} s (medians): "
        f"{cost['ratio']:.2f}x (target <= 2x); the lookup guard on / off, tests only: {cost['guard_ratio']:.2f}x "
        f"({cost['guard_refused']} tasks' gold fails with it on); tests only with / without pytest's rewritten test "
        f"modules made once: {cost['rewritten_ratio']:.2f}x"
    )


def corpus_cost(task_dir: Path, per_package: int, console: Console) -> None:
    """The grading cost over a corpus: up to ``per_package`` tasks of each package (the first ones in the file)."""
    by_package: dict[str, list[FeatdelTask]] = {}
    for task in load_tasks(task_dir):
        picked = by_package.setdefault(task.source.name, [])
        if len(picked) < per_package and task.replay is not None:
            picked.append(task)
    ratios: list[float] = []
    for name, tasks in sorted(by_package.items()):
        cost = grading_cost(tasks, task_dir)
        ratios += cost["per_task"]
        print_grading(name, cost, console)
    console.print(
        f"over the corpus: {len(ratios)} tasks of {len(by_package)} packages, full verdict / tests only per task: "
        f"median {statistics.median(ratios):.2f}x, max {max(ratios):.2f}x (target: median <= 2x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=DEFAULT_SOURCE)
    parser.add_argument("--max-tasks", type=int, default=20)
    parser.add_argument("--grading-only", action="store_true", help="only the grading cost (one generation)")
    parser.add_argument("--tasks", type=Path, help="grade the tasks of this directory (no generation)")
    parser.add_argument("--per-package", type=int, default=3, help="with --tasks: tasks graded per package")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    console = Console(width=150)
    if args.tasks is not None:
        corpus_cost(args.tasks, args.per_package, console)
        return
    if args.grading_only:
        with tempfile.TemporaryDirectory() as tmp:
            tasks, _ = generate(GenerateConfig(source=args.source, out=Path(tmp) / "g", max_tasks=args.max_tasks))
            print_grading(args.source, grading_cost(tasks, Path(tmp) / "g"), console)
        return
    with tempfile.TemporaryDirectory() as tmp:
        generate(GenerateConfig(source=args.source, out=Path(tmp) / "warm", max_tasks=1))  # fill caches
        alone = run(args.source, args.max_tasks, 1, Path(tmp) / "w1a", shared=False)
        base = run(args.source, args.max_tasks, 1, Path(tmp) / "w1")
        par = run(args.source, args.max_tasks, cores, Path(tmp) / "wn")
        graded = [
            FeatdelTask.model_validate_json(x) for x in (Path(tmp) / "wn" / "tasks.jsonl").read_text().splitlines()
        ]
        cost = grading_cost(graded, Path(tmp) / "wn")
    table = Table(title=f"featdel generate on {args.source} ({cores} cores, max {args.max_tasks} tasks)")
    for col in (
        "gold + replay runs",
        "workers",
        "valid",
        "checked",
        "coverage s",
        "validate s",
        "wall s",
        "tasks/min (validate)",
        "tasks/min (wall)",
    ):
        table.add_column(col, justify="right")
    for r in (alone, base, par):
        table.add_row(
            str(r["runs"]),
            str(r["workers"]),
            str(r["valid"]),
            str(r["checked"]),
            f"{r['coverage_s']:.1f}",
            f"{r['validate_s']:.1f}",
            f"{r['wall_s']:.1f}",
            f"{r['per_min_validate']:.1f}",
            f"{r['per_min_wall']:.1f}",
        )
    console.print(table)
    console.print(
        f"shared / per task, 1 worker (tasks/min, validate): "
        f"{base['per_min_validate'] / alone['per_min_validate']:.2f}x; "
        f"parallel / 1 worker (tasks/min, wall): {par['per_min_wall'] / base['per_min_wall']:.2f}x; "
        f"target 10 tasks/min: {par['per_min_wall'] / 10:.2f}x of target"
    )
    print_grading(args.source, cost, console)


if __name__ == "__main__":
    main()
