"""What a grading run pays before its first test: the box, the interpreter, pytest's import.

For each task of a task directory (``crf-prime featdel generate`` output), in the task's own grading tree and test
venv, alternating the two ways per round so that the machine's load hits both alike:

- **box start**: ``python -c pass`` in a box whose tree is read-only except ``out`` (a grading run), binding every
  protected file (the baseline: one bind per test file) vs binding only those inside the writable paths (what
  ``crf_prime/sandbox/bwrap.py`` does now; the tree is read-only either way);
- **pytest import**: ``python -B -c "import pytest"`` in the box with the venv's bytecode removed (the baseline: the
  venvs built before it was compiled) vs present (``crf_prime/featdel/testenv.py`` writes it at build). Measured on
  a hard-linked copy of the venv, so the cached venv is never touched.

Prints per-task medians and the ratio new/baseline.

    .venv/bin/python benchmarks/featdel_box_start.py out/featdel [--tasks 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from crf_prime.featdel.generate import load_tasks
from crf_prime.featdel.grader import Grader
from crf_prime.sandbox import Sandbox, bwrap


def _every_bind(protected: Sequence[Path], writable: Sequence[Path] | None) -> list[Path]:
    return list(protected)  # the baseline: one read-only bind per protected path


def box_start(sandbox: Sandbox, work: Path, python: Path, venv: Path, protected: list[Path], way: str) -> float:
    """Seconds for ``python -c pass`` in a grading run's box (tree read-only but ``out``)."""
    new = bwrap.bound_protected
    bwrap.bound_protected = _every_bind if way == "old" else new
    try:
        t0 = time.perf_counter()
        sandbox.run([str(python), "-c", "pass"], workdir=work, protected=protected, ro_binds=[venv],
                    writable=[work / "out"])  # fmt: skip
        return time.perf_counter() - t0
    finally:
        bwrap.bound_protected = new


def pytest_import(sandbox: Sandbox, work: Path, venv: Path) -> float:
    """Seconds for ``import pytest`` in the box, from ``venv`` read-only and no bytecode written."""
    t0 = time.perf_counter()
    r = sandbox.run([str(venv / "bin" / "python"), "-B", "-c", "import pytest"], workdir=work, ro_binds=[venv],
                    writable=[work / "out"])  # fmt: skip
    if r.exit_code != 0:
        raise SystemExit(f"import pytest failed in the box: {r.stderr[-400:]}")
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", type=Path, help="a task directory (tasks.jsonl and its bases)")
    parser.add_argument("--tasks", dest="limit", type=int, default=4, help="tasks measured (the first ones)")
    parser.add_argument("--rounds", type=int, default=3, help="measurements per way and task")
    args = parser.parse_args()
    console = Console()
    tasks = load_tasks(args.tasks)[: args.limit]
    if not tasks:
        raise SystemExit(f"{args.tasks}: no task")
    table = Table("task", "protected", "box: every bind (s)", "box: now (s)", "ratio", "pytest: no pyc (s)",
                  "pytest: pyc (s)", "ratio")  # fmt: skip
    ratios: dict[str, list[float]] = {"box": [], "pytest": []}
    for task in tasks:
        g = Grader(task, args.tasks)
        sandbox, env = g.sandbox, g.env
        work = Path(tempfile.mkdtemp(prefix="crf-bench-box-"))
        try:
            g.build_tree({}, work / "repo")
            (work / "out").mkdir()
            protected = [work / "repo" / p for p in task.protected_files]
            venv = work / "venv"  # the test venv by hard links, its bytecode removed in the copy only
            shutil.copytree(env.venv, venv, symlinks=True, copy_function=lambda s, d: Path(d).hardlink_to(s))
            for pyc in venv.rglob("*.pyc"):
                pyc.unlink()

            got: dict[tuple[str, str], list[float]] = {}
            for i in range(args.rounds):
                for way in ("old", "new") if i % 2 == 0 else ("new", "old"):
                    got.setdefault(("box", way), []).append(
                        box_start(sandbox, work, env.python, env.venv, protected, way)
                    )
                    root = venv if way == "old" else env.venv
                    got.setdefault(("pytest", way), []).append(pytest_import(sandbox, work, root))
            med = {k: statistics.median(v) for k, v in got.items()}
            row = [task.task_id, str(len(protected))]
            for what in ("box", "pytest"):
                ratio = med[(what, "new")] / med[(what, "old")]
                ratios[what].append(ratio)
                row += [f"{med[(what, 'old')]:.2f}", f"{med[(what, 'new')]:.2f}", f"{ratio:.2f}"]
            table.add_row(*row)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    console.print(table)
    console.print(
        f"{len(tasks)} tasks: median ratio new/baseline: box start {statistics.median(ratios['box']):.2f}x, "
        f"pytest import {statistics.median(ratios['pytest']):.2f}x"
    )


if __name__ == "__main__":
    main()
