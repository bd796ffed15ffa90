"""Node side: fetch the newest advertised step from relay servers into prime-rl's local broadcast directory.

The inference server loads whatever directory the orchestrator names in ``/update_weights`` (``weight_dir`` =
``<output_dir>/broadcasts/step_<n>``, ``src/prime_rl/orchestrator/watcher.py``), so a node keeps the same path
locally. Guarantees:

- nothing but a finished step ever appears there: shards are fetched into the hidden
  ``<broadcast_dir>/.crf-relay/staging/step_<n>/``, every shard is checked against its blake3, the archive is
  unpacked and every file checked again, ``STABLE`` is written last, and only then is the directory renamed to
  ``step_<n>`` (one ``rename(2)`` on the same filesystem);
- a step that cannot be verified is never renamed into place;
- verified shards survive a crash or a dead server, so the next pull only fetches what is missing;
- only the newest ``keep`` complete steps are kept.

Shard fetching is shardcast's ``ShardDownloader`` (``wget`` per shard into ``<name>.tmp``, renamed when complete;
per-server bandwidth and success-rate tracking). crf-prime adds per-shard checksums, failover order and bounded
retries (upstream's ``download_shards`` retries a missing shard forever).
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from crf_prime.extras import require
from crf_prime.relay.layout import RELAY_DIR, STABLE, local_stable_steps, step_dir
from crf_prime.relay.manifest import (
    INDEX_NAME,
    RelayError,
    RelayIndex,
    ShardEntry,
    StepManifest,
    read_index,
    read_manifest,
    write_model_atomic,
)
from crf_prime.relay.origin import PROBE_NAME
from crf_prime.relay.pack import assemble_step

log = logging.getLogger(__name__)

ShardHook = Callable[[StepManifest, ShardEntry, bool], None]
"""Called after each shard is verified: (manifest, shard, reused_from_an_earlier_run)."""


class PullResult(BaseModel):
    """Outcome of one successful pull."""

    model_config = ConfigDict(frozen=True)

    step: int
    """Step now visible in the broadcast directory."""
    path: Path
    """The ``step_<n>`` directory."""
    downloaded_shards: int
    """Shards fetched over HTTP in this run."""
    reused_shards: int
    """Verified shards found in the staging directory from an earlier, interrupted run."""
    downloaded_bytes: int
    """Bytes (in bytes) fetched over HTTP in this run."""
    seconds: float
    """Wall time (in seconds) of the pull."""


def normalize_server(url: str) -> str:
    """``http(s)://host:port`` without a trailing slash; anything else is rejected with the offending value."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")) or len(url.split("://", 1)[1]) == 0:
        raise ValueError(f"relay server {url!r} must be an http:// or https:// URL")
    return url


def _downloader_class() -> type:
    client = require("shardcast.client", "shardcast")

    class NodeDownloader(client.ShardDownloader):
        """shardcast's downloader with a startup probe that tolerates dead servers.

        Upstream's probe raises on the first unreachable server and writes a fixed ``/tmp/dummy.bin`` that
        concurrent clients on one host race on; here each probe goes to the node's own working directory and a
        dead server just starts with a zero success rate (shardcast heals it slowly as other downloads succeed).
        """

        def __init__(self, servers: list[str], probe_dir: Path, timeout: int) -> None:
            self.probe_dir = probe_dir
            super().__init__(servers, timeout)

        def _init_server_metrics(self) -> None:
            for i, server in enumerate(self.servers):
                target = self.probe_dir / f"probe-{i}.bin"
                if self._download_file(server, PROBE_NAME, target):
                    target.unlink(missing_ok=True)

        def ranked(self, candidates: Sequence[str]) -> list[str]:
            """Candidates by shardcast's score (success rate x bandwidth), best first; ties keep the given order."""
            with self.metrics_lock:
                scores = {
                    s: (m.success_rate * m.bandwidth_mbps if (m := self.server_metrics.get(s)) else 0.0)
                    for s in candidates
                }
            return sorted(candidates, key=lambda s: -scores[s])

    return NodeDownloader


class RelayNode:
    """Pull steps from ``servers`` into ``broadcast_dir`` (the path the orchestrator will name)."""

    def __init__(
        self,
        servers: Sequence[str],
        broadcast_dir: Path,
        *,
        keep: int = 2,
        workers: int = 4,
        attempts: int = 3,
        timeout: int = 30,
        retry_wait: float = 1.0,
    ) -> None:
        if not servers:
            raise ValueError("at least one relay server is required")
        if keep < 1 or workers < 1 or attempts < 1:
            raise ValueError("keep, workers and attempts must be >= 1")
        self.servers = [normalize_server(s) for s in servers]
        self.broadcast_dir = Path(broadcast_dir)
        self.keep = keep
        self.workers = workers
        self.attempts = attempts
        self.retry_wait = retry_wait
        self.work = self.broadcast_dir / RELAY_DIR
        self.staging_root = self.work / "staging"
        self.trash = self.work / "trash"
        for path in (self.staging_root, self.trash, self.work / "probe"):
            path.mkdir(parents=True, exist_ok=True)
        self.downloader = _downloader_class()(self.servers, self.work / "probe", timeout)

    # -- discovery -------------------------------------------------------------------------------------------

    def fetch_indices(self) -> tuple[dict[str, RelayIndex], list[str]]:
        """Each reachable server's index, and a note for every server left out (unreachable or malformed index)."""
        indices: dict[str, RelayIndex] = {}
        problems: list[str] = []
        for i, server in enumerate(self.servers):
            target = self.work / f"index-{i}.json"
            if not self.downloader._download_file(server, INDEX_NAME, target, update_metrics=False):
                problems.append(f"{server}: no answer for {INDEX_NAME}")
                continue
            try:
                indices[server] = read_index(target, f"{server}/{INDEX_NAME}")
            except RelayError as e:
                problems.append(str(e))
        for problem in problems:
            log.warning("%s", problem)
        return indices, problems

    # -- pulling ---------------------------------------------------------------------------------------------

    def pull_once(self, on_shard: ShardHook | None = None) -> PullResult | None:
        """Bring the newest advertised step into place; None when already up to date.

        Raises :class:`RelayError` when no server answers or the step cannot be fetched and verified; verified
        shards are kept for the next attempt and nothing becomes visible to prime-rl.
        """
        with self._exclusive():
            return self._pull_locked(on_shard)

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        """One pull at a time per broadcast directory (the lock dies with its process, so a crash never blocks)."""
        with open(self.work / "lock", "a+b") as handle:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as e:
                raise RelayError(f"another relay pull is running on {self.broadcast_dir}") from e
            try:
                for leftover in self.trash.iterdir():  # deletions interrupted by a crash
                    shutil.rmtree(leftover, ignore_errors=True)
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _pull_locked(self, on_shard: ShardHook | None) -> PullResult | None:
        started = time.perf_counter()
        indices, problems = self.fetch_indices()
        if not indices:
            raise RelayError(f"no relay server gave a valid index: {'; '.join(problems)}")
        advertised = [m for index in indices.values() if (m := index.newest()) is not None]
        if not advertised:
            return None
        manifest = max(advertised, key=lambda m: (m.step, m.published_at))
        local = local_stable_steps(self.broadcast_dir)
        if local and manifest.step <= local[-1]:
            return None
        sources = {
            server: m.version
            for server, index in indices.items()
            if (m := index.get(manifest.step)) is not None and m.content_id == manifest.content_id
        }
        staging = self._prepare_staging(manifest)
        shards_dir = staging / "shards"
        reused, missing = [], []
        for shard in manifest.shards:
            path = shards_dir / shard.name
            if path.is_file() and path.stat().st_size == shard.size and self._verify(path, shard):
                reused.append(shard)
                if on_shard is not None:
                    on_shard(manifest, shard, True)
            else:
                path.unlink(missing_ok=True)
                missing.append(shard)
        downloaded = self._download(manifest, missing, sources, shards_dir, on_shard)
        final = self._assemble(manifest, staging, shards_dir)
        shutil.rmtree(staging, ignore_errors=True)
        self.prune()
        return PullResult(
            step=manifest.step,
            path=final,
            downloaded_shards=len(missing),
            reused_shards=len(reused),
            downloaded_bytes=downloaded,
            seconds=time.perf_counter() - started,
        )

    def _prepare_staging(self, manifest: StepManifest) -> Path:
        """The staging directory for ``manifest``; stale staging (other steps, other bytes) is discarded."""
        staging = self.staging_root / f"step_{manifest.step}"
        for other in self.staging_root.iterdir():
            if other != staging:
                self._discard(other)
        staged = read_manifest(staging / "manifest.json")
        if staged is not None and staged.content_id != manifest.content_id:
            self._discard(staging)
        (staging / "shards").mkdir(parents=True, exist_ok=True)
        for leftover in (staging / "shards").glob("*.tmp"):  # an interrupted wget
            leftover.unlink(missing_ok=True)
        self._discard(staging / "tree")
        write_model_atomic(staging / "manifest.json", manifest)
        return staging

    @staticmethod
    def _verify(path: Path, shard: ShardEntry) -> bool:
        from shardcast.utils import verify_checksum

        return verify_checksum(str(path), shard.blake3)

    def _download(
        self,
        manifest: StepManifest,
        shards: list[ShardEntry],
        sources: dict[str, str],
        shards_dir: Path,
        on_shard: ShardHook | None,
    ) -> int:
        if not shards:
            return 0
        stop = threading.Event()

        def fetch(shard: ShardEntry) -> int:
            if stop.is_set():
                return 0
            size = self._fetch_shard(manifest, shard, sources, shards_dir / shard.name, stop)
            if on_shard is not None:
                on_shard(manifest, shard, False)
            return size

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            futures = [pool.submit(fetch, shard) for shard in shards]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            if any(f.exception() is not None for f in done):
                stop.set()
                for future in futures:
                    future.cancel()
            results = [f.result() for f in futures if not f.cancelled()]
        return sum(results)

    def _fetch_shard(
        self,
        manifest: StepManifest,
        shard: ShardEntry,
        sources: dict[str, str],
        dest: Path,
        stop: threading.Event,
    ) -> int:
        """Fetch one shard, trying servers best-first in turn, until its blake3 matches."""
        order = self.downloader.ranked(list(sources))
        if not order:
            raise RelayError(f"step {manifest.step}: no server advertises it any more")
        problems: list[str] = []
        for attempt in range(self.attempts * len(order)):
            if stop.is_set():
                raise RelayError(f"step {manifest.step}: pull aborted")
            server = order[attempt % len(order)]
            if not self.downloader._download_file(server, f"{sources[server]}/{shard.name}", dest):
                problems.append(f"{server}: download failed")
            elif dest.stat().st_size == shard.size and self._verify(dest, shard):
                return shard.size
            else:
                dest.unlink(missing_ok=True)
                self.downloader._update_server_metrics(server, 0.0, False)
                problems.append(f"{server}: checksum mismatch")
            if (attempt + 1) % len(order) == 0 and attempt + 1 < self.attempts * len(order):
                time.sleep(self.retry_wait)
        raise RelayError(f"step {manifest.step}: shard {shard.name} could not be verified ({'; '.join(problems)})")

    def _assemble(self, manifest: StepManifest, staging: Path, shards_dir: Path) -> Path:
        tree = staging / "tree"
        shard_paths = [shards_dir / s.name for s in manifest.shards]
        try:
            assemble_step(shard_paths, manifest, tree)
        except RelayError:
            # every shard matched its checksum, so the index itself disagrees with its shards: start over
            self._discard(staging)
            raise
        marker = tree / STABLE
        with open(marker, "wb") as handle:
            os.fsync(handle.fileno())
        _fsync_dir(tree)
        final = step_dir(self.broadcast_dir, manifest.step)
        if final.exists():  # an unmarked leftover with our name; never a STABLE step (those are newer-checked)
            self._discard(final)
        os.rename(tree, final)
        _fsync_dir(self.broadcast_dir)
        return final

    # -- retention -------------------------------------------------------------------------------------------

    def prune(self) -> list[int]:
        """Remove all but the newest ``keep`` complete steps (each renamed out of sight before it is deleted)."""
        steps = local_stable_steps(self.broadcast_dir)
        removed = steps[: -self.keep] if len(steps) > self.keep else []
        for step in removed:
            self._discard(step_dir(self.broadcast_dir, step))
        return removed

    def _discard(self, path: Path) -> None:
        if not path.exists():
            return
        target = self.trash / f"{path.name}-{uuid.uuid4().hex[:8]}"
        os.rename(path, target)
        shutil.rmtree(target, ignore_errors=True)

    def run(
        self,
        stop: threading.Event,
        poll_interval: float = 2.0,
        on_result: Callable[[PullResult], None] | None = None,
        on_error: Callable[[RelayError], None] | None = None,
        on_shard: ShardHook | None = None,
    ) -> None:
        """Pull until ``stop`` is set; failures are reported and retried on the next poll."""
        while not stop.is_set():
            try:
                result = self.pull_once(on_shard)
            except RelayError as e:
                log.warning("%s", e)
                if on_error is not None:
                    on_error(e)
            else:
                if result is not None:
                    if on_result is not None:
                        on_result(result)
                    continue
            stop.wait(poll_interval)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
