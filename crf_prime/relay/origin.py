"""Origin side: publish every complete prime-rl broadcast step through shardcast and advertise it.

A step is complete when prime-rl's trainer has touched ``step_<n>/STABLE`` (it does so after all ranks wrote their
safetensors, ``FileSystemWeightBroadcast._notify_orchestrator``). Only the newest unpublished complete step is
published on each poll: an inference node only ever wants the newest weights.

shardcast does the sharding (``OriginServer.broadcast``: ``v<k>/shard_<i>.bin`` + ``distribution.txt`` with the
archive's blake3, old versions pruned past ``max_distribution_folders``) and the HTTP serving (its
``ShardcastServer``/``ShardcastRequestHandler``). Our index (:data:`~crf_prime.relay.manifest.INDEX_NAME`) is
rewritten with one rename after the shards exist, so a node never sees a step advertised before it can be fetched.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from socketserver import ThreadingMixIn

from crf_prime.extras import require
from crf_prime.relay.layout import STABLE, local_stable_steps, step_dir
from crf_prime.relay.manifest import (
    INDEX_NAME,
    RelayError,
    RelayIndex,
    ShardEntry,
    StepManifest,
    read_index,
    write_model_atomic,
)
from crf_prime.relay.pack import pack_step

log = logging.getLogger(__name__)

PROBE_NAME = "data1.bin"
"""shardcast's ``ShardDownloader`` fetches this file from every server when it starts; the origin serves a tiny one."""

DEFAULT_SHARD_SIZE = 50_000_000
"""shardcast's default shard size (in bytes)."""


def _origin_classes() -> tuple[type, type]:
    shardcast = require("shardcast", "shardcast")
    server_mod = require("shardcast.server", "shardcast")

    class ThreadingShardcastServer(ThreadingMixIn, server_mod.ShardcastServer):
        """shardcast's server class, answering requests concurrently (upstream handles one at a time)."""

        daemon_threads = True

    class BoundOriginServer(shardcast.OriginServer):
        """shardcast's ``OriginServer`` with a chosen bind address.

        Upstream's ``__init__`` always binds 0.0.0.0 through ``run_server``; only ``__init__`` and ``shutdown`` are
        replaced here, ``broadcast`` (sharding, checksum, distribution file, pruning) is shardcast's own.
        """

        def __init__(self, data_dir: str, host: str, port: int, max_distribution_folders: int) -> None:
            self.data_dir = os.path.abspath(data_dir)
            self.max_distribution_folders = max_distribution_folders
            self.shutdown_event = threading.Event()
            os.makedirs(self.data_dir, exist_ok=True)
            self.http_server = ThreadingShardcastServer((host, port), self.data_dir, self.shutdown_event)
            self.port = self.http_server.server_address[1]
            self.server_thread = threading.Thread(target=self.http_server.serve_forever, daemon=True)
            self.server_thread.start()
            dist_file = os.path.join(self.data_dir, "distribution.txt")
            if not os.path.exists(dist_file):
                open(dist_file, "w").close()

        def shutdown(self) -> None:
            self.shutdown_event.set()
            self.http_server.shutdown()
            self.http_server.server_close()

    return ThreadingShardcastServer, BoundOriginServer


class RelayOrigin:
    """Serve ``data_dir`` over HTTP and publish steps from prime-rl's ``broadcast_dir`` into it.

    ``keep`` steps stay downloadable (shardcast's ``max_distribution_folders``). Restarting on the same
    ``data_dir`` keeps serving what was published before.
    """

    def __init__(
        self,
        broadcast_dir: Path,
        data_dir: Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        keep: int = 3,
        shard_size: int = DEFAULT_SHARD_SIZE,
    ) -> None:
        if keep < 1:
            raise ValueError("keep must be >= 1")
        if shard_size < 1:
            raise ValueError("shard_size must be >= 1 byte")
        self.broadcast_dir = Path(broadcast_dir)
        self.data_dir = Path(data_dir).resolve()
        self.shard_size = shard_size
        self.keep = keep
        _, origin_cls = _origin_classes()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / PROBE_NAME).write_bytes(b"crf-relay\n")
        index_path = self.data_dir / INDEX_NAME
        self.index = read_index(index_path) if index_path.exists() else RelayIndex()
        write_model_atomic(index_path, self.index)  # an empty index means "reachable, nothing published yet"
        self._server = origin_cls(str(self.data_dir), host, port, keep)
        self.host = host
        self.port: int = self._server.port
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def newest_published(self) -> int | None:
        newest = self.index.newest()
        return newest.step if newest else None

    def pending_step(self) -> int | None:
        """The newest complete step in the broadcast directory that is newer than anything published."""
        stable = local_stable_steps(self.broadcast_dir)
        published = self.newest_published()
        if not stable or (published is not None and stable[-1] <= published):
            return None
        return stable[-1]

    def publish(self, step: int) -> StepManifest:
        """Pack, shard and advertise ``step``; raise :class:`RelayError` (nothing advertised) if it is not sound."""
        with self._lock:
            source = step_dir(self.broadcast_dir, step)
            if not (source / STABLE).is_file():
                raise RelayError(f"{source}: no {STABLE} marker, the step is not complete")
            from shardcast.utils import compute_checksum, parse_distribution_file

            work = self.data_dir / ".pack"
            work.mkdir(exist_ok=True)
            archive = work / f"step_{step}.tar"
            try:
                files = pack_step(source, archive)
                version = self._server.broadcast(str(archive), self.shard_size)
                archive_size = archive.stat().st_size
            finally:
                archive.unlink(missing_ok=True)
            distribution = parse_distribution_file(str(self.data_dir / "distribution.txt"))
            archive_blake3 = distribution[version].partition("|")[0]
            version_dir = self.data_dir / version
            shards = tuple(
                ShardEntry(name=p.name, size=p.stat().st_size, blake3=compute_checksum(str(p)))
                for p in sorted(version_dir.glob("shard_*.bin"))
            )
            manifest = StepManifest(
                step=step,
                version=version,
                archive_size=archive_size,
                archive_blake3=archive_blake3,
                shard_size=self.shard_size,
                shards=shards,
                files=files,
                published_at=time.time(),
            )
            kept = [m for m in self.index.steps if m.step != step and (self.data_dir / m.version).is_dir()]
            self.index = RelayIndex(steps=tuple(sorted([*kept, manifest], key=lambda m: m.step)[-self.keep :]))
            write_model_atomic(self.data_dir / INDEX_NAME, self.index)
            log.info("published step %d as %s (%d shards, %d bytes)", step, version, len(shards), archive_size)
            return manifest

    def poll_once(self) -> StepManifest | None:
        """Publish the newest pending step, if any."""
        step = self.pending_step()
        return None if step is None else self.publish(step)

    def run(
        self,
        stop: threading.Event,
        poll_interval: float = 2.0,
        on_publish: Callable[[StepManifest], None] | None = None,
        on_error: Callable[[int, RelayError], None] | None = None,
    ) -> None:
        """Poll the broadcast directory until ``stop`` is set. A step that fails its checks is skipped, not retried."""
        failed: set[int] = set()
        while not stop.is_set():
            step = self.pending_step()
            if step is not None and step not in failed:
                try:
                    manifest = self.publish(step)
                except (RelayError, OSError) as e:
                    failed.add(step)
                    error = e if isinstance(e, RelayError) else RelayError(f"step {step}: {e}")
                    log.error("not publishing step %d: %s", step, error)
                    if on_error is not None:
                        on_error(step, error)
                else:
                    if on_publish is not None:
                        on_publish(manifest)
                continue
            stop.wait(poll_interval)

    def close(self) -> None:
        self._server.shutdown()
        shutil.rmtree(self.data_dir / ".pack", ignore_errors=True)

    def __enter__(self) -> RelayOrigin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
