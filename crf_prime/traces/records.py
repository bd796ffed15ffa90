"""Streaming record readers with malformed-line accounting, plus the per-run ingest report.

Every ingester reads its input through :func:`iter_records`: JSONL line by line, or a top-level JSON array element
by element (an incremental ``raw_decode`` over a bounded buffer), so memory stays bounded by the largest single
record, never by the file. Lines that are not JSON are counted and reported as ``file:line``; a non-empty file with
no parsable record at all raises :class:`IngestError`.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crf_prime.errors import ExitCode, InputError

MAX_REPORTED_MALFORMED = 200
"""Malformed locations kept verbatim in the report; beyond this only the count grows."""

_CHUNK = 1 << 16


class IngestError(InputError):
    """Input that cannot be ingested at all (unparsable file, unknown format); the message names the file."""


class NothingIngested(IngestError):
    """No input file could be read as a trace (none given, all empty or of no known format): nothing to write."""

    exit_code = ExitCode.NOTHING


@dataclass
class IngestReport:
    """Counters of one ingest run: what was read, what became states, what was skipped and why."""

    files: int = 0
    states: int = 0
    traces: int = 0
    records: int = 0
    capped: int = 0
    """States whose context was cut to ``max_context_chars``."""
    skipped: Counter[str] = field(default_factory=Counter)
    """Skipped records/turns by reason (``malformed_json``, ``sidechain``, ``meta``, ``empty_action``, ...)."""
    malformed: list[str] = field(default_factory=list)
    """``file:line: error`` of the first :data:`MAX_REPORTED_MALFORMED` malformed lines."""
    formats: Counter[str] = field(default_factory=Counter)
    """Files per detected format."""
    unread: list[str] = field(default_factory=list)
    """``file: reason`` of each input file skipped whole (empty, or of no known format)."""
    bytes_read: int = 0
    """Input read so far by the record readers (bytes of JSONL lines, characters of JSON arrays)."""
    on_read: Callable[[IngestReport], None] | None = field(default=None, repr=False, compare=False)
    """Called after each record read (progress display; keep it cheap, it runs per record)."""

    def read(self, n: int) -> None:
        self.bytes_read += n
        if self.on_read is not None:
            self.on_read(self)

    def skip(self, reason: str, n: int = 1) -> None:
        if n > 0:
            self.skipped[reason] += n

    def malformed_line(self, path: Path, line: int, error: str) -> None:
        self.skip("malformed_json")
        if len(self.malformed) < MAX_REPORTED_MALFORMED:
            self.malformed.append(f"{path}:{line}: {error}")


def state_id(fmt: str, trace_id: str, key: str) -> str:
    """Stable id of one decision point: sha256 of (format, trace id, position key), 24 hex chars.

    Position keys are format-native (a Claude Code record uuid, an OpenHands event id, a message index), so
    re-ingesting the same trace gives the same ids regardless of where the file lives.
    """
    return hashlib.sha256(f"{fmt}\0{trace_id}\0{key}".encode()).hexdigest()[:24]


def _first_char(path: Path) -> str:
    with path.open("rb") as f:
        while chunk := f.read(4096):
            stripped = chunk.lstrip()
            if stripped:
                return stripped[:1].decode("latin-1")
    return ""


def iter_jsonl_offsets(path: Path, report: IngestReport) -> Iterator[tuple[int, int, Any]]:
    """(1-based line, byte offset of the line, parsed value) of each non-blank JSONL line; bad lines are counted in
    ``report``. The offset lets a second pass ``seek`` back to chosen records instead of holding them all."""
    offset = 0
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, start=1):
            start, offset = offset, offset + len(raw)
            report.read(len(raw))
            if not raw.strip():
                continue
            try:
                value = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                report.malformed_line(path, line_no, f"{type(e).__name__}: {e}")
                continue
            report.records += 1
            yield line_no, start, value


def iter_jsonl(path: Path, report: IngestReport) -> Iterator[tuple[int, Any]]:
    """(1-based line, parsed value) of each non-blank JSONL line; bad lines are counted in ``report``."""
    for line_no, _, value in iter_jsonl_offsets(path, report):
        yield line_no, value


def iter_json_array(path: Path, report: IngestReport) -> Iterator[tuple[int, Any]]:
    """(1-based element index, value) of a top-level JSON array, decoded incrementally.

    A syntax error inside the array cannot be resynchronised reliably; it is reported at the element index and
    ends the file.
    """
    decoder = json.JSONDecoder()
    with path.open(encoding="utf-8", errors="replace") as f:
        buf = ""
        pos = 0
        started = False
        index = 0
        eof = False
        while True:
            # skip whitespace and separators
            while True:
                while pos < len(buf) and buf[pos] in " \t\r\n,":
                    pos += 1
                if pos < len(buf) or eof:
                    break
                chunk = f.read(_CHUNK)
                buf, pos = buf[pos:] + chunk, 0
                eof = not chunk
                report.read(len(chunk))
            if not started:
                if pos >= len(buf) or buf[pos] != "[":
                    report.malformed_line(path, 1, "expected a JSON array")
                    return
                started, pos = True, pos + 1
                continue
            if pos >= len(buf):
                report.malformed_line(path, index + 1, "unterminated JSON array")
                return
            if buf[pos] == "]":
                return
            while True:
                try:
                    value, end = decoder.raw_decode(buf, pos)
                    break
                except json.JSONDecodeError as e:
                    if eof:
                        report.malformed_line(path, index + 1, f"JSONDecodeError: {e.msg}")
                        return
                    chunk = f.read(_CHUNK)
                    buf, pos = buf[pos:] + chunk, 0
                    eof = not chunk
                    report.read(len(chunk))
            index += 1
            report.records += 1
            yield index, value
            buf, pos = buf[end:], 0


def iter_records(path: Path, report: IngestReport) -> Iterator[tuple[int, Any]]:
    """Records of a JSONL file or of a top-level JSON array, chosen by the first non-blank character."""
    first = _first_char(path)
    return iter_json_array(path, report) if first == "[" else iter_jsonl(path, report)


def truncate_middle(text: str, limit: int | None) -> str:
    """Keep the head and tail of an over-long observation (like OpenHands ``truncate_content``)."""
    if limit is None or len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters truncated ...]\n{text[-half:]}"
