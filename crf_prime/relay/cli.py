"""``crf-prime relay serve`` (next to the trainer) and ``crf-prime relay pull`` (on each remote inference node).

Weight relay for decentralized jobs (crf-prime's addition, not part of Cursor's recipe): ``serve`` publishes each
complete ``broadcasts/step_<n>`` over HTTP; ``pull`` fetches each new step as soon as it is published into a node's
local broadcast directory, verified and renamed into place only when complete.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, Field
from pydantic_config import BaseConfig

from crf_prime.errors import InfraError, InputError

Port = Annotated[int, Field(ge=0, le=65535)]


class ServeConfig(BaseConfig):
    broadcast_dir: Path
    """prime-rl's ``<output_dir>/<run.name>/broadcasts``."""
    data_dir: Path
    """Where shards and the index are kept and served; on the broadcast dir's filesystem, publishing is hard links."""
    host: str = "127.0.0.1"
    """Bind address (``0.0.0.0`` for all interfaces)."""
    port: Port = 8765
    """HTTP port (0 picks a free one)."""
    keep: Annotated[int, Field(ge=1)] = 3
    """Published steps kept downloadable."""
    shard_size_mb: Annotated[float, Field(gt=0)] = 16.0
    """Shard size in MB; servers that nodes fail over between need the same one."""
    poll: Annotated[float, Field(gt=0)] = 0.5
    """Seconds between scans of the broadcast dir."""
    ready_file: Path | None = None
    """Write the server URL here once it listens."""


class GateConfig(BaseModel):
    """The admin gate in front of this node's inference engine: it holds a weight update until the step is here."""

    upstream: str
    """The vLLM engine's URL, ``http://127.0.0.1:8100`` with prime-rl's default ``inference.backend_port``. The
    engine, not the router (``server.port``, 8000): prime-rl sends admin calls to the engines' backend port too."""
    host: str = "127.0.0.1"
    """Gate bind address (``0.0.0.0`` for the orchestrator on another host)."""
    port: Port = 8190
    """Gate port: the port in ``orchestrator.client.admin_base_url`` (configs/multinode/decentralized.toml)."""
    wait: Annotated[float, Field(gt=0)] = 600.0
    """Seconds a held update waits for its step before the gate answers 504."""


class PullConfig(BaseConfig):
    server: Annotated[list[str], Field(min_length=1)]
    """Relay server URLs, tried in order with failover (``--server http://a:8765 http://b:8765``)."""
    broadcast_dir: Path
    """Local broadcast dir; the same absolute path as the orchestrator's ``<output_dir>/<run.name>/broadcasts``."""
    keep: Annotated[int, Field(ge=1)] = 2
    """Complete steps kept locally."""
    workers: Annotated[int, Field(ge=1)] = 4
    """Concurrent shard downloads."""
    attempts: Annotated[int, Field(ge=1)] = 3
    """Passes over all servers per shard."""
    timeout: Annotated[float, Field(gt=0)] = 30.0
    """HTTP timeout per request, in seconds."""
    poll: Annotated[float, Field(gt=0)] = 2.0
    """Seconds one long-poll on the servers' index waits (a publish answers at once)."""
    once: bool = False
    """Pull the newest step once and exit (4 when it fails)."""
    gate: GateConfig | None = None
    """Also run the admin gate (``--gate.upstream URL``); point ``orchestrator.client.admin_base_url`` at it."""


def _stop_on_signals() -> threading.Event:
    import signal

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def serve(config: ServeConfig) -> int:
    """Publish complete steps of prime-rl's broadcast directory over HTTP (next to the trainer)."""
    from rich.console import Console

    from crf_prime.relay.origin import RelayOrigin

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
    from rich.console import Console

    from crf_prime.relay.node import RelayNode

    console = Console(stderr=True)
    try:
        node = RelayNode(
            config.server,
            config.broadcast_dir,
            keep=config.keep,
            workers=config.workers,
            attempts=config.attempts,
            timeout=config.timeout,
        )
    except ValueError as e:
        raise InputError.field("server", str(e)) from e
    gate = _start_gate(config.gate, config.broadcast_dir) if config.gate is not None else None
    if gate is not None and config.gate is not None:
        console.print(f"admin gate {gate.url} -> {config.gate.upstream}")
    try:
        return _pull_loop(config, node, console)
    finally:
        if gate is not None:
            gate.close()


def _start_gate(config: GateConfig, broadcast_dir: Path):
    from crf_prime.relay.gate import AdminGate

    try:
        return AdminGate(config.upstream, broadcast_dir, host=config.host, port=config.port, wait_timeout=config.wait)
    except ValueError as e:
        raise InputError.field("gate.upstream", str(e)) from e
    except OSError as e:
        raise InfraError(f"cannot start the admin gate on {config.host}:{config.port}: {e.strerror or e}") from e


def _pull_loop(config: PullConfig, node, console) -> int:
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
    from rich.table import Table

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
