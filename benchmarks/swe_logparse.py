"""How long parsing an agent-controlled test log blocks the env server's event loop.

The grader parses the log in a child process (``crf_prime.swe.parseworker``); before, in a worker thread
(``asyncio.to_thread``), where a regex call or a pure-Python loop holds the GIL and the loop gets it back only
every ``sys.getswitchinterval()``. This measures the longest gap between 1 ms ticks of a task on the loop while a
20 MB log (honest ``-rA`` lines plus 30 KB hostile lines) is graded and its failure messages read, per log parser,
both ways in the same run (the worker thread is the baseline), and compares with the parsers of the base commit
(``--base``, default 84a1172) on a single hostile line.

    .venv/bin/python benchmarks/swe_logparse.py [--mb 20] [--base 84a1172] [--base-kb 10]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from crf_prime.swe.grading import grade_run
from crf_prime.swe.logparse import failure_messages
from crf_prime.swe.parseworker import failure_messages_off_loop, grade_run_off_loop

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


async def longest_block(work: Callable[[], object], *, awaitable: bool = False) -> tuple[float, float]:
    """(longest loop stall in ms, wall seconds) while ``work`` runs in a worker thread (``awaitable``: while the
    coroutine ``work()`` returns is awaited on the loop)."""
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
    if awaitable:
        await work()  # type: ignore[misc]
    else:
        await asyncio.to_thread(work)
    wall = time.perf_counter() - start
    stop = True
    await tick
    return longest * 1000, wall


def _grade(log: str, parser: str) -> None:
    grade_run("i", log, 1, parser, ["tests/test_m.py::test_1"], [])
    failure_messages(log)


async def _grade_off_loop(log: str, parser: str) -> None:
    await grade_run_off_loop("i", log, 1, parser, ["tests/test_m.py::test_1"], [])
    await failure_messages_off_loop(log)


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
    print(f"switch interval: {sys.getswitchinterval() * 1000:g} ms; load average: {os.getloadavg()}")
    print(
        f"| parser | child process: longest stall, {args.mb} MB log (ms) | child: wall (s) "
        f"| worker thread (baseline): stall (ms) | thread: wall (s) | base: stall, one {kb} KB line (ms) |"
    )
    print("|---|---|---|---|---|---|")
    idle, _ = await longest_block(lambda: time.sleep(10))  # the machine's own scheduling noise: no GIL held
    print(f"| (idle: the worker thread sleeps 10 s) | {idle:.1f} | 10.0 | - | - | - |", flush=True)
    for parser in HOSTILE:
        log = build_log(parser, args.mb)
        new, wall = await longest_block(lambda: _grade_off_loop(log, parser), awaitable=True)  # noqa: B023
        thread, thread_wall = await longest_block(lambda: _grade(log, parser))  # noqa: B023
        line = HOSTILE[parser][: kb * 1000] + "\n"
        old_parse = base.get_parser(parser)
        old, _ = await longest_block(lambda: (old_parse(line), base.failure_messages(line)))  # noqa: B023
        row = f"| {parser} | {new:.1f} | {wall:.1f} | {thread:.1f} | {thread_wall:.1f} | {old:.0f} |"
        print(row, flush=True)
    print("target: the child-process stall <= 50 ms (the log holds a 30 KB hostile line every ~37 KB)")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
