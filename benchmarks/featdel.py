"""Feature Deletion generator throughput: validated tasks per minute on a real PyPI package, in the sandbox.

Runs the whole generator (coverage run + validation of every sampled candidate: gold passes, snapshot fails, suite
collects, replay recorded) three times on the same source after a warm-up that fills the sdist and test-venv caches:
one validation worker with one gold run and one replay recording per task (no sharing: the baseline), one worker with
those runs shared by each batch of candidates (crf_prime/featdel/shared.py; the default), and one worker per CPU core.
Prints a table with the ratios. Target: >= 10 validated tasks/min on 2 cores.

    .venv/bin/python benchmarks/featdel.py [--source pypi:toolz==1.2.0] [--max-tasks 20]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

import crf_prime.featdel.generate as gen
from crf_prime.featdel.generate import DEFAULT_SOURCE, GenerateConfig, generate


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=DEFAULT_SOURCE)
    parser.add_argument("--max-tasks", type=int, default=20)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        generate(GenerateConfig(source=args.source, out=Path(tmp) / "warm", max_tasks=1))  # fill caches
        alone = run(args.source, args.max_tasks, 1, Path(tmp) / "w1a", shared=False)
        base = run(args.source, args.max_tasks, 1, Path(tmp) / "w1")
        par = run(args.source, args.max_tasks, cores, Path(tmp) / "wn")
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
    console = Console(width=150)
    console.print(table)
    console.print(
        f"shared / per task, 1 worker (tasks/min, validate): "
        f"{base['per_min_validate'] / alone['per_min_validate']:.2f}x; "
        f"parallel / 1 worker (tasks/min, wall): {par['per_min_wall'] / base['per_min_wall']:.2f}x; "
        f"target 10 tasks/min: {par['per_min_wall'] / 10:.2f}x of target"
    )


if __name__ == "__main__":
    main()
