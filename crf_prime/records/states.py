"""The one reader of a states file (``crf-prime traces ingest`` output): :class:`TraceState` rows, streamed.

The teacher pool, the pair builder and the trace_replay environment all read states through :func:`read_states`,
so a bad file fails the same way everywhere: :class:`StatesFileError` (bad input, exit 2) naming ``file:line``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from crf_prime.errors import InputError
from crf_prime.records.models import TraceState


class StatesFileError(InputError):
    """A states file is missing, not a file, or has a line that is not a TraceState row."""


def read_states(path: str | Path) -> Iterator[TraceState]:
    """Stream :class:`TraceState` rows from a JSONL file (constant memory); bad lines raise with ``file:line``."""
    path = Path(path)
    if not path.is_file():
        raise StatesFileError.at(path, None, "states file not found" if not path.exists() else "not a file")
    with path.open("rb") as f:
        for i, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                yield TraceState.model_validate_json(raw)
            except ValidationError as e:
                first = e.errors()[0]
                where = ".".join(str(x) for x in first["loc"]) or "(row)"
                raise StatesFileError.at(path, i, f"not a TraceState row: {where}: {first['msg']}") from None


def count_states(path: str | Path) -> int:
    """Validate the whole file before anything is paid for; returns its number of states (0 for an empty file)."""
    return sum(1 for _ in read_states(path))
