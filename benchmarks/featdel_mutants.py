"""Mutation testing's replay cost per task: every call alone for every mutant (the baseline) vs only the calls that
reach the mutated code.

For each task of a task directory (``crf-prime featdel generate`` output), the same gold mutants
(crf_prime/featdel/mutants.py, the task's deterministic sample) are replayed in one box two ways, alternating per
task so that the machine's load hits both alike:

- **every call** (the baseline): each mutant's tree runs every served call alone, stopped at its first difference
  from gold;
- **reaching calls** (what :func:`crf_prime.featdel.strength.replay_verdicts` does): each tree runs alone only the
  calls whose gold run executed a line of its mutated code (``strength.reaching_calls``), gold's outcome standing
  for the others; the in-sequence run stays whole.

Both must reject the same mutants (a mutant whose verdict differs is printed: a call the trace missed, or
non-determinism). Prints per-task seconds and the ratio of the medians and of the totals.

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
from crf_prime.featdel.replay import load_replay
from crf_prime.featdel.strength import MUTANT_CALL_TIMEOUT_S, reaching_calls, replay_verdicts, task_mutants


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
    table = Table("task", "mutants", "calls", "run alone", "every call (s)", "reaching (s)", "ratio", "rejected")
    every: list[float] = []
    reaching: list[float] = []
    for i, task in enumerate(tasks):
        mutants = task_mutants(task, args.cap)[1]
        grader = Grader(task, args.tasks, config=GraderConfig(scan=False))
        calls = load_replay(task, args.tasks)[0]
        narrowed = [reaching_calls(calls, m) for m in mutants]
        alone = sum(len(calls) if n is None else len(n) for n in narrowed)
        timed: dict[str, tuple[float, list[bool]]] = {}
        for how in ("every", "reaching") if i % 2 == 0 else ("reaching", "every"):
            t0 = time.perf_counter()
            if how == "every":
                attempts: list[dict[str, str | None]] = [{m.path: m.text} for m in mutants]
                limit = MUTANT_CALL_TIMEOUT_S
                rejects = [not v.ok for v in grader.replay_many(attempts, stop_early=True, call_timeout_s=limit)]
            else:
                rejects = [v != "pass" for v in replay_verdicts(grader, mutants)]
            timed[how] = (time.perf_counter() - t0, rejects)
        (a, ra), (b, rb) = timed["every"], timed["reaching"]
        every.append(a)
        reaching.append(b)
        differ = [m.label for m, x, y in zip(mutants, ra, rb, strict=True) if x != y]
        verdict = f"{sum(rb)}" + (f" (differ: {', '.join(differ)})" if differ else "")
        runs = f"{alone}/{len(calls) * len(mutants)}"
        table.add_row(
            task.task_id, str(len(mutants)), str(len(calls)), runs, f"{a:.2f}", f"{b:.2f}", f"{b / a:.2f}", verdict
        )
    console.print(table)
    console.print(
        f"{len(tasks)} tasks: median {statistics.median(every):.2f} s every call, "
        f"{statistics.median(reaching):.2f} s reaching calls "
        f"({statistics.median(reaching) / statistics.median(every):.2f}x); "
        f"total {sum(every):.1f} s vs {sum(reaching):.1f} s ({sum(reaching) / sum(every):.2f}x)"
    )


if __name__ == "__main__":
    main()
