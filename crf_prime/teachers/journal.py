"""The replay journal: one append-only JSONL row per (state_id, teacher), and the call log beside it.

Every journal row is flushed and fsynced before the call counts as done, so a job killed with SIGKILL loses at most
the calls that were in flight. Those are found on restart through the call log (``<journal>.intents.jsonl``). Each
ledger that opens it first writes an ``open`` row naming the machine's boot (:mod:`crf_prime.boot`); then, for each
call, in order: an ``intent`` row when the call is admitted (its question and reservation), made durable before the
call may be sent; a ``sent`` row written *before the first byte of the request is written* (before the connection
is even opened); and a ``clear`` row when an attempt ended with an HTTP error status (the provider refused it:
nothing to pay).

The ``sent`` row is handed to the OS, not synced: it survives the process being killed, and only a power loss or a
kernel crash -- a new boot -- can lose it. So on restart a call whose last event is ``intent`` or ``clear``, written
under the current boot, provably has no request at the provider that could be billed, and is re-sent; one whose
last event is ``sent`` may have been billed, and is booked at its reservation; and an unanswered call written under
another boot may have lost its ``sent`` row, so it is booked too. Where the OS has no boot id the ``sent`` row is
synced before the request is written instead (what it costs: one disk sync inside the provider slot). Restarting
never re-sends a question that has an ``ok`` row, except a call whose requests carried an idempotency key (the
``intent`` row's ``key``): it is re-sent with that key, which the provider answers without charging twice.

A ``charge`` row resolves a journal row booked at its reservation (cost unknown) to the cost the provider reported
later (its generation lookup); the journal row itself is never rewritten.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from crf_prime.records.journal import JournalRecord, read_rows

CallEvent = Literal["open", "intent", "sent", "clear", "charge"]


class Intent(BaseModel):
    """One event of a call's life in the call log, or the ``open`` row of a ledger (see the module docstring)."""

    model_config = ConfigDict(frozen=True)

    state_id: str = ""
    teacher: str = ""
    trace_id: str = ""
    ts: float
    question: str = ""
    reserve_usd: float = 0.0
    event: CallEvent = "intent"
    boot_id: str | None = None
    """``open`` rows: the boot the rows after it were written under (None: an OS without boot ids)."""
    key: str = ""
    """``intent`` rows: the idempotency key the call's requests carry (empty: the endpoint takes none)."""
    cost_usd: float = 0.0
    """``charge`` rows: what the provider says an answered call whose cost was unknown cost."""
    via: str = ""
    """``charge`` rows: how that was learnt ("generation": the provider's generation lookup)."""
    generation_id: str = ""
    """``charge`` rows: the generation the provider was asked about (the journal row's ``generation_id``)."""


def read_intents(path: str | Path) -> Iterator[Intent]:
    yield from read_rows(Path(path), Intent)


def intents_path(journal_path: str | Path) -> Path:
    p = Path(journal_path)
    return p.with_name(p.name.removesuffix(".jsonl") + ".intents.jsonl")


_datasync = getattr(os, "fdatasync", os.fsync)
"""fdatasync where the OS has it: it flushes the appended data and the file size (the metadata needed to read the
data back) and skips the timestamps, which is all an append-only log needs to survive a crash (POSIX fdatasync)."""


def _sync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # platforms that cannot open a directory (Windows) have no directory entry to sync
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _AppendLog:
    """Append-only JSONL writer: one line per row, flushed and fsynced before ``append`` returns."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._repair_torn_tail()
        created = not self.path.exists()
        self._f = self.path.open("ab")
        self._lock = threading.Lock()
        if created:  # the new file's directory entry must be durable too, or a crash can lose the whole file
            _sync_dir(self.path.parent)

    def _repair_torn_tail(self) -> None:
        # a process killed mid-write leaves a last line without "\n"; cut it so the next row starts on its own line
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with self.path.open("rb+") as f:
            data = f.read()
            if data.endswith(b"\n"):
                return
            cut = data.rfind(b"\n") + 1
            f.truncate(cut)
            f.flush()
            os.fsync(f.fileno())

    def append_line(self, line: bytes) -> None:
        self.append_lines([line])

    def append_lines(self, lines: list[bytes]) -> None:
        """Write lines and make them durable with one sync."""
        self.write_lines(lines)
        self.sync()

    def write_lines(self, lines: list[bytes]) -> None:
        """Write lines to the OS (not yet durable: :meth:`sync` makes them so)."""
        with self._lock:
            self._f.write(b"".join(line + b"\n" for line in lines))
            self._f.flush()

    def sync(self) -> None:
        """Make everything written so far durable (fdatasync; fsync where there is none). The lock is not held
        during the sync: a writer on the event loop never waits for the disk."""
        _datasync(self._f.fileno())

    def close(self) -> None:
        with self._lock:
            self._f.close()


class Journal(_AppendLog):
    """Append-only journal writer (flush + fsync per record)."""

    def append(self, record: JournalRecord) -> None:
        self.append_line(record.model_dump_json().encode())

    @staticmethod
    def line(record: JournalRecord) -> bytes:
        return record.model_dump_json().encode()


class IntentLog(_AppendLog):
    """Append-only intent writer (flush + fsync per intent, before the request is sent)."""

    def append(self, intent: Intent) -> None:
        self.append_line(self.line(intent))

    @staticmethod
    def line(intent: Intent) -> bytes:
        return json.dumps(intent.model_dump()).encode()


class GroupCommit:
    """Async front of one or more append logs: appends that arrive while a sync runs share the next round.

    ``await append(line, log)`` returns once the line is durable, as with a per-record fsync, but N appends that
    arrive while a round is running cost one more round, not N. A round writes and syncs, in a worker thread (the
    event loop never blocks on the disk), each log that has lines waiting, in the order the logs were given, and
    releases that log's writers as soon as its own sync is done. The ledger gives the intent log and the journal
    one ``GroupCommit``, intents first: a finished call's journal row and the next call's intent row arrive at the
    same moment, and the intent -- which holds a teacher slot, the journal row does not -- is durable after one
    sync instead of racing the journal's sync on the same disk from a second thread.
    """

    def __init__(self, *logs: _AppendLog) -> None:
        if not logs:
            raise ValueError("GroupCommit needs at least one log")
        self.logs = logs
        self._queues: dict[_AppendLog, list[tuple[bytes, asyncio.Future[None]]]] = {log: [] for log in logs}
        self._task: asyncio.Task[None] | None = None

    async def append(self, line: bytes, log: _AppendLog | None = None) -> None:
        await self._enqueue(line, log)

    def write_now(self, line: bytes, log: _AppendLog | None = None) -> None:
        """Hand a line to the OS at once, not durable (it survives the process being killed, not a power cut).
        Only for a log whose queued lines must not come after it: the caller has just awaited an ``append``."""
        (self.logs[0] if log is None else log).write_lines([line])

    def post(self, line: bytes, log: _AppendLog | None = None) -> None:
        """Queue a line that need not be durable: it starts no round of its own and goes out, in order, with the
        next round (a later ``append`` to the same log returns only once this line is durable too)."""
        fut = self._enqueue(line, log, start=False)
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())

    def _enqueue(self, line: bytes, log: _AppendLog | None, *, start: bool = True) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._queues[self.logs[0] if log is None else log].append((line, fut))
        if start and (self._task is None or self._task.done()):
            self._task = loop.create_task(self._drain())
        return fut

    async def _drain(self) -> None:
        while any(self._queues.values()):
            for log in self.logs:
                batch, self._queues[log] = self._queues[log], []
                if not batch:
                    continue
                try:
                    await asyncio.to_thread(log.append_lines, [line for line, _ in batch])
                except BaseException as e:  # the writers see the I/O error; nothing is counted as durable
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(e)
                    continue
                for _, fut in batch:
                    if not fut.done():
                        fut.set_result(None)
