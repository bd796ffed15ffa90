"""``crf-prime relay serve`` (next to the trainer) and ``crf-prime relay pull`` (on each remote inference node)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    relay = subparsers.add_parser(
        "relay",
        help="relay prime-rl filesystem-broadcast weights to inference nodes without a shared filesystem",
        description=(
            "Weight relay for decentralized jobs (crf-prime's addition, not part of Cursor's recipe). "
            "'serve' publishes each complete broadcasts/step_<n> over HTTP; 'pull' fetches each new step as soon as it "
            "is published into a node's local broadcast directory, verified and renamed into place only when complete."
        ),
    )
    sub = relay.add_subparsers(dest="relay_command", metavar="SUBCOMMAND", required=True)

    serve = sub.add_parser("serve", help="publish complete steps from prime-rl's broadcast directory over HTTP")
    serve.add_argument(
        "--broadcast-dir", type=Path, required=True, help="prime-rl's <output_dir>/<run.name>/broadcasts"
    )
    serve.add_argument("--data-dir", type=Path, required=True, help="where shards and the index are kept and served")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1; 0.0.0.0 for all)")
    serve.add_argument("--port", type=int, default=8765, help="HTTP port (0 picks a free one; default 8765)")
    serve.add_argument("--keep", type=int, default=3, help="published steps kept downloadable (default 3)")
    serve.add_argument("--shard-size-mb", type=float, default=16.0, help="shard size in MB (default 16)")
    serve.add_argument("--poll", type=float, default=0.5, help="seconds between scans of the broadcast dir")
    serve.add_argument("--ready-file", type=Path, help="write the server URL here once it listens")
    serve.set_defaults(func=_serve)

    pull = sub.add_parser("pull", help="fetch the newest step into this node's broadcast directory")
    pull.add_argument("--server", action="append", required=True, help="relay server URL (repeat for failover)")
    pull.add_argument(
        "--broadcast-dir",
        type=Path,
        required=True,
        help="local broadcast dir; must be the same absolute path as the orchestrator's <output_dir>/broadcasts",
    )
    pull.add_argument("--keep", type=int, default=2, help="complete steps kept locally (default 2)")
    pull.add_argument("--workers", type=int, default=4, help="concurrent shard downloads (default 4)")
    pull.add_argument("--attempts", type=int, default=3, help="passes over all servers per shard (default 3)")
    pull.add_argument("--timeout", type=float, default=30, help="HTTP timeout per request in seconds (default 30)")
    pull.add_argument(
        "--poll",
        type=float,
        default=2.0,
        help="seconds one long-poll on the servers' index waits (a publish answers at once; default 2)",
    )
    pull.add_argument("--once", action="store_true", help="pull the newest step once and exit (1 on failure)")
    pull.add_argument(
        "--gate-upstream",
        help="also run the admin gate: forward admin calls to this inference server URL (e.g. http://127.0.0.1:8000),"
        " holding weight updates until the step is here; point orchestrator.client.admin_base_url at the gate",
    )
    pull.add_argument("--gate-host", default="127.0.0.1", help="gate bind address (default 127.0.0.1)")
    pull.add_argument("--gate-port", type=int, default=8190, help="gate port (default 8190)")
    pull.add_argument("--gate-wait", type=float, default=600.0, help="seconds a held update waits before 504")
    pull.set_defaults(func=_pull)


def _stop_on_signals():
    import signal
    import threading

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _serve(args: argparse.Namespace) -> int:
    from rich.console import Console

    from crf_prime.relay.origin import RelayOrigin

    console = Console(stderr=True)
    try:
        origin = RelayOrigin(
            args.broadcast_dir,
            args.data_dir,
            host=args.host,
            port=args.port,
            keep=args.keep,
            shard_size=int(args.shard_size_mb * 1_000_000),
        )
    except ValueError as e:
        console.print(f"[red]error[/]: {e}")
        return 2
    if args.ready_file is not None:
        tmp = args.ready_file.with_name(args.ready_file.name + ".tmp")
        tmp.write_text(origin.url + "\n")
        tmp.replace(args.ready_file)
    console.print(f"[bold]relay serving[/] {origin.url}  from {args.broadcast_dir} (data {args.data_dir})")
    stop = _stop_on_signals()
    try:
        origin.run(
            stop,
            poll_interval=args.poll,
            on_publish=lambda m: console.print(
                f"published step {m.step} as {m.version}: {len(m.files)} files, {len(m.shards)} shards, "
                f"{m.total_size / 1e6:.1f} MB"
            ),
            on_error=lambda step, e: console.print(f"[red]not published[/] step {step}: {e}"),
        )
    finally:
        origin.close()
    return 0


def _pull(args: argparse.Namespace) -> int:
    from rich.console import Console

    from crf_prime.relay.node import RelayNode

    console = Console(stderr=True)
    try:
        node = RelayNode(
            args.server,
            args.broadcast_dir,
            keep=args.keep,
            workers=args.workers,
            attempts=args.attempts,
            timeout=args.timeout,
        )
        gate = None
        if args.gate_upstream:
            from crf_prime.relay.gate import AdminGate

            gate = AdminGate(
                args.gate_upstream,
                args.broadcast_dir,
                host=args.gate_host,
                port=args.gate_port,
                wait_timeout=args.gate_wait,
            )
            console.print(f"admin gate {gate.url} -> {args.gate_upstream}")
    except ValueError as e:
        console.print(f"[red]error[/]: {e}")
        return 2
    try:
        return _pull_loop(args, node, console)
    finally:
        if gate is not None:
            gate.close()


def _pull_loop(args: argparse.Namespace, node, console) -> int:
    import threading

    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn
    from rich.table import Table

    from crf_prime.relay.manifest import RelayError
    from crf_prime.relay.node import PullResult

    progress = Progress(
        TextColumn("step {task.fields[step]}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=console,
        disable=not console.is_terminal,  # job logs get the per-step summary only
    )
    tasks: dict[int, int] = {}
    lock = threading.Lock()

    def on_shard(manifest, shard, reused) -> None:  # runs on the pull's worker threads
        with lock:
            if manifest.step not in tasks:
                tasks[manifest.step] = progress.add_task("", total=manifest.total_size, step=manifest.step)
            progress.advance(tasks[manifest.step], shard.size)

    def report(result: PullResult) -> None:
        table = Table(title=f"step {result.step} ready at {result.path}")
        for col in ("downloaded shards", "reused shards", "MB fetched", "seconds", "MB/s"):
            table.add_column(col, justify="right")
        rate = result.downloaded_bytes / 1e6 / result.seconds if result.seconds > 0 else 0.0
        table.add_row(
            str(result.downloaded_shards),
            str(result.reused_shards),
            f"{result.downloaded_bytes / 1e6:.1f}",
            f"{result.seconds:.2f}",
            f"{rate:.1f}",
        )
        console.print(table)
        console.print(
            f"step {result.step} ready: {result.downloaded_shards} shards downloaded, "
            f"{result.reused_shards} reused from an interrupted run",
            soft_wrap=True,
        )

    with progress:
        if args.once:
            try:
                result = node.pull_once(on_shard)
            except RelayError as e:
                console.print(f"[red]pull failed[/]: {e}")
                return 1
            if result is None:
                console.print("up to date")
            else:
                report(result)
            return 0
        node.run(
            _stop_on_signals(),
            poll_interval=args.poll,
            on_result=report,
            on_error=lambda e: console.print(f"[yellow]pull failed, will retry[/]: {e}"),
            on_shard=on_shard,
        )
    return 0
