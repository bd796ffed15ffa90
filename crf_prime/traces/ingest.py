"""Format auto-detection and the ingest driver: paths in, :class:`TraceState` rows out (streamed), with a report.

``ingest_to_jsonl`` writes to a temporary file next to ``out`` and renames it on success, so a failed run leaves
nothing half-written.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Literal

from crf_prime.traces.claude_code import ingest_claude_code
from crf_prime.traces.messages_rows import ingest_swe_gym, ingest_swe_smith
from crf_prime.traces.models import TraceFormat, TraceState
from crf_prime.traces.openhands import ingest_openhands, is_v0_event, is_v1_event
from crf_prime.traces.records import IngestError, IngestReport, iter_records
from crf_prime.traces.verifiers_traces import ingest_verifiers

FormatChoice = Literal["auto", "claude-code", "openhands", "swe-smith", "swe-gym", "verifiers"]

INGESTERS: dict[TraceFormat, Callable[..., Iterator[TraceState]]] = {
    "claude-code": ingest_claude_code,
    "openhands": ingest_openhands,
    "swe-smith": ingest_swe_smith,
    "swe-gym": ingest_swe_gym,
    "verifiers": ingest_verifiers,
}

DEFAULT_MAX_OBSERVATION_CHARS = 30_000
"""Tool/user observations longer than this keep their head and tail only (teacher context budget)."""

_CLAUDE_TYPES = {"user", "assistant", "system", "summary", "file-history-snapshot", "queue-operation", "progress"}
_PEEK_RECORDS = 20


def classify_record(rec: object) -> TraceFormat | None:
    """The format one parsed record belongs to, or None when it is not conclusive."""
    if not isinstance(rec, dict):
        if isinstance(rec, list) and rec and (is_v0_event(rec[0]) or is_v1_event(rec[0])):
            return "openhands"
        return None
    if isinstance(rec.get("traces"), list) and "task" in rec:
        return "verifiers"
    if rec.get("type") in _CLAUDE_TYPES and (
        "uuid" in rec or "sessionId" in rec or rec.get("type") in ("summary", "file-history-snapshot")
    ):
        return "claude-code"
    if is_v1_event(rec) or is_v0_event(rec) or (isinstance(rec.get("history"), list | str) and "instance_id" in rec):
        return "openhands"
    if "messages" in rec or "trajectory" in rec:
        if "traj_id" in rec or ("patch" in rec and "tools" not in rec):
            return "swe-smith"
        return "swe-gym"
    return None


def detect_format(path: Path) -> TraceFormat:
    """Peek at the first records of ``path`` and name its format; :class:`IngestError` when none matches."""
    scratch = IngestReport()
    for n, (_, rec) in enumerate(iter_records(path, scratch)):
        fmt = classify_record(rec)
        if fmt is not None:
            return fmt
        if n + 1 >= _PEEK_RECORDS:
            break
    detail = f"; first malformed line: {scratch.malformed[0]}" if scratch.malformed else ""
    raise IngestError(
        f"{path}: cannot detect the trace format from its first records (pass --format "
        f"claude-code|openhands|swe-smith|swe-gym|verifiers){detail}"
    )


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files named directly, plus ``*.jsonl``/``*.json`` files under named directories (sorted)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(q for q in p.rglob("*") if q.is_file() and q.suffix in (".jsonl", ".json")))
        elif p.is_file():
            out.append(p)
        else:
            raise IngestError(f"{p}: no such file or directory")
    return out


def ingest_file(
    path: Path,
    fmt: FormatChoice,
    report: IngestReport,
    *,
    max_observation_chars: int | None = DEFAULT_MAX_OBSERVATION_CHARS,
) -> Iterator[TraceState]:
    """States of one file. Raises :class:`IngestError` when a non-empty file has no parsable record."""
    if path.stat().st_size == 0:
        report.skip("empty_file")
        return
    resolved: TraceFormat = detect_format(path) if fmt == "auto" else fmt
    report.files += 1
    report.formats[resolved] += 1
    records_before, malformed_before = report.records, report.skipped["malformed_json"]
    for state in INGESTERS[resolved](path, report, max_observation_chars=max_observation_chars):
        report.states += 1
        yield state
    if report.records == records_before:
        bad = report.skipped["malformed_json"] - malformed_before
        first = next((m for m in reversed(report.malformed) if m.startswith(f"{path}:")), "")
        raise IngestError(f"{path}: no parsable {resolved} record ({bad} malformed lines; e.g. {first})")


def ingest(
    paths: Iterable[str | Path],
    fmt: FormatChoice = "auto",
    report: IngestReport | None = None,
    *,
    max_observation_chars: int | None = DEFAULT_MAX_OBSERVATION_CHARS,
) -> Iterator[TraceState]:
    """Stream the states of every file under ``paths``."""
    report = report if report is not None else IngestReport()
    for path in expand_paths(paths):
        yield from ingest_file(path, fmt, report, max_observation_chars=max_observation_chars)


def ingest_to_jsonl(
    paths: Iterable[str | Path],
    out: str | Path,
    fmt: FormatChoice = "auto",
    *,
    max_observation_chars: int | None = DEFAULT_MAX_OBSERVATION_CHARS,
    on_file: Callable[[Path, IngestReport], None] | None = None,
) -> IngestReport:
    """Ingest ``paths`` into ``out`` (JSONL of :class:`TraceState`), atomically; returns the report."""
    out = Path(out)
    files = expand_paths(paths)
    report = IngestReport()
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with tmp.open("w", encoding="utf-8") as f:
            for path in files:
                for state in ingest_file(path, fmt, report, max_observation_chars=max_observation_chars):
                    f.write(state.model_dump_json())
                    f.write("\n")
                if on_file is not None:
                    on_file(path, report)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return report


def read_states(path: str | Path) -> Iterator[TraceState]:
    """Stream :class:`TraceState` rows back from a states JSONL; a bad line raises with ``file:line``."""
    path = Path(path)
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield TraceState.model_validate_json(line)
            except ValueError as e:
                raise IngestError(f"{path}:{line_no}: not a TraceState row: {e}") from e
