"""Mutation testing's replay cost per task: every mutant in its own box (the baseline) vs all mutants in one box.

For each task of a task directory (``crf-prime featdel generate`` output), the same gold mutants
(crf_prime/featdel/mutants.py, the task's deterministic sample) are replayed two ways, alternating per task so that
the machine's load hits both alike:

- **one box per mutant** (the baseline): ``Grader.replay`` on each mutant, every call, a fresh box each time;
- **batched** (what :func:`crf_prime.featdel.strength.mutation_score` does): ``strength.replay_rejects`` — one box
  screens every mutant on a sample of the calls, a second replays the mutants the screen did not reject in full.

Both must reject the same mutants (a mutant whose verdict differs is printed: it is either non-deterministic or a
bug). Prints per-task seconds and the ratio of the medians and of the totals.

    .venv/bin/python benchmarks/featdel_mutants.py out/featdel [--cap 10] [--tasks 8]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from crf_prime.featdel.generate import load_tasks
from crf_prime.featdel.grader import Grader
from crf_prime.featdel.models import GraderConfig
from crf_prime.featdel.strength import replay_rejects, task_mutants


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", type=Path, help="a task directory (tasks.jsonl and its replay files)")
    parser.add_argument("--cap", type=int, default=10, help="mutants per task (generate's default: 10)")
    parser.add_argument("--tasks", dest="limit", type=int, default=8, help="tasks measured (the first ones)")
    args = parser.parse_args()
    console = Console()
    tasks = [t for t in load_tasks(args.tasks) if t.replay is not None][: args.limit]
    if not tasks:
        raise SystemExit(f"{args.tasks}: no task with a replay")
    table = Table("task", "mutants", "one box each (s)", "batched (s)", "ratio", "rejected")
    single: list[float] = []
    batched: list[float] = []
    for i, task in enumerate(tasks):
        mutants = task_mutants(task, args.cap)[1]
        grader = Grader(task, args.tasks, config=GraderConfig(scan=False))
        timed: dict[str, tuple[float, list[bool]]] = {}
        order = ("single", "batched") if i % 2 == 0 else ("batched", "single")
        for how in order:
            t0 = time.perf_counter()
            if how == "single":
                rejects = [not grader.replay({m.path: m.text}).ok for m in mutants]
            else:
                rejects = replay_rejects(grader, mutants)
            timed[how] = (time.perf_counter() - t0, rejects)
        (a, ra), (b, rb) = timed["single"], timed["batched"]
        single.append(a)
        batched.append(b)
        differ = [m.label for m, x, y in zip(mutants, ra, rb, strict=True) if x != y]
        verdict = f"{sum(rb)}" + (f" (differ: {', '.join(differ)})" if differ else "")
        table.add_row(task.task_id, str(len(mutants)), f"{a:.2f}", f"{b:.2f}", f"{b / a:.2f}", verdict)
    console.print(table)
    console.print(
        f"{len(tasks)} tasks: median {statistics.median(single):.2f} s one box each, "
        f"{statistics.median(batched):.2f} s batched ({statistics.median(batched) / statistics.median(single):.2f}x); "
        f"total {sum(single):.1f} s vs {sum(batched):.1f} s ({sum(batched) / sum(single):.2f}x)"
    )


if __name__ == "__main__":
    main()
