"""Relay throughput vs a plain local copy of the same checkpoint, on loopback, and where the relay's time goes.

    .venv/bin/python benchmarks/relay.py [--size-mb 512] [--files 4] [--shard-mb 16] [--workers 4] [--nodes 3]
                                         [--repeat 3]

Writes a prime-rl-shaped step (safetensors files + index, random data) once, then ``--repeat`` times, each phase
after ``os.sync()`` and from fresh directories, the source always in the page cache: ``shutil.copytree`` of the
step (the baseline, which leaves its bytes in the page cache) and the same copy followed by an fsync of every file
(the baseline for a copy that is on disk), the origin publishing it (hard links + safetensors checks + per-shard
blake3 + index), one node pulling it (ranged GETs over loopback spliced into the files, per-shard blake3, rename:
"in place"; then the flush to disk), and ``--nodes`` nodes pulling at once. Prints each repeat's ratios to the
copy of the same repeat and their medians, then where each phase's time goes (wall time for stages that run one
after another, time summed over threads for those that run in parallel). Loopback only; disk, page cache and CPU
are shared with whatever else runs, so the load average is printed too.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "relay"))

from relay_testkit import same_tree, write_checkpoint
from rich.console import Console
from rich.table import Table

from crf_prime.relay import node as node_mod
from crf_prime.relay import origin as origin_mod
from crf_prime.relay import transport
from crf_prime.relay.config import PullConfig
from crf_prime.relay.node import RelayNode
from crf_prime.relay.origin import RelayOrigin

STAGES: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
"""Seconds per phase and stage, summed over repeats."""
_PHASE = ["setup"]
_LOCK = threading.Lock()


def _timed(stage: str, function: Callable) -> Callable:
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            with _LOCK:
                STAGES[_PHASE[0]][stage] += time.perf_counter() - started

    return wrapper


def _instrument() -> None:
    """Time each stage by wrapping the functions that do it (the benchmark's own process only)."""
    origin_mod.link_files = _timed("hard-link files", origin_mod.link_files)
    origin_mod.check_files = _timed("safetensors checks", origin_mod.check_files)
    origin_mod.hash_shards = _timed("blake3 per shard", origin_mod.hash_shards)
    origin_mod.write_model_atomic = _timed("write index", origin_mod.write_model_atomic)
    node_mod.RelayNode.fetch_indices = _timed("fetch index", node_mod.RelayNode.fetch_indices)
    node_mod.RelayNode._download = _timed(
        "download: all shards (wall, summed over nodes)", node_mod.RelayNode._download
    )
    socket.socket.sendfile = _timed("  server sendfile (sum over threads)", socket.socket.sendfile)
    transport.ServerConnection.read_into_file = _timed(
        "  receive into files (sum over threads)", transport.ServerConnection.read_into_file
    )
    node_mod._StagedFiles.digest = _timed("  blake3 verify (sum over threads)", node_mod._StagedFiles.digest)
    node_mod.RelayNode._assemble = _timed("safetensors checks + STABLE + rename", node_mod.RelayNode._assemble)
    node_mod.RelayNode._flush = _timed("flush to disk (after in place)", node_mod.RelayNode._flush)


def _timeit(phase: str, function: Callable[[], object]) -> float:
    """Wall time of ``function``; its CPU time (this process: server and nodes, user + system) goes to STAGES."""
    os.sync()  # no dirty pages left over from the previous phase
    _PHASE[0] = phase
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    function()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    STAGES[phase]["CPU time of the phase (process, all threads)"] += (
        after.ru_utime - cpu.ru_utime + after.ru_stime - cpu.ru_stime
    )
    return wall


def _copy_and_fsync(source: Path, dest: Path) -> None:
    shutil.copytree(source, dest)
    for path in dest.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=512)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--shard-mb", type=float, default=16)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    _instrument()
    console = Console()
    rows: dict[str, list[float]] = defaultdict(list)
    ratios: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="crf-relay-bench-") as tmp_name:
        tmp = Path(tmp_name)
        source = write_checkpoint(tmp / "src" / "step_1", total_mb=args.size_mb, n_files=args.files, seed=1)
        size_mb = sum(p.stat().st_size for p in source.iterdir()) / 1e6
        for r in range(args.repeat):
            run = tmp / f"run{r}"
            broadcasts = source.parent
            copy_s = _timeit("copy", lambda run=run: shutil.copytree(source, run / "copy"))
            durable_copy_s = _timeit("copy + fsync", lambda run=run: _copy_and_fsync(source, run / "copy2"))
            _PHASE[0] = "publish"  # the origin writes its empty index when it starts
            with RelayOrigin(broadcasts, run / "data", shard_size=int(args.shard_mb * 1e6)) as origin:
                publish_s = _timeit("publish", origin.poll_once)
                one = RelayNode(
                    PullConfig(server=[origin.url], broadcast_dir=run / "node0" / "broadcasts", workers=args.workers)
                )
                results = []
                pull_s = _timeit("pull, 1 node", lambda one=one, results=results: results.append(one.pull_once()))
                placed_s = results[0].seconds
                assert same_tree(source, run / "node0" / "broadcasts" / "step_1")
                many = [
                    RelayNode(
                        PullConfig(
                            server=[origin.url], broadcast_dir=run / f"node{i}" / "broadcasts", workers=args.workers
                        )
                    )
                    for i in range(1, args.nodes + 1)
                ]
                with ThreadPoolExecutor(max_workers=max(1, args.nodes)) as pool:
                    many_results = []
                    many_s = _timeit(
                        f"pull, {args.nodes} nodes at once",
                        lambda pool=pool, many=many, out=many_results: out.extend(
                            pool.map(lambda n: n.pull_once(), many)
                        ),
                    )
                many_placed_s = max(result.seconds for result in many_results)  # they all start together
                for i in range(1, args.nodes + 1):
                    assert same_tree(source, run / f"node{i}" / "broadcasts" / "step_1")
            for name, seconds, mb, baseline in (
                ("local copy (shutil.copytree)", copy_s, size_mb, copy_s),
                ("local copy + fsync of every file", durable_copy_s, size_mb, durable_copy_s),
                ("relay publish (origin)", publish_s, size_mb, copy_s),
                ("relay pull, 1 node: until in place", placed_s, size_mb, copy_s),
                ("relay pull, 1 node: + flush to disk", pull_s, size_mb, durable_copy_s),
                ("relay publish + pull in place, 1 node", publish_s + placed_s, size_mb, copy_s),
                (
                    f"relay pull, {args.nodes} nodes at once: all in place (aggregate)",
                    many_placed_s,
                    size_mb * args.nodes,
                    copy_s,
                ),
                (f"relay pull, {args.nodes} nodes at once: + flush (aggregate)", many_s, size_mb * args.nodes, copy_s),
            ):
                rows[name].append(seconds)
                ratios[name].append((mb / seconds) / (size_mb / baseline))
            console.print(
                f"repeat {r + 1}: copy {copy_s:.2f} s, publish {publish_s:.2f} s "
                f"({ratios['relay publish (origin)'][-1]:.2f}x), pull in place {placed_s:.2f} s "
                f"({ratios['relay pull, 1 node: until in place'][-1]:.2f}x); copy + fsync {durable_copy_s:.2f} s, "
                f"pull + flush {pull_s:.2f} s ({ratios['relay pull, 1 node: + flush to disk'][-1]:.2f}x)"
            )
            shutil.rmtree(run)

    table = Table(
        title=f"relay vs local copy: {size_mb:.0f} MB checkpoint, {args.files} files, {args.shard_mb:g} MB shards, "
        f"{args.workers} workers per node, median of {args.repeat}; load average {os.getloadavg()[0]:.2f} "
        f"on {os.cpu_count()} CPUs at the end"
    )
    for col in ("operation", "seconds", "MB/s", "throughput / copy (same repeat; + fsync rows vs copy + fsync)"):
        table.add_column(col, justify="right" if col != "operation" else "left")
    for name, seconds in rows.items():
        mb = size_mb * (args.nodes if "nodes at once" in name else 1)
        median_s = statistics.median(seconds)
        table.add_row(name, f"{median_s:.2f}", f"{mb / median_s:.0f}", f"{statistics.median(ratios[name]):.2f}")
    console.print(table)

    stages = Table(title=f"where the time goes (seconds per repeat, mean of {args.repeat})")
    stages.add_column("phase")
    stages.add_column("stage")
    stages.add_column("seconds", justify="right")
    for phase, times in STAGES.items():
        for stage, total in times.items():
            stages.add_row(phase, stage, f"{total / args.repeat:.3f}")
    console.print(stages)


if __name__ == "__main__":
    main()
