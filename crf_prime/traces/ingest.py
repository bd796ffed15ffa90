"""Format auto-detection and the ingest driver: paths in, :class:`TraceState` rows out (streamed), with a report.

``ingest_to_jsonl`` writes to a temporary file next to ``out`` and renames it on success, so a failed run leaves
nothing half-written.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, Literal, get_args

from crf_prime.records.models import TraceFormat, TraceState
from crf_prime.traces.claude_code import ingest_claude_code
from crf_prime.traces.messages_rows import ingest_swe_gym, ingest_swe_smith
from crf_prime.traces.openhands import ingest_openhands, is_v0_event, is_v1_event
from crf_prime.traces.records import IngestError, IngestReport, NothingIngested, iter_records
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

OUTPUT_FILE_MODE = 0o644
"""Mode of the written states file, whatever the umask: other users (a trainer, a teacher pool) read it."""
OUTPUT_DIR_MODE = 0o755


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


@dataclass(frozen=True)
class FormatSpec:
    """The format each input file is read as: the first ``GLOB=FORMAT`` rule whose glob matches the file, else the
    default. Lets one run ingest a mixed directory (e.g. ``runs/*.json=openhands`` beside auto-detected files)."""

    default: FormatChoice = "auto"
    rules: tuple[tuple[str, FormatChoice], ...] = ()

    @classmethod
    def parse(cls, values: Iterable[str]) -> FormatSpec:
        """From ``--format`` values: ``FORMAT`` (at most one, the default) or ``GLOB=FORMAT`` (any number)."""
        default: FormatChoice | None = None
        rules: list[tuple[str, FormatChoice]] = []
        for value in values:
            glob, sep, name = value.rpartition("=")
            fmt = format_choice(name)
            if not sep:
                if default is not None:
                    raise ValueError(
                        f"--format {value}: a default format was already given ({default}); use GLOB=FORMAT"
                    )
                default = fmt
            elif not glob:
                raise ValueError(f"--format {value}: empty glob before '='")
            else:
                rules.append((glob, fmt))
        return cls(default or "auto", tuple(rules))

    def for_path(self, path: Path) -> FormatChoice:
        for glob, fmt in self.rules:
            if path.match(glob) or fnmatch(str(path), glob) or fnmatch(str(path.absolute()), glob):
                return fmt
        return self.default


def format_choice(name: str) -> FormatChoice:
    """``name`` checked against the known formats; ValueError naming them otherwise."""
    choices = get_args(FormatChoice)
    if name not in choices:
        raise ValueError(f"unknown trace format {name!r} (choose from {', '.join(choices)})")
    return name  # type: ignore[return-value]  # name is in choices, the Literal's own values (checked above)


def _spec(fmt: FormatChoice | FormatSpec) -> FormatSpec:
    return fmt if isinstance(fmt, FormatSpec) else FormatSpec(format_choice(fmt))


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
    max_context_chars: int | None = None,
) -> Iterator[TraceState]:
    """States of one file. With ``fmt="auto"`` a file of no known format is skipped and counted
    (``undetected_file``, reason in ``report.unread``); a file forced to a format raises :class:`IngestError` when it
    has no parsable record of that format."""
    if path.stat().st_size == 0:
        report.skip("empty_file")
        report.unread.append(f"{path}: empty file")
        return
    if fmt == "auto":
        try:
            resolved: TraceFormat = detect_format(path)
        except IngestError as e:
            report.skip("undetected_file")
            report.unread.append(str(e))
            return
    else:
        resolved = fmt
    report.files += 1
    report.formats[resolved] += 1
    records_before, malformed_before = report.records, report.skipped["malformed_json"]
    for state in INGESTERS[resolved](path, report, max_observation_chars=max_observation_chars):
        if max_context_chars is not None and context_chars(state.messages) > max_context_chars:
            state = state.model_copy(update={"messages": tuple(cap_context(state.messages, max_context_chars))})
            report.capped += 1
        report.states += 1
        yield state
    if report.records == records_before:
        bad = report.skipped["malformed_json"] - malformed_before
        first = next((m for m in reversed(report.malformed) if m.startswith(f"{path}:")), "")
        raise IngestError(f"{path}: no parsable {resolved} record ({bad} malformed lines; e.g. {first})")


def nothing_read(files: list[Path], report: IngestReport) -> NothingIngested:
    """The error of a run where no input file could be read as a trace."""
    if not files:
        return NothingIngested("nothing to ingest: no *.jsonl / *.json file under the given paths")
    reasons = "; ".join(report.unread[:5]) + ("; ..." if len(report.unread) > 5 else "")
    return NothingIngested(f"nothing could be ingested from {len(files)} file(s): {reasons}")


def ingest(
    paths: Iterable[str | Path],
    fmt: FormatChoice | FormatSpec = "auto",
    report: IngestReport | None = None,
    *,
    max_observation_chars: int | None = DEFAULT_MAX_OBSERVATION_CHARS,
    max_context_chars: int | None = None,
) -> Iterator[TraceState]:
    """Stream the states of every file under ``paths``; :class:`IngestError` when no file could be read."""
    report = report if report is not None else IngestReport()
    spec = _spec(fmt)
    files = expand_paths(paths)
    files_before = report.files
    for path in files:
        yield from ingest_file(
            path,
            spec.for_path(path),
            report,
            max_observation_chars=max_observation_chars,
            max_context_chars=max_context_chars,
        )
    if report.files == files_before:
        raise nothing_read(files, report)


def ingest_to_jsonl(
    paths: Iterable[str | Path],
    out: str | Path,
    fmt: FormatChoice | FormatSpec = "auto",
    *,
    max_observation_chars: int | None = DEFAULT_MAX_OBSERVATION_CHARS,
    max_context_chars: int | None = None,
    on_file: Callable[[Path, IngestReport], None] | None = None,
    report: IngestReport | None = None,
) -> IngestReport:
    """Ingest ``paths`` into ``out`` (JSONL of :class:`TraceState`), atomically; returns the report.
    :class:`IngestError` (and no output) when no file could be read."""
    out = Path(out)
    spec = _spec(fmt)
    files = expand_paths(paths)
    report = report if report is not None else IngestReport()
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    created = make_dirs(out.parent)
    done = False
    try:
        with tmp.open("w", encoding="utf-8") as f:  # os.replace below is the commit point
            for path in files:
                for state in ingest_file(
                    path,
                    spec.for_path(path),
                    report,
                    max_observation_chars=max_observation_chars,
                    max_context_chars=max_context_chars,
                ):
                    f.write(state.model_dump_json())
                    f.write("\n")
                if on_file is not None:
                    on_file(path, report)
        if report.files == 0:
            raise nothing_read(files, report)
        os.chmod(tmp, OUTPUT_FILE_MODE)
        os.replace(tmp, out)
        done = True
    finally:
        tmp.unlink(missing_ok=True)
        if not done:
            for d in created:  # deepest first; a failed run leaves no empty output directory behind
                with contextlib.suppress(OSError):
                    d.rmdir()
    return report


def make_dirs(path: Path) -> list[Path]:
    """``mkdir -p`` with :data:`OUTPUT_DIR_MODE` whatever the umask; returns the directories it created, deepest
    first."""
    created = [d for d in (path, *path.parents) if not d.exists()]
    path.mkdir(parents=True, exist_ok=True)
    for d in reversed(created):
        os.chmod(d, OUTPUT_DIR_MODE)
    return created


_MESSAGE_OVERHEAD = 40
"""JSON punctuation and keys of one serialised message, roughly (``{"role": "tool", "content": ...}``)."""


def message_chars(message: dict[str, Any]) -> int:
    """Approximate serialised size of one chat message: its text and tool-call arguments plus fixed overhead."""
    n = _MESSAGE_OVERHEAD + len(str(message.get("content") or ""))
    for call in message.get("tool_calls") or ():
        n += _MESSAGE_OVERHEAD + len(str(call.get("function", {}).get("arguments", "")))
    return n


def context_chars(messages: Iterable[dict[str, Any]]) -> int:
    return sum(map(message_chars, messages))


def cap_context(messages: tuple[dict[str, Any], ...], limit: int) -> list[dict[str, Any]]:
    """The context cut to about ``limit`` characters: the system prompt and the first user message (the task) are
    kept, then the most recent messages that fit, after a note saying how many were dropped. The kept tail never
    starts with a tool result, so every result still follows its call."""
    head = next((i + 1 for i, m in enumerate(messages) if m.get("role") == "user"), min(1, len(messages)))
    budget = limit - context_chars(messages[:head])
    start = len(messages)
    while start > head and message_chars(messages[start - 1]) <= budget:
        budget -= message_chars(messages[start - 1])
        start -= 1
    while start < len(messages) and messages[start].get("role") == "tool":
        start += 1
    note = {"role": "user", "content": f"[{start - head} earlier messages omitted: context capped at {limit} chars]"}
    return [*messages[:head], note, *messages[start:]]


def state_chars(state: TraceState) -> int:
    """Approximate JSONL size of one state without serialising it (the sizing pass runs before anything is written)."""
    tools = sum(len(json.dumps(t)) for t in state.tools)
    action = state.student_action
    return 400 + tools + context_chars(state.messages) + message_chars(action.to_message()) + len(action.reasoning)


def estimate_output(
    paths: Iterable[str | Path],
    fmt: FormatChoice | FormatSpec = "auto",
    *,
    max_observation_chars: int | None = DEFAULT_MAX_OBSERVATION_CHARS,
    max_context_chars: int | None = None,
    report: IngestReport | None = None,
) -> tuple[int, int]:
    """(states, approximate characters) that :func:`ingest_to_jsonl` would write, from a pass that writes nothing.
    Recorded contexts repeat at every state, so the output can be many times its input; this is printed first."""
    states = chars = 0
    for state in ingest(
        paths,
        fmt,
        report,
        max_observation_chars=max_observation_chars,
        max_context_chars=max_context_chars,
    ):
        states += 1
        chars += state_chars(state)
    return states, chars
