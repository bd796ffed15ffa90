"""Origin side: publish every complete prime-rl broadcast step and serve it over HTTP.

A step is complete when prime-rl's trainer has touched ``step_<n>/STABLE`` (it does so after all ranks wrote their
safetensors, ``FileSystemWeightBroadcast._notify_orchestrator``). Only the newest unpublished complete step is
published on each poll: an inference node only ever wants the newest weights.

Publishing hard-links the step's files into ``<data_dir>/v<k>/`` (no copy), hashes them shard by shard, and only
then rewrites the index (:data:`~crf_prime.relay.manifest.INDEX_NAME`) with one rename, so a node never sees a
step advertised before it can be fetched. Versions beyond ``keep`` are deleted.

The server (:mod:`crf_prime.relay.transport`) answers ranged GETs with ``sendfile`` and long-polls on the index, so nodes
start pulling the moment a step is advertised.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from crf_prime.relay.layout import STABLE, local_stable_steps, step_dir
from crf_prime.relay.manifest import INDEX_NAME, RelayError, RelayIndex, StepManifest, read_index, write_model_atomic
from crf_prime.relay.pack import check_files, checkpoint_files, hash_shards, link_files
from crf_prime.relay.transport import RelayHTTPServer, RequestHook

log = logging.getLogger(__name__)

DEFAULT_SHARD_SIZE = 16_000_000
"""Default shard size (in bytes): large enough for full-speed transfers, small enough to resume cheaply."""


class RelayOrigin:
    """Serve ``data_dir`` over HTTP and publish steps from prime-rl's ``broadcast_dir`` into it.

    ``keep`` steps stay downloadable. Restarting on the same ``data_dir`` keeps serving what was published before.
    ``on_request`` is called in the serving thread before each file range is sent (tests use it to hold a
    transfer at a chosen point).
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
        on_request: RequestHook | None = None,
    ) -> None:
        if keep < 1:
            raise ValueError("keep must be >= 1")
        if shard_size < 1:
            raise ValueError("shard_size must be >= 1 byte")
        self.broadcast_dir = Path(broadcast_dir)
        self.data_dir = Path(data_dir).resolve()
        self.shard_size = shard_size
        self.keep = keep
        index_path = self.data_dir / INDEX_NAME
        try:
            self.index = read_index(index_path) if index_path.exists() else RelayIndex()
        except RelayError as e:
            raise ValueError(
                f"{index_path} is not an index this relay version can read (an older relay or damage left it): "
                f"remove {self.data_dir} and start again"
            ) from e
        # bind before writing anything: a port in use leaves no data directory behind
        self._server = RelayHTTPServer(self.data_dir, host, port, on_request=on_request)
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            write_model_atomic(index_path, self.index)  # an empty index means "reachable, nothing published yet"
            self._remove_unindexed_versions()
        except BaseException:
            self._server.close()
            raise
        self._server.set_index(self.index)
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
        """Link, hash and advertise ``step``; raise :class:`RelayError` (nothing advertised) if it is not sound."""
        with self._lock:
            source = step_dir(self.broadcast_dir, step)
            if not (source / STABLE).is_file():
                raise RelayError(f"{source}: no {STABLE} marker, the step is not complete")
            files = checkpoint_files(source)
            check_files(source, files)
            version = self._next_version()
            staging = self.data_dir / f".{version}.tmp"
            shutil.rmtree(staging, ignore_errors=True)
            try:
                link_files(source, staging, files)
                check_files(staging, files)  # the linked bytes are the served bytes
                entries, shards = hash_shards(staging, files, self.shard_size)
                staging.rename(self.data_dir / version)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            manifest = StepManifest(
                step=step,
                version=version,
                shard_size=self.shard_size,
                files=entries,
                shards=shards,
                published_at=time.time(),
            )
            kept = [m for m in self.index.steps if m.step != step and (self.data_dir / m.version).is_dir()]
            self.index = RelayIndex(steps=tuple(sorted([*kept, manifest], key=lambda m: m.step)[-self.keep :]))
            write_model_atomic(self.data_dir / INDEX_NAME, self.index)
            self._server.set_index(self.index)
            self._remove_unindexed_versions()
            log.info("published step %d as %s (%d shards, %d bytes)", step, version, len(shards), manifest.total_size)
            return manifest

    def _next_version(self) -> str:
        numbers = [int(p.name[1:]) for p in self.data_dir.glob("v*") if p.name[1:].isdigit()]
        numbers += [int(m.version[1:]) for m in self.index.steps]
        return f"v{max(numbers, default=0) + 1}"

    def _remove_unindexed_versions(self) -> None:
        """Delete version folders no longer in the index (past ``keep``) and leftovers of an interrupted publish.

        A node still fetching a removed version gets 404 for its remaining shards and moves on to the newer step.
        """
        live = {m.version for m in self.index.steps}
        for path in self.data_dir.iterdir():
            name = path.name
            stale = (name.startswith("v") and name[1:].isdigit() and name not in live) or (
                name.startswith(".v") and name.endswith(".tmp")
            )
            if stale and path.is_dir():
                shutil.rmtree(path, ignore_errors=True)

    def poll_once(self) -> StepManifest | None:
        """Publish the newest pending step, if any."""
        step = self.pending_step()
        return None if step is None else self.publish(step)

    def run(
        self,
        stop: threading.Event,
        poll_interval: float = 0.5,
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
        self._server.close()

    def __enter__(self) -> RelayOrigin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
