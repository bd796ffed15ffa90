"""Node side: fetch the newest advertised step from relay servers into prime-rl's local broadcast directory.

The inference server loads whatever directory the orchestrator names in ``/update_weights`` (``weight_dir`` =
``<output_dir>/broadcasts/step_<n>``, ``src/prime_rl/orchestrator/watcher.py``), so a node keeps the same path
locally. Guarantees:

- nothing but a finished step ever appears there: shards are written into the hidden
  ``<broadcast_dir>/.crf-relay/staging/step_<n>/tree/``, every shard is checked against its blake3 as it arrives,
  the files' safetensors headers are checked, ``STABLE`` is written last, and only then is the directory renamed to
  ``step_<n>`` (one ``rename(2)`` on the same filesystem);
- a step that cannot be verified is never renamed into place;
- the step is flushed to disk right after the rename, off the path to the engine: a killed process cannot lose
  page-cache data, and a power loss before the flush finished is caught by an ``unflushed`` marker that names the
  boot it was written in, so a step placed in an earlier boot and never flushed is discarded, never served;
- verified shards survive a crash or a dead server (listed in the staging's ``verified`` journal and re-hashed
  before reuse), so the next pull only fetches what is missing;
- only the newest ``keep`` complete steps are kept.

Shards are fetched in parallel (``workers`` threads, keep-alive connections, HTTP ranges), each from the best
server that advertises the same bytes, failing over to the others; :meth:`RelayNode.run` long-polls the servers'
index so a pull starts the moment a step is published, before the orchestrator asks for it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import http.client
import itertools
import logging
import mmap
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict

from crf_prime.boot import boot_id as machine_boot_id
from crf_prime.relay.config import PullConfig
from crf_prime.relay.layout import RELAY_DIR, STABLE, local_stable_steps, parse_step, step_dir
from crf_prime.relay.manifest import (
    INDEX_NAME,
    RelayError,
    RelayIndex,
    ShardEntry,
    StepManifest,
    parse_index,
    read_manifest,
    write_model_atomic,
)
from crf_prime.relay.pack import blake3, check_safetensors
from crf_prime.relay.transport import ServerConnection

log = logging.getLogger(__name__)

ShardHook = Callable[[StepManifest, ShardEntry, bool], None]
"""Called after each shard is verified: (manifest, shard, reused_from_an_earlier_run). May run on several threads."""

JOURNAL = "verified"
"""File in a staging directory listing the shards already written and verified, one name per line."""

UNFLUSHED = "unflushed"
"""Folder in the node's working directory: one file per step renamed into place but not yet flushed to disk,
holding the boot id it was placed in."""


class _Aborted(RelayError):
    """A shard transfer stopped because another shard of the same pull failed."""


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
    """Wall time (in seconds) from the start of the pull until the step was in place."""
    flush_seconds: float
    """Wall time (in seconds) after that, writing the step to disk (the engine can load it meanwhile)."""


class RelayNode:
    """Pull steps from ``config.server`` into ``config.broadcast_dir`` (the path the orchestrator will name)."""

    def __init__(self, config: PullConfig, *, retry_wait: float = 1.0) -> None:
        """``retry_wait``: seconds between passes over the servers after a failure (tests shorten it)."""
        self.config = config
        self.servers = list(config.server)
        self.broadcast_dir = config.broadcast_dir
        self.keep = config.keep
        self.workers = config.workers
        self.attempts = config.attempts
        self.timeout = config.timeout
        self.retry_wait = retry_wait
        self.work = self.broadcast_dir / RELAY_DIR
        self.staging_root = self.work / "staging"
        self.trash = self.work / "trash"
        self.unflushed = self.work / UNFLUSHED
        for path in (self.staging_root, self.trash, self.unflushed):
            path.mkdir(parents=True, exist_ok=True)
        self._failures = dict.fromkeys(self.servers, 0)
        self._lock = threading.Lock()
        # recover before a gate can answer for a step a power loss may have emptied (a running pull already did)
        with contextlib.suppress(RelayError), self._exclusive():
            pass

    # -- discovery -------------------------------------------------------------------------------------------

    def fetch_indices(self, after: int | None = None, wait: float = 0.0) -> tuple[dict[str, RelayIndex], list[str]]:
        """Each reachable server's index, and a note for every server left out (unreachable or malformed index).

        With ``after``, the first server is long-polled for up to ``wait`` seconds for a step newer than ``after``.
        """
        indices: dict[str, RelayIndex] = {}
        problems: list[str] = []
        for i, server in enumerate(self.servers):
            query = f"?after={after}&wait={wait}" if after is not None and i == 0 else ""
            try:
                data = _get_small(server, f"/{INDEX_NAME}{query}", self.timeout + (wait if query else 0))
            except (OSError, http.client.HTTPException, RelayError) as e:
                problems.append(f"{server}: no answer for {INDEX_NAME} ({e})")
                continue
            try:
                indices[server] = parse_index(data, f"{server}/{INDEX_NAME}")
            except RelayError as e:
                problems.append(str(e))
        for problem in problems:
            log.warning("%s", problem)
        return indices, problems

    def wait_for_new(self, wait: float) -> None:
        """Return once a server advertises a step newer than the newest local one, or after about ``wait`` seconds.

        Long-polls the servers in turn (the origin answers the moment it publishes), so :meth:`run` starts a pull
        as soon as a step exists rather than at the next poll.
        """
        local = local_stable_steps(self.broadcast_dir)
        after = local[-1] if local else -1
        deadline = time.monotonic() + wait
        for server in self.servers:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                data = _get_small(server, f"/{INDEX_NAME}?after={after}&wait={remaining:.3f}", self.timeout + remaining)
                newest = parse_index(data, server).newest()
            except (OSError, http.client.HTTPException, RelayError) as e:
                log.debug("long-poll on %s failed: %s", server, e)
                continue
            if newest is not None and newest.step > after:
                return
        time.sleep(max(0.0, min(self.retry_wait, deadline - time.monotonic())))

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
                self._recover_unflushed()
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
        with _StagedFiles(staging / "tree", manifest) as files:
            reused = self._reverify(manifest, staging, files)
            for shard in reused:
                if on_shard is not None:
                    on_shard(manifest, shard, True)
            reused_names = {s.name for s in reused}
            missing = [s for s in manifest.shards if s.name not in reused_names]
            downloaded = self._download(manifest, missing, sources, staging, files, on_shard)
        final = self._assemble(manifest, staging)
        placed = time.perf_counter()
        self._flush(manifest.step)
        shutil.rmtree(staging, ignore_errors=True)
        self.prune()
        return PullResult(
            step=manifest.step,
            path=final,
            downloaded_shards=len(missing),
            reused_shards=len(reused),
            downloaded_bytes=downloaded,
            seconds=placed - started,
            flush_seconds=time.perf_counter() - placed,
        )

    def _prepare_staging(self, manifest: StepManifest) -> Path:
        """The staging directory for ``manifest``; stale staging (other steps, other bytes) is discarded."""
        staging = self.staging_root / f"step_{manifest.step}"
        for other in self.staging_root.iterdir():
            if other != staging:
                self._discard(other)
        staged = read_manifest(staging / "manifest.json")
        if staged is None or staged.content_id != manifest.content_id:
            self._discard(staging)
        (staging / "tree").mkdir(parents=True, exist_ok=True)
        write_model_atomic(staging / "manifest.json", manifest)
        return staging

    def _reverify(self, manifest: StepManifest, staging: Path, files: _StagedFiles) -> list[ShardEntry]:
        """Shards an interrupted run verified whose bytes still hash right; the journal is rewritten to those."""
        journal = staging / JOURNAL
        listed = set(journal.read_text().split()) if journal.is_file() else set()
        reused = [s for s in manifest.shards if s.name in listed and files.digest(s) == s.blake3]
        tmp = journal.with_suffix(".tmp")
        tmp.write_text("".join(f"{s.name}\n" for s in reused))
        tmp.replace(journal)
        return reused

    def _ranked(self, candidates: Sequence[str]) -> list[str]:
        """Servers with the fewest recent failures first; ties keep the configured order."""
        with self._lock:
            return sorted(candidates, key=lambda s: (self._failures[s], self.servers.index(s)))

    def _note(self, server: str, ok: bool) -> None:
        with self._lock:
            self._failures[server] = 0 if ok else self._failures[server] + 1

    def _download(
        self,
        manifest: StepManifest,
        shards: list[ShardEntry],
        sources: dict[str, str],
        staging: Path,
        files: _StagedFiles,
        on_shard: ShardHook | None,
    ) -> int:
        if not shards:
            return 0
        stop = threading.Event()
        local = threading.local()
        opened: list[ServerConnection] = []
        journal_lock = threading.Lock()

        def connection(server: str) -> ServerConnection:
            conns = local.__dict__.setdefault("conns", {})
            if server not in conns:
                conns[server] = ServerConnection(server, self.timeout)
                with journal_lock:
                    opened.append(conns[server])
            return conns[server]

        def drop(server: str) -> None:
            conn = local.__dict__.get("conns", {}).pop(server, None)
            if conn is not None:
                conn.close()

        def fetch(shard: ShardEntry) -> int:
            if stop.is_set():
                return 0
            self._fetch_shard(manifest, shard, sources, files, stop, connection, drop)
            with journal_lock, open(staging / JOURNAL, "a") as journal:
                journal.write(f"{shard.name}\n")
            if on_shard is not None:
                on_shard(manifest, shard, False)
            return shard.size

        try:
            with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="relay-pull") as pool:
                futures = [pool.submit(fetch, shard) for shard in across_files(shards)]
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                if any(f.exception() is not None for f in done):
                    stop.set()
                    for future in futures:
                        future.cancel()
                errors = [e for f in futures if not f.cancelled() and (e := f.exception()) is not None]
                if errors:  # the cause, not a shard that was merely stopped because of it
                    raise next((e for e in errors if not isinstance(e, _Aborted)), errors[0])
                results = [f.result() for f in futures]
        finally:
            for conn in opened:
                conn.close()
        return sum(results)

    def _fetch_shard(
        self,
        manifest: StepManifest,
        shard: ShardEntry,
        sources: dict[str, str],
        files: _StagedFiles,
        stop: threading.Event,
        connection: Callable[[str], ServerConnection],
        drop: Callable[[str], None],
    ) -> None:
        """Fetch one shard into place, trying servers best-first in turn, until its blake3 matches."""
        order = self._ranked(list(sources))
        if not order:
            raise RelayError(f"step {manifest.step}: no server advertises it any more")
        problems: list[str] = []
        for attempt in range(self.attempts * len(order)):
            if stop.is_set():
                raise _Aborted(f"step {manifest.step}: pull aborted")
            server = order[attempt % len(order)]
            try:
                digest = _fetch_range(connection(server), f"/{sources[server]}/{quote(shard.path)}", shard, files, stop)
            except _Aborted:
                drop(server)  # the connection is mid-body
                raise
            except (OSError, http.client.HTTPException, RelayError) as e:
                drop(server)
                self._note(server, False)
                problems.append(f"{server}: {e}")
            else:
                if digest == shard.blake3:
                    self._note(server, True)
                    return
                self._note(server, False)
                problems.append(f"{server}: checksum mismatch")
            if (attempt + 1) % len(order) == 0 and attempt + 1 < self.attempts * len(order):
                stop.wait(self.retry_wait)
        raise RelayError(f"step {manifest.step}: shard {shard.name} could not be verified ({'; '.join(problems)})")

    def _assemble(self, manifest: StepManifest, staging: Path) -> Path:
        """Check the written step, mark it ``STABLE`` and rename it into prime-rl's view.

        The ``unflushed`` marker is on disk before the rename can be, so a power loss before :meth:`_flush`
        finishes leaves a marker that names the lost boot.
        """
        tree = staging / "tree"
        for entry in manifest.files:
            if entry.path.endswith(".safetensors"):
                try:
                    check_safetensors(tree / entry.path)
                except RelayError:
                    self._discard(staging)  # every shard matched, so the server published a bad file: start over
                    raise
        (tree / STABLE).touch()
        marker = self.unflushed / f"step_{manifest.step}"
        with open(marker, "w") as handle:
            handle.write(boot_id())
            handle.flush()
            os.fsync(handle.fileno())
        _fsync_dir(self.unflushed)
        final = step_dir(self.broadcast_dir, manifest.step)
        if final.exists():  # an unmarked leftover with our name; never a STABLE step (those are newer-checked)
            self._discard(final)
        os.rename(tree, final)
        return final

    def _flush(self, step: int) -> None:
        """Write a placed step's files and directories to disk, then drop its ``unflushed`` marker."""
        final = step_dir(self.broadcast_dir, step)
        for path in sorted(final.rglob("*"), reverse=True):
            if path.is_file():
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            else:
                _fsync_dir(path)
        _fsync_dir(final)
        _fsync_dir(self.broadcast_dir)
        (self.unflushed / f"step_{step}").unlink(missing_ok=True)

    def _recover_unflushed(self) -> None:
        """Finish the flush of steps placed in this boot; discard those placed in an earlier one.

        A step whose flush a power loss cut short may hold zeros behind its ``STABLE``; it is pulled again instead.
        """
        current = boot_id()
        for marker in self.unflushed.iterdir():
            step = parse_step(marker.name)
            if step is None or not step_dir(self.broadcast_dir, step).exists():
                marker.unlink()
            elif marker.read_text().strip() == current:
                self._flush(step)
            else:
                log.warning(
                    "step %d was placed before a restart of this machine and never flushed: pulling it again", step
                )
                self._discard(step_dir(self.broadcast_dir, step))
                marker.unlink()

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
        """Pull until ``stop`` is set: each step as soon as a server advertises it; failures are retried.

        Between pulls the servers are long-polled (a publish answers at once) in slices of ``poll_interval``
        seconds, which also bound how long setting ``stop`` takes to end the loop; after a failure the next attempt
        comes after ``retry_wait``.
        """
        while not stop.is_set():
            try:
                result = self.pull_once(on_shard)
            except RelayError as e:
                log.warning("%s", e)
                if on_error is not None:
                    on_error(e)
                stop.wait(self.retry_wait)
                continue
            if result is not None:
                if on_result is not None:
                    on_result(result)
                continue
            self.wait_for_new(poll_interval)


class _StagedFiles:
    """The step's files in the staging tree, opened once for positional writes from many threads."""

    def __init__(self, tree: Path, manifest: StepManifest) -> None:
        self.fds: dict[str, int] = {}
        try:
            for entry in manifest.files:
                path = tree / entry.path
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                self.fds[entry.path] = fd
                if os.fstat(fd).st_size != entry.size:
                    os.ftruncate(fd, entry.size)
        except BaseException:
            self.close()
            raise

    def digest(self, shard: ShardEntry) -> str:
        """blake3 of the shard's bytes as they are on disk now."""
        if shard.size == 0:
            return blake3.blake3(b"").hexdigest()
        fd = self.fds[shard.path]
        with (
            mmap.mmap(fd, shard.offset + shard.size, access=mmap.ACCESS_READ) as view,
            memoryview(view) as mv,
            mv[shard.offset :] as part,
        ):
            return blake3.blake3(part).hexdigest()

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    def __enter__(self) -> _StagedFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@functools.cache
def boot_id() -> str:
    """This boot of the machine: a marker written before a restart names another one. Where the OS has no boot id,
    every restart of the relay counts as a new boot, which only costs a re-pull."""
    return machine_boot_id() or f"process-{os.getpid()}-{time.time_ns()}"


def across_files(shards: Sequence[ShardEntry]) -> list[ShardEntry]:
    """``shards`` taken from each file in turn, so parallel workers write different files.

    A buffered write holds its file's inode lock, so workers writing one file at a time would take turns.
    """
    by_file: dict[str, list[ShardEntry]] = {}
    for shard in shards:
        by_file.setdefault(shard.path, []).append(shard)
    rounds = itertools.zip_longest(*by_file.values())
    return [shard for row in rounds for shard in row if shard is not None]


def _get_small(server: str, path: str, timeout: float) -> bytes:
    """GET a small resource (the index) on a fresh connection; non-200 raises :class:`RelayError`."""
    conn = ServerConnection(server, timeout)
    try:
        status, length = conn.request(path)
        body = conn.read_body(length)
        if status != 200:
            raise RelayError(f"HTTP {status}")
        return body
    finally:
        conn.close()


def _fetch_range(
    conn: ServerConnection, path: str, shard: ShardEntry, files: _StagedFiles, stop: threading.Event
) -> str:
    """Move one shard's byte range from the server into its file; return the blake3 of the bytes now there."""
    headers = {"Range": f"bytes={shard.offset}-{shard.offset + shard.size - 1}"} if shard.size else {}
    status, length = conn.request(path, headers)
    if status != (206 if shard.size else 200):
        conn.read_body(length) if length < (1 << 20) else conn.close()
        raise RelayError(f"HTTP {status} for {path}")
    if length != shard.size:
        conn.close()
        raise RelayError(f"{path}: server sends {length} bytes for a {shard.size}-byte shard")
    try:
        conn.read_into_file(length, files.fds[shard.path], shard.offset, stop)
    except ConnectionAbortedError as e:
        raise _Aborted("pull aborted") from e
    return files.digest(shard)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
