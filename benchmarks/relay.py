"""Relay throughput vs a plain local file copy of the same checkpoint, on loopback.

    .venv/bin/python benchmarks/relay.py [--size-mb 512] [--files 4] [--shard-mb 50] [--nodes 3]

Writes a prime-rl-shaped step (safetensors shards + index, random float data) to a temp dir, then measures in the
same run, each phase after ``os.sync()``: ``shutil.copytree`` of the step (the baseline), the origin publishing it (tar + shardcast sharding +
checksums), one node pulling it (shardcast/wget fetch + per-shard blake3 + unpack + per-file blake3 + fsync), and
``--nodes`` nodes pulling concurrently. Prints MB/s and each ratio to the copy. Loopback only; numbers depend on
disk, page cache and CPU (blake3 and wget run on the same cores as the copy).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "relay"))

from relay_testkit import same_tree, write_checkpoint
from rich.console import Console
from rich.table import Table

from crf_prime.relay.node import RelayNode
from crf_prime.relay.origin import RelayOrigin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=512)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--shard-mb", type=float, default=50)
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args()
    import shardcast.utils

    shardcast.utils.logger.setLevel(logging.WARNING)
    console = Console()
    with tempfile.TemporaryDirectory(prefix="crf-relay-bench-") as tmp_name:
        tmp = Path(tmp_name)
        broadcasts = tmp / "trainer" / "broadcasts"
        source = write_checkpoint(broadcasts / "step_1", total_mb=args.size_mb, n_files=args.files, seed=1)
        size_mb = sum(p.stat().st_size for p in source.iterdir()) / 1e6

        os.sync()  # every timed phase starts with no dirty pages left over from the previous one
        t0 = time.perf_counter()
        shutil.copytree(source, tmp / "copy" / "step_1")
        copy_s = time.perf_counter() - t0

        rows: list[tuple[str, float, float]] = [("local copy (shutil.copytree)", copy_s, size_mb)]
        with RelayOrigin(broadcasts, tmp / "data", shard_size=int(args.shard_mb * 1e6)) as origin:
            os.sync()
            t0 = time.perf_counter()
            origin.poll_once()
            publish_s = time.perf_counter() - t0
            rows.append(("relay publish (origin)", publish_s, size_mb))

            node = RelayNode([origin.url], tmp / "node0" / "broadcasts")
            os.sync()
            t0 = time.perf_counter()
            node.pull_once()
            pull_s = time.perf_counter() - t0
            rows.append(("relay pull, 1 node", pull_s, size_mb))
            rows.append(("relay publish + pull, 1 node", publish_s + pull_s, size_mb))
            assert same_tree(source, tmp / "node0" / "broadcasts" / "step_1")

            nodes = [RelayNode([origin.url], tmp / f"node{i}" / "broadcasts") for i in range(1, args.nodes + 1)]
            os.sync()
            t0 = time.perf_counter()
            with ThreadPoolExecutor(max_workers=args.nodes) as pool:
                list(pool.map(lambda n: n.pull_once(), nodes))
            many_s = time.perf_counter() - t0
            rows.append((f"relay pull, {args.nodes} nodes at once (aggregate)", many_s, size_mb * args.nodes))
            for i in range(1, args.nodes + 1):
                assert same_tree(source, tmp / f"node{i}" / "broadcasts" / "step_1")

    table = Table(
        title=f"relay vs local copy: {size_mb:.0f} MB checkpoint, {args.files} files, {args.shard_mb:g} MB shards"
    )
    for col in ("operation", "seconds", "MB/s", "throughput / copy"):
        table.add_column(col, justify="right" if col != "operation" else "left")
    copy_rate = size_mb / copy_s
    for name, seconds, mb in rows:
        rate = mb / seconds
        table.add_row(name, f"{seconds:.2f}", f"{rate:.0f}", f"{rate / copy_rate:.2f}")
    console.print(table)


if __name__ == "__main__":
    main()
