"""``crf-prime relay serve`` (next to the trainer) and ``crf-prime relay pull`` (on each remote inference node).

Weight relay for decentralized jobs (crf-prime's addition, not part of Cursor's recipe): ``serve`` publishes each
complete ``broadcasts/step_<n>`` over HTTP; ``pull`` fetches each new step as soon as it is published into a node's
local broadcast directory, verified and renamed into place only when complete.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

from crf_prime.errors import InfraError, InputError
from crf_prime.relay.config import GateConfig, PullConfig, ServeConfig


def _stop_on_signals() -> threading.Event:

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def serve(config: ServeConfig) -> int:
    """Publish complete steps of prime-rl's broadcast directory over HTTP (next to the trainer)."""
    from rich.console import Console  # start-up: +341 ms on every command

    from crf_prime.relay.origin import RelayOrigin  # start-up: +23 ms on every command

    console = Console(stderr=True)
    try:
        origin = RelayOrigin(
            config.broadcast_dir,
            config.data_dir,
            host=config.host,
            port=config.port,
            keep=config.keep,
            shard_size=int(config.shard_size_mb * 1_000_000),
        )
    except OSError as e:  # port in use, address not available, data dir not writable
        raise InfraError(f"cannot serve {config.data_dir} on {config.host}:{config.port}: {e.strerror or e}") from e
    except ValueError as e:
        raise InputError(str(e)) from e
    try:
        if config.ready_file is not None:
            tmp = config.ready_file.with_name(config.ready_file.name + ".tmp")
            tmp.write_text(origin.url + "\n")
            tmp.replace(config.ready_file)
        console.print(f"[bold]relay serving[/] {origin.url}  from {config.broadcast_dir} (data {config.data_dir})")
        origin.run(
            _stop_on_signals(),
            poll_interval=config.poll,
            on_publish=lambda m: console.print(
                f"published step {m.step} as {m.version}: {len(m.files)} files, {len(m.shards)} shards, "
                f"{m.total_size / 1e6:.1f} MB"
            ),
            on_error=lambda step, e: console.print(f"[red]not published[/] step {step}: {e}"),
        )
    finally:
        origin.close()
    return 0


def pull(config: PullConfig) -> int:
    """Fetch each newly published step into this node's broadcast directory (on each inference node)."""
    from rich.console import Console  # start-up: +341 ms on every command

    from crf_prime.relay.node import RelayNode  # start-up: +116 ms on every command

    console = Console(stderr=True)
    node = RelayNode(config)
    gate = _start_gate(config.gate, config.broadcast_dir) if config.gate is not None else None
    if gate is not None and config.gate is not None:
        console.print(f"admin gate {gate.url} -> {config.gate.upstream}")
    try:
        return _pull_loop(config, node, console)
    finally:
        if gate is not None:
            gate.close()


def _start_gate(config: GateConfig, broadcast_dir: Path):
    from crf_prime.relay.gate import AdminGate  # start-up: +49 ms on every command

    try:
        return AdminGate(config.upstream, broadcast_dir, host=config.host, port=config.port, wait_timeout=config.wait)
    except ValueError as e:
        raise InputError.field("gate.upstream", str(e)) from e
    except OSError as e:
        raise InfraError(f"cannot start the admin gate on {config.host}:{config.port}: {e.strerror or e}") from e


def _pull_loop(config: PullConfig, node, console) -> int:
    # start-up: +199 ms on every command
    from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn, TransferSpeedColumn

    progress = Progress(
        TextColumn("step {task.fields[step]}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=console,
        disable=not console.is_terminal,  # job logs get the per-step summary only
    )
    tasks: dict[int, TaskID] = {}
    lock = threading.Lock()

    def on_shard(manifest, shard, reused) -> None:  # runs on the pull's worker threads
        with lock:
            if manifest.step not in tasks:
                tasks[manifest.step] = progress.add_task("", total=manifest.total_size, step=manifest.step)
            progress.advance(tasks[manifest.step], shard.size)

    with progress:
        if config.once:
            result = node.pull_once(on_shard)  # RelayError (an InfraError) ends the command with exit 4
            if result is None:
                console.print("up to date")
            else:
                _report(console, result)
            return 0
        node.run(
            _stop_on_signals(),
            poll_interval=config.poll,
            on_result=lambda result: _report(console, result),
            on_error=lambda e: console.print(f"[yellow]pull failed, will retry[/]: {e}"),
            on_shard=on_shard,
        )
    return 0


def _report(console, result) -> None:
    from rich.table import Table  # start-up: +55 ms on every command

    table = Table(title=f"step {result.step} ready at {result.path}")
    for col in ("downloaded shards", "reused shards", "MB fetched", "seconds to place", "MB/s", "flush s"):
        table.add_column(col, justify="right")
    rate = result.downloaded_bytes / 1e6 / result.seconds if result.seconds > 0 else 0.0
    table.add_row(
        str(result.downloaded_shards),
        str(result.reused_shards),
        f"{result.downloaded_bytes / 1e6:.1f}",
        f"{result.seconds:.2f}",
        f"{rate:.1f}",
        f"{result.flush_seconds:.2f}",
    )
    console.print(table)
    console.print(
        f"step {result.step} ready: {result.downloaded_shards} shards downloaded, "
        f"{result.reused_shards} reused from an interrupted run",
        soft_wrap=True,
    )
