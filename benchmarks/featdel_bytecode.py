"""What generation's trees gain from the base's compiled modules (``crf_prime/featdel/pycache.py`` ``source_entry``).

For each task of a task directory (``crf-prime featdel generate`` output), in the task's own grading tree and test
venv, alternating the two ways per round so that the machine's load hits both alike:

- **snapshot test run**: the target tests on the snapshot, stopped at the first failure (generation's check that
  the deletion fails a test), without (the baseline) and with the compiled modules linked into the tree;
- **mutant replay**: gold's mutants replayed in one box (mutation testing's replay: a child per tree, each stopped
  at its first difference from gold), without and with them.

Prints the totals and the ratio with/without; the verdicts must be the same both ways (it stops if they are not).

    .venv/bin/python benchmarks/featdel_bytecode.py out/featdel [--tasks 6] [--rounds 2]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from crf_prime.featdel.generate import load_tasks
from crf_prime.featdel.grader import Grader
from crf_prime.featdel.models import GraderConfig
from crf_prime.featdel.pycache import source_entry
from crf_prime.featdel.strength import task_mutants


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("task_dir", type=Path)
    ap.add_argument("--tasks", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    seconds = {(kind, way): 0.0 for kind in ("tests", "replay") for way in ("without", "with")}
    for task in load_tasks(args.task_dir)[: args.tasks]:
        grader = Grader(task, args.task_dir, config=GraderConfig(scan=False))
        archive = args.task_dir / task.base_archive
        pycs = source_entry(archive, task.base_sha256, task.source_files, sandbox=grader.sandbox, env=grader.env)
        if pycs is None:
            raise SystemExit(f"{task.task_id}: the base's modules did not compile")
        attempts = [{m.path: m.text} for m in task_mutants(task, 10)[1]]
        verdicts: dict[str, set[object]] = {"tests": set(), "replay": set()}
        with grader.shared_base() as base:
            for _ in range(args.rounds):
                for way, linked in (("without", None), ("with", pycs)):
                    t0 = time.perf_counter()
                    run = grader.run_tests({}, base=base, first_failure=True, pycs=linked)
                    seconds["tests", way] += time.perf_counter() - t0
                    verdicts["tests"].add(grader.score_run(run, {}).score)
                    if task.replay is not None and attempts:
                        t0 = time.perf_counter()
                        got = grader.replay_many(attempts, base=base, pycs=linked, stop_early=True)
                        seconds["replay", way] += time.perf_counter() - t0
                        verdicts["replay"].add(tuple(v.ok for v in got))
        if any(len(v) > 1 for v in verdicts.values()):
            raise SystemExit(f"{task.task_id}: the verdicts differ with the compiled modules: {verdicts}")
        print(f"{task.task_id}: same verdicts both ways", flush=True)
    for kind in ("tests", "replay"):
        without, with_ = seconds[kind, "without"], seconds[kind, "with"]
        ratio = f"{with_ / without:.2f}x" if without else "-"
        print(f"{kind:7} without {without:7.2f} s   with {with_:7.2f} s   with/without {ratio}")


if __name__ == "__main__":
    main()
