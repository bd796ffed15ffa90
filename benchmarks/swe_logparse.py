"""How long parsing an agent-controlled test log blocks the env server's event loop.

The grader parses the log in a worker thread (``asyncio.to_thread``), but a regex call holds the GIL for its whole
run, so one slow match still stalls every rollout the server holds. This measures the longest gap between 1 ms
ticks of a task on the loop while a 20 MB log (honest ``-rA`` lines plus 30 KB hostile lines) is graded and its
failure messages read, per log parser, and compares with the parsers of the base commit (``--base``, default
84a1172) on a single hostile line, measured in the same run.

    .venv/bin/python benchmarks/swe_logparse.py [--mb 20] [--base 84a1172]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from crf_prime.swe.grading import grade_run
from crf_prime.swe.logparse import failure_messages

HOSTILE = {
    "sympy": " " * 30_000,  # swebench's `(_*) (.*)\.py:(.*) (_*)` backtracks from every space
    "pytest_options": "PASSED " + "x[" * 15_000,  # `(.*?)\[(.*)\]` from every `[`
    "django": "t ... Testing against Django installed in " * 700,  # lazy match to a closing line that never comes
    "pytest_v2": "PASSED " + "\x1b[1m" * 6_000,
}


def build_log(parser: str, megabytes: int) -> str:
    honest = "".join(f"PASSED tests/test_m.py::test_{i}\n" for i in range(1000))
    hostile = HOSTILE[parser] + "\n"
    chunk = honest + hostile
    return chunk * (megabytes * 1_000_000 // len(chunk) + 1)


async def longest_block(work: Callable[[], object]) -> tuple[float, float]:
    """(longest loop stall in ms, wall seconds) while ``work`` runs in a worker thread."""
    longest, stop = 0.0, False

    async def ticker() -> None:
        nonlocal longest
        last = time.perf_counter()
        while not stop:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            longest = max(longest, now - last - 0.001)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    start = time.perf_counter()
    await asyncio.to_thread(work)
    wall = time.perf_counter() - start
    stop = True
    await tick
    return longest * 1000, wall


def _grade(log: str, parser: str) -> None:
    grade_run("i", log, 1, parser, ["tests/test_m.py::test_1"], [])
    failure_messages(log)


def _base_module(commit: str, file: str | None):
    """The base commit's ``crf_prime/swe/logparse.py`` (or ``file``, a copy of it), loaded on its own."""
    if file is not None:
        text = Path(file).read_text()
    else:
        show = ["git", "show", f"{commit}:crf_prime/swe/logparse.py"]
        text = subprocess.run(show, capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "base_logparse.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("base_logparse", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=20)
    ap.add_argument("--base", default="84a1172")
    ap.add_argument("--base-kb", type=int, default=10, help="hostile line length for the base parsers (quadratic)")
    ap.add_argument("--base-file", default=None, help="a copy of the base logparse.py (where there is no git)")
    args = ap.parse_args()
    base = _base_module(args.base, args.base_file)
    kb = args.base_kb
    print(
        f"| parser | now: longest stall, {args.mb} MB log (ms) | now: wall (s) | base: stall, one {kb} KB line (ms) |"
    )
    print("|---|---|---|---|")
    idle, _ = await longest_block(lambda: time.sleep(10))  # the machine's own scheduling noise: no GIL held
    print(f"| (idle: the worker thread sleeps 10 s) | {idle:.1f} | 10.0 | - |", flush=True)
    for parser in HOSTILE:
        log = build_log(parser, args.mb)
        new, wall = await longest_block(lambda: _grade(log, parser))  # noqa: B023
        line = HOSTILE[parser][: kb * 1000] + "\n"
        old_parse = base.get_parser(parser)
        old, _ = await longest_block(lambda: (old_parse(line), base.failure_messages(line)))  # noqa: B023
        print(f"| {parser} | {new:.1f} | {wall:.1f} | {old:.0f} |", flush=True)
    print("target: the 'now' stall <= 50 ms (the log holds a 30 KB hostile line every ~37 KB)")


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
