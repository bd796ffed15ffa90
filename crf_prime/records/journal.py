"""Replay journal rows: the outcome of one teacher call at one state, and the reader that streams them back.

The journal is written by the teacher pool (``crf_prime.teachers.journal``) and read by the pair builder and the
trace_replay environment; the row and its reader live here so that neither reader imports the pool.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from crf_prime.errors import InputError
from crf_prime.records.models import Action

Key = tuple[str, str]
"""(state_id, teacher name)."""


class JournalRecord(BaseModel):
    """The outcome of one teacher call at one state (also the plain result record a teacher client returns)."""

    model_config = ConfigDict(frozen=True)

    state_id: str
    teacher: str
    """Teacher name from the config."""
    model: str
    model_family: str
    ok: bool
    """True when the teacher returned an action."""
    action: Action | None
    """The teacher's proposed next action (None when the call failed)."""
    error: str = ""
    """Human-readable error of a failed call."""
    input_tokens: int
    output_tokens: int
    cost_usd: float
    """``usage.cost`` when the API reports it, else tokens x the config's price table; 0 when unknown."""
    latency_s: float
    """Wall time of the call in seconds, retries included."""
    attempt: int
    """HTTP attempts made (1 = no retry)."""
    ts: float
    """Unix time the call finished."""
    error_type: str = ""
    """Error class: rate_limit, server_error, timeout, connection, provider_error, malformed, http_4xx, lost, ..."""
    status: int | None = None
    """Last HTTP status seen, when there was one."""
    trace_id: str = ""
    """Trace the state belongs to (per-trace budget on resume)."""
    cost_source: str = ""
    """"usage" (API reported cost), "prices" (price table), "reservation" (cost unknown, possibly paid: booked at
    the call's worst case), "" (nothing was sent that could be billed)."""
    question: str = ""
    """Content hash of the request (model, messages, tools, sampling): one paid answer per question."""
    reserved_usd: float = 0.0
    """Worst-case cost reserved against the caps before the call was sent."""
    possibly_paid: bool = False
    """The request reached the provider but its cost is unknown (timeout, cut or unreadable response, crash): booked
    at ``reserved_usd``, and re-sent only with ``--pool.resend-lost``."""
    shared_from: str = ""
    """Not a call: the answer to the same question asked at this state (``cost_usd`` 0)."""
    generation_id: str = ""
    """The provider's id of the generation (OpenRouter ``gen-...``), when the answer carried one: how a call whose
    cost is unknown is looked up later."""

    @property
    def key(self) -> Key:
        return (self.state_id, self.teacher)


class JournalError(InputError):
    """A journal line other than a torn last line is not a valid record."""


def read_rows(path: Path, model: type[BaseModel]) -> Iterator[Any]:
    """Rows of an append-only JSONL log (none when it does not exist yet); a bad line raises with ``file:line``."""
    if not path.exists():
        return
    with path.open("rb") as f:
        lines = f.readlines()
    for i, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        last = i == len(lines)
        try:
            yield model.model_validate_json(raw)
        except (ValidationError, ValueError) as e:
            if last and not raw.endswith(b"\n"):
                return  # torn write of a killed process: the call is treated as not done
            raise JournalError(f"{path}:{i}: not a valid {model.__name__} row: {e}") from None


def read_journal(path: str | Path) -> Iterator[JournalRecord]:
    """All records of a journal in write order; a torn last line (kill -9 mid-write) is ignored."""
    yield from read_rows(Path(path), JournalRecord)
