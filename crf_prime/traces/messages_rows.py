"""Row-per-trajectory datasets whose trajectory is already a list of chat messages: SWE-smith and SWE-Gym.

SWE-smith (HF ``SWE-bench/SWE-smith-trajectories``, produced by SWE-agent): rows with ``messages`` (a list, or a
JSON string in some mirrors), ``instance_id``, ``resolved``, ``model``, ``traj_id``, ``patch``. In the ``tool``
style assistant turns carry OpenAI ``tool_calls`` but the row declares no tools, so each tool's schema is derived
from its calls (name + the argument names seen); in the ``xml``/``ticks`` styles the action is text inside the
content and is kept as text (the pair builder parses it for comparison, see ``crf_prime.pairs.normalize``).
SWE-Gym (HF ``SWE-Gym/OpenHands-Sampled-Trajectories``): rows with ``messages`` (OpenAI format with
``tool_calls``), ``tools``, ``instance_id``, ``run_id`` (whose prefix is the model), ``resolved``. Also accepted:
the same shape under ``trajectory`` (nebius SWE-rebench-openhands-trajectories).

Rows are streamed one at a time (JSONL or a JSON array); one state per assistant message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crf_prime.records.models import TraceFormat, TraceState
from crf_prime.traces.chat import (
    action_from_openai,
    clean_context,
    make_state,
    tool_schema_from_any,
    tool_schemas_from_calls,
)
from crf_prime.traces.records import IngestReport, iter_records

_ROLES = {"system", "user", "assistant", "tool"}


def row_messages(row: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The row's message list (``messages`` or ``trajectory``, list or JSON string); None when absent."""
    raw = row.get("messages", row.get("trajectory"))
    if isinstance(raw, str):
        raw = json.loads(raw)
    if not isinstance(raw, list):
        return None
    out = []
    for m in raw:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if role == "function":  # legacy OpenAI function-result role
            m = {**m, "role": "tool", "tool_call_id": m.get("tool_call_id") or m.get("name") or ""}
            role = "tool"
        if role in _ROLES:
            out.append(m)
    return out


def _model(fmt: TraceFormat, row: dict[str, Any]) -> str:
    if row.get("model"):
        return str(row["model"])
    run_id = str(row.get("run_id") or "")
    if fmt == "swe-gym" and run_id:
        # e.g. "gpt-4o-2024-08-06_maxiter_30_N_v2.1-no-hint-train-t04-run_1" -> "gpt-4o-2024-08-06"
        return re.split(r"_maxiter|_N_|_run", run_id, maxsplit=1)[0]
    return ""


def _ingest_rows(fmt: TraceFormat, path: Path, report: IngestReport, limit: int | None) -> Iterator[TraceState]:
    for line, row in iter_records(path, report):
        if not isinstance(row, dict):
            report.skip("unknown_record")
            continue
        try:
            messages = row_messages(row)
        except json.JSONDecodeError as e:
            report.malformed_line(path, line, f"messages: {e}")
            continue
        if messages is None:
            report.skip("no_messages")
            continue
        if row.get("traj_id"):
            trace_id = str(row["traj_id"])
        elif row.get("run_id"):
            trace_id = f"{row.get('instance_id', '')}/{row['run_id']}"
        else:
            trace_id = str(row.get("instance_id") or f"{path.stem}:{line}")
        actions = {i: action_from_openai(m) for i, m in enumerate(messages) if m.get("role") == "assistant"}
        tools = [tool_schema_from_any(t) for t in row.get("tools") or () if isinstance(t, dict)]
        if not tools:  # SWE-smith tool-style rows record calls but no declarations
            tools = tool_schemas_from_calls(c for a in actions.values() for c in a.tool_calls)
        model = _model(fmt, row)
        step = 0
        for i, action in actions.items():
            if action.is_empty():
                report.skip("empty_action")
                continue
            yield make_state(
                fmt=fmt,
                file=str(path),
                line=line,
                trace_id=trace_id,
                key=str(i),
                context=clean_context(messages[:i], limit),
                action=action,
                tools=tools,
                model=model,
                step=step,
            )
            step += 1
        if step:
            report.traces += 1


def ingest_swe_smith(
    path: Path, report: IngestReport, *, max_observation_chars: int | None = None
) -> Iterator[TraceState]:
    return _ingest_rows("swe-smith", path, report, max_observation_chars)


def ingest_swe_gym(
    path: Path, report: IngestReport, *, max_observation_chars: int | None = None
) -> Iterator[TraceState]:
    return _ingest_rows("swe-gym", path, report, max_observation_chars)
