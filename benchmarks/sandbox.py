"""Sandbox overhead vs a bare subprocess, and throughput of concurrent boxes.

    .venv/bin/python benchmarks/sandbox.py [--runs 30] [--concurrency 1,2,4,8,16] [--jobs 32]

Latency: median / p90 wall time of ``python -c pass`` (the host's base interpreter) over ``--runs`` runs after one
warm-up, the variants interleaved in shuffled order (so load from other processes hits them alike), for: a bare ``subprocess.run``; the raw bubblewrap command line alone; ``Sandbox.run`` (bwrap + per-run
cgroups + rlimits + capture + cleanup); ``Sandbox.arun`` on one long-lived event loop; ``Sandbox(SandboxConfig(unsandboxed=True))``.
Throughput: ``--jobs`` commands pushed through N concurrent slots, boxes vs bare asyncio subprocesses, in runs/s.
Every ratio is against the bare baseline measured in the same run. Target (issue #3): <= +15 ms median overhead.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from crf_prime.sandbox import Sandbox, SandboxConfig, probe
from crf_prime.sandbox.bwrap import build_argv

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else os.path.realpath(sys.executable)
CMD = [PYTHON, "-c", "pass"]


def _interleaved(variants: dict[str, Callable[[], object]], runs: int) -> dict[str, list[float]]:
    """Time each variant ``runs`` times, interleaved in a shuffled order per round: load from other processes hits
    all variants alike, and so does the kernel's asynchronous teardown of the previous box's network namespace
    (which slows whichever run comes right after a bwrap run)."""
    for fn in variants.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in variants}
    order = list(variants)
    rng = random.Random(0)
    for _ in range(runs):
        rng.shuffle(order)
        for name in order:
            fn = variants[name]
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1000)
    return times


def _p90(xs: list[float]) -> float:
    return sorted(xs)[max(0, round(0.9 * len(xs)) - 1)]


async def _throughput(make: Callable[[], Awaitable[object]], jobs: int, concurrency: int) -> float:
    slots = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with slots:
            await make()

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(jobs)))
    return jobs / (time.perf_counter() - start)


async def _bare_async() -> None:
    proc = await asyncio.create_subprocess_exec(
        *CMD, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL
    )
    await proc.communicate()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30, help="timed runs per variant (>= 20)")
    parser.add_argument("--concurrency", default="1,2,4,8,16", help="comma-separated concurrent slots")
    parser.add_argument("--jobs", type=int, default=32, help="commands per throughput measurement")
    args = parser.parse_args(argv)
    if args.runs < 20:
        parser.error("--runs must be >= 20")
    status = probe()
    if not status.available:
        print(f"sandbox unavailable: {status.reason}", file=sys.stderr)
        return 1
    console = Console()
    box = Sandbox(SandboxConfig())
    loose = Sandbox(SandboxConfig(unsandboxed=True))
    with tempfile.TemporaryDirectory(prefix="crf-bench-") as tmp:
        workdir = Path(tmp)
        raw = build_argv(
            status.bwrap or "bwrap",
            CMD,
            workdir=workdir,
            ro_binds=(),
            protected=(),
            env={"PATH": "/usr/bin:/bin"},
            cwd=workdir,
            tmp_size_mb=256,
        )
        loop = asyncio.new_event_loop()  # one long-lived loop, as in an environment server
        variants = _interleaved(
            {
                "bare subprocess.run": lambda: subprocess.run(CMD, capture_output=True),
                "raw bwrap command": lambda: subprocess.run(raw, capture_output=True),
                "Sandbox.run": lambda: box.run(CMD, workdir=workdir),
                "Sandbox.arun (one loop)": lambda: loop.run_until_complete(box.arun(CMD, workdir=workdir)),
                "Sandbox(unsandboxed=True).run": lambda: loose.run(CMD, workdir=workdir),
            },
            args.runs,
        )
        loop.close()
        base = statistics.median(variants["bare subprocess.run"])
        load = os.getloadavg()[0]
        title = f"`{' '.join(CMD)}` latency, {args.runs} interleaved runs ({status.bwrap_version}, load avg {load:.1f})"
        table = Table(title=title)
        for col in ("variant", "median ms", "p90 ms", "min ms", "overhead ms", "ratio"):
            table.add_column(col, justify="left" if col == "variant" else "right")
        for name, xs in variants.items():
            med = statistics.median(xs)
            table.add_row(
                name, f"{med:.1f}", f"{_p90(xs):.1f}", f"{min(xs):.1f}", f"{med - base:+.1f}", f"{med / base:.2f}x"
            )
        console.print(table)

        levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
        dirs = []
        for i in range(max(levels)):
            d = workdir / f"t{i}"
            d.mkdir()
            dirs.append(d)
        counter = iter(range(10**9))

        def boxed() -> Awaitable[object]:
            return box.arun(CMD, workdir=dirs[next(counter) % len(dirs)])

        tput = Table(title=f"throughput: {args.jobs} x `python -c pass` on {os.cpu_count()} cores")
        for col in ("concurrent", "bare runs/s", "boxed runs/s", "boxed / bare"):
            tput.add_column(col, justify="right")
        for n in levels:
            bare = asyncio.run(_throughput(_bare_async, args.jobs, n))
            sandboxed = asyncio.run(_throughput(boxed, args.jobs, n))
            tput.add_row(str(n), f"{bare:.0f}", f"{sandboxed:.0f}", f"{sandboxed / bare:.2f}")
        console.print(tput)
    verdict = statistics.median(variants["Sandbox.run"]) - base
    console.print(
        f"Sandbox.run median overhead: {verdict:+.1f} ms (target <= +15 ms): {'OK' if verdict <= 15 else 'OVER'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
