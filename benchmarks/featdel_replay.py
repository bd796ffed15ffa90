"""Cost and reach of the Feature Deletion replay verdict, measured against the tests-only baseline in the same run.

For each source: ``featdel generate`` without the replay (baseline) and with it (recording, derived calls, two gold
replays per task), then grading of every task's gold patch with the tests alone and with tests + replay. Prints the
share of tasks the replay covers, the calls per task, and the time ratios. ``--repeat N`` alternates the two
generations N times and keeps each one's fastest run (a shared machine's load otherwise decides the ratio).

    .venv/bin/python benchmarks/featdel_replay.py [--source pypi:toolz==1.2.0 --source ...] [--max-tasks 8] [--repeat 1]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from crf_prime.featdel.deletion import apply_unified_diff
from crf_prime.featdel.generate import GenerateConfig, generate
from crf_prime.featdel.grader import grade_changes


def measure(source: str, max_tasks: int, tmp: Path, repeat: int) -> dict[str, float | str]:
    generate(GenerateConfig(source=source, out=tmp / "warm", max_tasks=1, replay=False))  # fill caches
    base_s = replay_s = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        base, _ = generate(GenerateConfig(source=source, out=tmp / "base", max_tasks=max_tasks, replay=False))
        base_s = min(base_s, time.perf_counter() - t0)
        t0 = time.perf_counter()
        tasks, summary = generate(GenerateConfig(source=source, out=tmp / "replay", max_tasks=max_tasks))
        replay_s = min(replay_s, time.perf_counter() - t0)
    tests_only, with_replay, calls = [], [], []
    for task in tasks:
        gold = apply_unified_diff(dict(task.broken_files), task.gold_patch)
        t0 = time.perf_counter()
        a = grade_changes(task, tmp / "replay", dict(gold), replay=False)
        tests_only.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        b = grade_changes(task, tmp / "replay", dict(gold))
        with_replay.append(time.perf_counter() - t0)
        assert a.score == b.score == 1.0, (task.task_id, b.failed)
        calls.append(b.replay_calls)
    return {
        "source": source,
        "valid": f"{len(base)} / {len(tasks)}",
        "covered": f"{summary.replay_covered}/{summary.valid} ({summary.replay_covered / max(summary.valid, 1):.0%})",
        "calls/task": f"{statistics.median(calls):.0f} (median), {min(calls)}..{max(calls)}",
        "gen base s": f"{base_s:.1f}",
        "gen replay s": f"{replay_s:.1f}",
        "gen ratio": f"{replay_s / base_s:.2f}x",
        "grade tests s": f"{statistics.median(tests_only):.2f}",
        "grade +replay s": f"{statistics.median(with_replay):.2f}",
        "grade ratio": f"{statistics.median(with_replay) / statistics.median(tests_only):.2f}x",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", action="append", default=[])
    parser.add_argument("--max-tasks", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    sources = args.source or ["pypi:toolz==1.2.0", "pypi:inflection==0.5.1"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, source in enumerate(sources):
            rows.append(measure(source, args.max_tasks, Path(tmp) / str(i), args.repeat))
    title = (
        f"featdel replay verdict: cost vs the tests-only baseline (max {args.max_tasks} tasks, best of {args.repeat})"
    )
    table = Table(title=title)
    for col in rows[0]:
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(*(str(v) for v in r.values()))
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
