"""Relay throughput vs a plain local copy of the same checkpoint, on loopback, and where the relay's time goes.

    .venv/bin/python benchmarks/relay.py [--size-mb 512] [--files 4] [--shard-mb 16] [--workers 4] [--nodes 3]
                                         [--repeat 3]

Writes a prime-rl-shaped step (safetensors files + index, random data) once, then ``--repeat`` times, each phase
after ``os.sync()`` and from fresh directories: ``shutil.copytree`` of the step (the baseline), the origin publishing
it (hard links + safetensors checks + per-shard blake3 + index), one node pulling it (ranged GETs over loopback
spliced into the files, per-shard blake3, fsync, rename), and ``--nodes`` nodes pulling at once. Prints each
repeat's ratios to the copy of the same repeat and their medians, then the time per stage (summed over threads
where stages run in parallel). Loopback only; disk, page cache and CPU are shared with whatever else runs.
"""

from __future__ import annotations

import argparse
import os
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
from crf_prime.relay.node import RelayNode
from crf_prime.relay.origin import RelayOrigin

STAGES: dict[str, float] = defaultdict(float)
_LOCK = threading.Lock()


def _timed(stage: str, function: Callable) -> Callable:
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            with _LOCK:
                STAGES[stage] += time.perf_counter() - started

    return wrapper


def _instrument() -> None:
    """Time each stage by wrapping the functions that do it (the benchmark's own process only)."""
    origin_mod.link_files = _timed("publish: hard-link files", origin_mod.link_files)
    origin_mod.check_files = _timed("publish: safetensors checks", origin_mod.check_files)
    origin_mod.hash_shards = _timed("publish: blake3 per shard", origin_mod.hash_shards)
    origin_mod.write_model_atomic = _timed("publish: write index", origin_mod.write_model_atomic)
    socket.socket.sendfile = _timed("pull: server sendfile (threads)", socket.socket.sendfile)
    transport.ServerConnection.read_into_file = _timed(
        "pull: receive into files (threads)", transport.ServerConnection.read_into_file
    )
    node_mod._StagedFiles.digest = _timed("pull: blake3 verify (threads)", node_mod._StagedFiles.digest)
    node_mod._StagedFiles.start_writeback = _timed(
        "pull: start writeback (threads)", node_mod._StagedFiles.start_writeback
    )
    node_mod._StagedFiles.fsync = _timed("pull: fsync files", node_mod._StagedFiles.fsync)
    node_mod.RelayNode._assemble = _timed("pull: checks + STABLE + rename", node_mod.RelayNode._assemble)
    node_mod.RelayNode.fetch_indices = _timed("pull: fetch index", node_mod.RelayNode.fetch_indices)


def _timeit(function: Callable[[], object]) -> float:
    os.sync()  # no dirty pages left over from the previous phase
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


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
            copy_s = _timeit(
                lambda run=run, broadcasts=broadcasts: shutil.copytree(broadcasts / "step_1", run / "copy")
            )
            with RelayOrigin(broadcasts, run / "data", shard_size=int(args.shard_mb * 1e6)) as origin:
                publish_s = _timeit(origin.poll_once)
                one = RelayNode([origin.url], run / "node0" / "broadcasts", workers=args.workers)
                pull_s = _timeit(one.pull_once)
                assert same_tree(source, run / "node0" / "broadcasts" / "step_1")
                many = [
                    RelayNode([origin.url], run / f"node{i}" / "broadcasts", workers=args.workers)
                    for i in range(1, args.nodes + 1)
                ]
                with ThreadPoolExecutor(max_workers=max(1, args.nodes)) as pool:
                    many_s = _timeit(lambda pool=pool, many=many: list(pool.map(lambda n: n.pull_once(), many)))
                for i in range(1, args.nodes + 1):
                    assert same_tree(source, run / f"node{i}" / "broadcasts" / "step_1")
            for name, seconds, mb in (
                ("local copy (shutil.copytree)", copy_s, size_mb),
                ("relay publish (origin)", publish_s, size_mb),
                ("relay pull, 1 node", pull_s, size_mb),
                ("relay publish + pull, 1 node", publish_s + pull_s, size_mb),
                (f"relay pull, {args.nodes} nodes at once (aggregate)", many_s, size_mb * args.nodes),
            ):
                rows[name].append(seconds)
                ratios[name].append((mb / seconds) / (size_mb / copy_s))
            console.print(
                f"repeat {r + 1}: copy {copy_s:.2f} s, publish {publish_s:.2f} s "
                f"({ratios['relay publish (origin)'][-1]:.2f}x), pull {pull_s:.2f} s "
                f"({ratios['relay pull, 1 node'][-1]:.2f}x)"
            )
            shutil.rmtree(run)

    table = Table(
        title=f"relay vs local copy: {size_mb:.0f} MB checkpoint, {args.files} files, {args.shard_mb:g} MB shards, "
        f"{args.workers} workers per node, median of {args.repeat}"
    )
    for col in ("operation", "seconds", "MB/s", "throughput / copy (same repeat)"):
        table.add_column(col, justify="right" if col != "operation" else "left")
    for name, seconds in rows.items():
        mb = size_mb * (args.nodes if "nodes at once" in name else 1)
        median_s = statistics.median(seconds)
        table.add_row(name, f"{median_s:.2f}", f"{mb / median_s:.0f}", f"{statistics.median(ratios[name]):.2f}")
    console.print(table)

    stages = Table(title=f"where the time goes (seconds per repeat, mean of {args.repeat}; pulls of all nodes)")
    stages.add_column("stage")
    stages.add_column("seconds", justify="right")
    for stage, total in STAGES.items():
        stages.add_row(stage, f"{total / args.repeat:.3f}")
    console.print(stages)


if __name__ == "__main__":
    main()
