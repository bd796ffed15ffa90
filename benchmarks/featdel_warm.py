"""What generation's target-test runs gain from warm pytest (``crf_prime/featdel/pytest_server.py``).

For each task of a task directory (``crf-prime featdel generate`` output), in the task's own grading tree and test
venv, the runs generation makes warm: the snapshot's target tests (the check that the deletion fails a test) and
each gold mutant's target tests (mutation testing; every mutant here, not only those the replay lets through), all
stopped at the first failure. Each round makes them cold (a fresh box per run: the baseline) and warm (forks of one
warm box per task, its start counted), alternating so that the machine's load hits both alike.

Prints the totals and the ratio warm/cold; the verdicts must be the same both ways (it stops if they are not).

    .venv/bin/python benchmarks/featdel_warm.py out/featdel [--tasks 6] [--rounds 2]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path

from crf_prime.featdel.generate import load_tasks
from crf_prime.featdel.grader import Grader
from crf_prime.featdel.models import GraderConfig
from crf_prime.featdel.pycache import source_entry
from crf_prime.featdel.pytest_server import PytestServer
from crf_prime.featdel.strength import task_mutants


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("task_dir", type=Path)
    ap.add_argument("--tasks", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    seconds = {"cold": 0.0, "warm": 0.0}
    runs = 0
    for task in load_tasks(args.task_dir)[: args.tasks]:
        grader = Grader(task, args.task_dir, config=GraderConfig(scan=False))
        archive = args.task_dir / task.base_archive
        pycs = source_entry(archive, task.base_sha256, task.source_files, sandbox=grader.sandbox, env=grader.env)
        attempts = [{}] + [{m.path: m.text} for m in task_mutants(task, 10)[1]]
        verdicts: dict[str, list[float]] = {}
        with grader.shared_base() as base:
            for _ in range(args.rounds):
                for way in ("cold", "warm"):
                    t0 = time.perf_counter()
                    server = PytestServer(grader.sandbox, grader.env) if way == "warm" else None
                    with server if server is not None else contextlib.nullcontext() as warm:
                        scores = [
                            grader.score_run(
                                grader.run_tests(changes, base=base, first_failure=True, pycs=pycs, warm=warm), changes
                            ).score
                            for changes in attempts
                        ]
                    seconds[way] += time.perf_counter() - t0
                    if verdicts.setdefault(way, scores) != scores:
                        raise SystemExit(f"{task.task_id}: the {way} verdicts differ between rounds")
        if verdicts["cold"] != verdicts["warm"]:
            raise SystemExit(f"{task.task_id}: the verdicts differ warm and cold: {verdicts}")
        runs += len(attempts)
        print(f"{task.task_id}: {len(attempts)} runs, the same verdicts both ways", flush=True)
    cold, warm = seconds["cold"], seconds["warm"]
    ratio = f"{warm / cold:.2f}x" if cold else "-"
    print(f"{runs} runs x {args.rounds} rounds: cold {cold:7.2f} s   warm {warm:7.2f} s   warm/cold {ratio}")


if __name__ == "__main__":
    main()
