"""OpenHands trajectories (V0 events and V1 SDK events) to trace states.

V0 (All-Hands-AI/OpenHands ``openhands/events/serialization/event.py``): events with ``id``, ``source``,
``action`` + ``args`` or ``observation`` + ``content``/``extras``, ``cause``, and for function-calling agents
``tool_call_metadata = {function_name, tool_call_id, model_response, total_calls_in_response}``; the exact
assistant message (parallel calls included) is recovered from ``model_response.choices[0].message``.
V1 (OpenHands/software-agent-sdk ``openhands/sdk/event/``): events discriminated by ``kind``:
``SystemPromptEvent`` (system prompt + tools), ``MessageEvent`` (``llm_message``), ``ActionEvent`` (``thought``,
``reasoning_content``, ``thinking_blocks``, ``tool_call``, ``llm_response_id`` grouping parallel calls),
``ObservationEvent``/``UserRejectObservation``/``AgentErrorEvent`` (tool results), condenser/state events.

Accepted files: a JSON array of events (one trajectory), JSONL of events (one trajectory), or JSONL/array of
evaluation rows with ``history`` (``output.jsonl``: one trajectory per row, ``instance_id`` as trace id). Events
are consumed one at a time; memory is bounded by one trajectory's context.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from crf_prime.records.models import Action, ToolCall, TraceState
from crf_prime.traces.chat import (
    action_from_openai,
    arguments_string,
    content_text,
    make_state,
    tool_call_from_openai,
    tool_message,
    tool_schema_from_any,
)
from crf_prime.traces.records import IngestReport, iter_records

# V0 actions without tool_call_metadata (non-function-calling agents): the equivalent CodeAct tool call
_V0_ACTION_TOOLS: dict[str, tuple[str, tuple[str, ...]]] = {
    "run": ("execute_bash", ("command",)),
    "run_ipython": ("execute_ipython_cell", ("code",)),
    "read": ("str_replace_editor", ("command", "path", "view_range")),
    "edit": ("str_replace_editor", ("command", "path", "old_str", "new_str", "file_text", "insert_line")),
    "write": ("str_replace_editor", ("path", "content")),
    "browse": ("browser", ("url",)),
    "browse_interactive": ("browser", ("browser_actions",)),
    "think": ("think", ("thought",)),
    "finish": ("finish", ("final_thought", "message")),
}
_V0_SKIP_ACTIONS = {"change_agent_state", "recall", "condensation", "null", "delegate", "reject", "push"}
_V0_SKIP_OBS = {"agent_state_changed", "null", "recall", "condense", "user_rejected"}
_V1_SKIP_KINDS = {
    "ConversationStateUpdateEvent",
    "Condensation",
    "CondensationRequest",
    "PauseEvent",
    "StreamingDeltaEvent",
}


def is_v1_event(rec: Any) -> bool:
    return (
        isinstance(rec, dict)
        and isinstance(rec.get("kind"), str)
        and rec["kind"].endswith(("Event", "Observation", "Condensation", "CondensationRequest"))
    )


def is_v0_event(rec: Any) -> bool:
    return isinstance(rec, dict) and ("action" in rec or "observation" in rec) and ("source" in rec or "id" in rec)


class _Builder:
    """Assembles one trajectory's chat context and emits one state per assistant turn."""

    def __init__(self, path: Path, trace_id: str, report: IngestReport, limit: int | None, model: str = "") -> None:
        self.path, self.trace_id, self.report, self.limit = path, trace_id, report, limit
        self.context: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []
        self.model = model
        self.step = 0
        self.pending: tuple[str, int, str, Action, str] | None = None  # (group id, line, key, action, model)
        self.last_group: str | None = None
        self.call_ids: dict[Any, str] = {}  # V0 event id -> synthesized call id (non-function-calling agents)

    def open_turn(self, group: str, line: int, key: str, action: Action, model: str = "") -> Iterator[TraceState]:
        yield from self.flush()
        self.model = model or self.model  # sticky: V1 records the model only on some events
        self.pending = (group, line, key, action, model or self.model)
        self.last_group = group

    def extend_turn(self, call: ToolCall) -> None:
        assert self.pending is not None
        g, line, key, action, model = self.pending
        self.pending = (g, line, key, action.model_copy(update={"tool_calls": (*action.tool_calls, call)}), model)

    def flush(self) -> Iterator[TraceState]:
        if self.pending is None:
            return
        _, line, key, action, model = self.pending
        self.pending = None
        if action.is_empty():
            self.report.skip("empty_action")
            return
        yield make_state(
            fmt="openhands",
            file=str(self.path),
            line=line,
            trace_id=self.trace_id,
            key=key,
            context=self.context,
            action=action,
            tools=self.tools,
            model=model,
            step=self.step,
        )
        self.step += 1
        self.context.append(action.to_message())

    def add(self, msg: dict[str, Any]) -> Iterator[TraceState]:
        yield from self.flush()
        self.context.append(msg)

    # ---- V0
    def v0(self, line: int, ev: dict[str, Any]) -> Iterator[TraceState]:
        source = ev.get("source")
        meta: dict[str, Any] | None = (
            ev["tool_call_metadata"] if isinstance(ev.get("tool_call_metadata"), dict) else None
        )
        if "action" in ev:
            kind = ev.get("action")
            args: dict[str, Any] = ev["args"] if isinstance(ev.get("args"), dict) else {}
            if kind == "system":
                self.tools = [tool_schema_from_any(t) for t in args.get("tools") or () if isinstance(t, dict)]
                yield from self.add({"role": "system", "content": content_text(args.get("content"))})
                return
            if kind in _V0_SKIP_ACTIONS:
                self.report.skip("non_llm_event")
                return
            if source == "user":
                if kind == "message":
                    yield from self.add({"role": "user", "content": content_text(args.get("content"))})
                else:
                    self.report.skip("non_llm_event")
                return
            if meta and isinstance(meta.get("model_response"), dict):
                resp = meta["model_response"]
                group = str(resp.get("id") or meta.get("tool_call_id"))
                if self.pending is not None and group == self.last_group:
                    return  # another call of the same response: already taken from model_response
                if group == self.last_group:
                    self.report.skip("late_parallel_call")
                    return
                choices = resp.get("choices") or [{}]
                message = choices[0].get("message") or {}
                yield from self.open_turn(
                    group, line, str(ev.get("id", line)), action_from_openai(message), str(resp.get("model") or "")
                )
                return
            # no metadata: reconstruct the action
            thought = str(args.get("thought") or "")
            if kind == "message":
                yield from self.open_turn(
                    f"ev{ev.get('id', line)}",
                    line,
                    str(ev.get("id", line)),
                    Action(text=content_text(args.get("content"))),
                )
                return
            name, keys = _V0_ACTION_TOOLS.get(str(kind), (str(kind), tuple(args)))
            call_args = {k: args[k] for k in keys if k in args and args[k] not in (None, "")}
            call_id = f"call_{ev.get('id', line)}"
            self.call_ids[ev.get("id")] = call_id
            call = ToolCall(id=call_id, name=name, arguments=json.dumps(call_args, ensure_ascii=False))
            yield from self.open_turn(call_id, line, str(ev.get("id", line)), Action(text=thought, tool_calls=(call,)))
            return
        kind = ev.get("observation")
        if kind in _V0_SKIP_OBS:
            self.report.skip("non_llm_event")
            return
        text = content_text(ev.get("content"))
        if kind == "error" or (isinstance(ev.get("success"), bool) and not ev["success"]):
            text = f"[tool error]\n{text}"
        if meta and meta.get("tool_call_id"):
            yield from self.add(
                tool_message(str(meta["tool_call_id"]), text, name=meta.get("function_name"), limit=self.limit)
            )
        elif ev.get("cause") in self.call_ids:
            yield from self.add(tool_message(self.call_ids[ev["cause"]], text, limit=self.limit))
        elif kind == "user_message" or source == "user":
            yield from self.add({"role": "user", "content": text})
        else:
            yield from self.add({"role": "user", "content": f"OBSERVATION:\n{text}"})

    # ---- V1
    def v1(self, line: int, ev: dict[str, Any]) -> Iterator[TraceState]:
        kind = ev.get("kind")
        if kind == "SystemPromptEvent":
            self.tools = [tool_schema_from_any(t) for t in ev.get("tools") or () if isinstance(t, dict)]
            yield from self.add({"role": "system", "content": content_text(ev.get("system_prompt"))})
        elif kind == "MessageEvent":
            msg = ev.get("llm_message") or {}
            text = "\n".join(
                t for t in (content_text(msg.get("content")), content_text(ev.get("extended_content"))) if t
            )
            if ev.get("source") == "agent" or msg.get("role") == "assistant":
                action = Action(text=text, reasoning=str(msg.get("reasoning_content") or ""))
                yield from self.open_turn(f"msg{ev.get('id', line)}", line, str(ev.get("id", line)), action)
            else:
                yield from self.add({"role": "user", "content": text})
        elif kind == "ActionEvent":
            raw = ev.get("tool_call") or {}
            call = (
                tool_call_from_openai(raw)
                if raw
                else ToolCall(
                    id=str(ev.get("tool_call_id") or ""),
                    name=str(ev.get("tool_name") or ""),
                    arguments=arguments_string(ev.get("action")),
                )
            )
            group = str(ev.get("llm_response_id") or ev.get("id", line))
            model = str((ev.get("metrics") or {}).get("model_name") or "")
            if self.pending is not None and group == self.last_group:
                self.extend_turn(call)
                return
            if group == self.last_group:
                # a parallel call whose sibling's result already arrived: attach it to the context turn
                self.context_call(call)
                return
            reasoning = str(ev.get("reasoning_content") or "") or "\n".join(
                str(b.get("thinking") or "") for b in ev.get("thinking_blocks") or () if isinstance(b, dict)
            )
            action = Action(text=content_text(ev.get("thought")), reasoning=reasoning, tool_calls=(call,))
            yield from self.open_turn(group, line, str(ev.get("id", line)), action, model)
        elif kind in ("ObservationEvent", "UserRejectObservation", "AgentErrorEvent"):
            if kind == "ObservationEvent":
                obs = ev.get("observation") or {}
                text = (
                    content_text(obs.get("content"))
                    or content_text(obs.get("output"))
                    or json.dumps({k: v for k, v in obs.items() if k != "kind"}, ensure_ascii=False)
                )
                if obs.get("is_error") or obs.get("error"):
                    text = f"[tool error]\n{text}"
            elif kind == "UserRejectObservation":
                text = f"Action rejected: {ev.get('rejection_reason') or 'User rejected the action'}"
            else:
                text = f"[tool error]\n{ev.get('error', '')}"
            if ev.get("tool_call_id"):
                yield from self.add(
                    tool_message(str(ev["tool_call_id"]), text, name=ev.get("tool_name"), limit=self.limit)
                )
            else:
                yield from self.add({"role": "user", "content": text})
        elif kind == "CondensationSummaryEvent":
            yield from self.add({"role": "user", "content": str(ev.get("summary") or "")})
        else:
            self.report.skip("non_llm_event")

    def context_call(self, call: ToolCall) -> None:
        for msg in reversed(self.context):
            if msg.get("role") == "assistant":
                msg.setdefault("tool_calls", []).append(
                    {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
                )
                self.report.skip("late_parallel_call")
                return

    def feed(self, line: int, ev: Any) -> Iterator[TraceState]:
        if is_v1_event(ev):
            yield from self.v1(line, ev)
        elif is_v0_event(ev):
            yield from self.v0(line, ev)
        else:
            self.report.skip("unknown_record")

    def finish(self) -> Iterator[TraceState]:
        yield from self.flush()
        if self.step:
            self.report.traces += 1


def _model_of_row(row: dict[str, Any]) -> str:
    meta: dict[str, Any] = row["metadata"] if isinstance(row.get("metadata"), dict) else {}
    llm: dict[str, Any] = meta["llm_config"] if isinstance(meta.get("llm_config"), dict) else {}
    return str(row.get("model") or llm.get("model") or "")


def _events(history: Any) -> Iterable[Any]:
    if isinstance(history, str):
        history = json.loads(history)
    return history if isinstance(history, list) else ()


def ingest_openhands(
    path: Path, report: IngestReport, *, max_observation_chars: int | None = None
) -> Iterator[TraceState]:
    builder: _Builder | None = None
    for line, rec in iter_records(path, report):
        if isinstance(rec, dict) and "history" in rec:
            # evaluation row: one trajectory
            if builder is not None:
                yield from builder.finish()
                builder = None
            trace_id = str(rec.get("instance_id") or f"{path.stem}:{line}")
            row_builder = _Builder(path, trace_id, report, max_observation_chars, _model_of_row(rec))
            try:
                events = list(_events(rec["history"]))
            except json.JSONDecodeError as e:
                report.malformed_line(path, line, f"history: {e}")
                continue
            for ev in events:
                yield from row_builder.feed(line, ev)
            yield from row_builder.finish()
            continue
        if builder is None:
            builder = _Builder(path, path.stem, report, max_observation_chars)
        yield from builder.feed(line, rec)
    if builder is not None:
        yield from builder.finish()
