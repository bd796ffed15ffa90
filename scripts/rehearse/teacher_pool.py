"""The rehearsal's live teacher pool host: starts a local Ray cluster, serves crf-prime's live teacher pool on it
(``crf_prime.teachers.live.serve``: one detached actor per teacher and the ledger actor owning the journal and the
budget), writes the cluster's address for the env servers (``RAY_ADDRESS``), and on SIGTERM ends the pool's actors
and the cluster it started.

    python teacher_pool.py --teachers teachers.toml --journal pool/journal.jsonl --name crf-rehearsal \
        --address-file ray.address

The env servers' trace-replay taskset attaches to the pool by name (``task.live_pool``); the A2 hint writer
(``task.hint_writer.live``) serves its own pool on the same cluster from the first env-server process that needs it.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--teachers", type=Path, required=True, help="teachers TOML ([[teachers]], [budget], [pool])")
    parser.add_argument("--journal", type=Path, required=True, help="the live pool's journal")
    parser.add_argument("--name", required=True, help="the live pool's name (task.live_pool)")
    parser.add_argument("--address-file", type=Path, required=True, help="written with the Ray address when ready")
    parser.add_argument("--num-cpus", type=int, default=1)
    args = parser.parse_args()

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    # The raylet waits for the dashboard agent's port file (10 s by default) and aborts after it; on a loaded 2-core
    # box the agent's imports alone take longer (43 s at load 7 without a bytecode cache).
    os.environ.setdefault("RAY_agent_register_timeout_ms", "300000")
    import ray

    from crf_prime.teachers.config import load_pool_config
    from crf_prime.teachers.live import DEFAULT_NAMESPACE, serve, shutdown

    config = load_pool_config(args.teachers)
    ray.init(
        num_cpus=args.num_cpus,
        include_dashboard=False,
        namespace=DEFAULT_NAMESPACE,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",  # loopback only
    )
    for sig in (signal.SIGTERM, signal.SIGINT):  # ray.init installs its own handlers
        signal.signal(sig, lambda *_: stop.set())
    try:
        args.journal.parent.mkdir(parents=True, exist_ok=True)
        serve(config, args.journal, name=args.name)
        address = ray.get_runtime_context().gcs_address
        tmp = args.address_file.with_name(args.address_file.name + ".tmp")
        tmp.write_text(address + "\n")
        tmp.replace(args.address_file)
        print(f"live teacher pool {args.name!r} on Ray {address}", flush=True)
        stop.wait()
    finally:
        shutdown(args.name)
        ray.shutdown()


if __name__ == "__main__":
    main()
