"""OpenAI chat-message helpers shared by the ingesters: content flattening, tool-call normalisation, the synthetic
system prompt, and the one place that turns (context, action) into a :class:`TraceState`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from crf_prime.records.family import model_family
from crf_prime.records.models import Action, Source, ToolCall, TraceFormat, TraceState
from crf_prime.traces.records import state_id, truncate_middle

SYNTHETIC_SYSTEM_PROMPT = (
    "You are an autonomous coding agent working in a software repository on the user's behalf. "
    "Use the available tools to inspect files, run commands and tests, and edit code. "
    "Make one step at a time: decide the single next action, call a tool (or answer the user when done), "
    "then read the result before deciding the next step."
)
"""Added as the first message when a trace format records no system prompt (Claude Code never does)."""


def content_text(content: Any) -> str:
    """Flatten OpenAI/Anthropic-style content (a string or a list of text/image blocks) to text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    parts: list[str] = []
    if isinstance(content, list):
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict):
                kind = block.get("type")
                if kind in (None, "text", "input_text", "output_text") and isinstance(block.get("text"), str):
                    parts.append(block["text"])
                elif kind in ("image", "image_url", "input_image"):
                    parts.append("[image]")
    return "\n".join(p for p in parts if p)


def arguments_string(arguments: Any) -> str:
    """Tool-call arguments as the JSON string OpenAI uses (parsed dicts are dumped; strings kept verbatim)."""
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


def tool_call_from_openai(call: dict[str, Any]) -> ToolCall:
    """Accept nested OpenAI (``{"function": {"name", "arguments"}}``) and flat (``{"name", "arguments"}``) calls."""
    fn: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else call
    return ToolCall(
        id=str(call.get("id") or ""), name=str(fn.get("name") or ""), arguments=arguments_string(fn.get("arguments"))
    )


def tool_schema_from_any(tool: dict[str, Any]) -> dict[str, Any]:
    """Normalise a tool declaration (nested OpenAI or flat verifiers/Responses style) to ``{"type": "function",
    "function": {...}}``."""
    if isinstance(tool.get("function"), dict):
        return {"type": "function", "function": dict(tool["function"])}
    fn = {"name": tool.get("name", ""), "description": tool.get("description", "") or ""}
    fn["parameters"] = tool.get("parameters") or tool.get("input_schema") or {"type": "object", "properties": {}}
    return {"type": "function", "function": fn}


_JSON_TYPES = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
)


def _json_type(value: Any) -> str | None:
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), None)


def tool_schemas_from_calls(calls: Iterable[ToolCall]) -> list[dict[str, Any]]:
    """Tool declarations derived from the calls of a trace that records none: per tool name, the argument names
    seen, each typed when all its values share one JSON type. Teachers are then offered the tools the agent used."""
    seen: dict[str, dict[str, set[str | None]]] = {}
    for call in calls:
        props = seen.setdefault(call.name, {})
        try:
            args = json.loads(call.arguments)
        except ValueError:
            continue
        for key, value in args.items() if isinstance(args, dict) else ():
            props.setdefault(key, set()).add(_json_type(value))
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"Tool {name} (schema not recorded in the trace; derived from its calls).",
                "parameters": {
                    "type": "object",
                    "properties": {
                        k: ({"type": next(iter(t))} if len(t) == 1 and None not in t else {})
                        for k, t in sorted(seen[name].items())
                    },
                },
            },
        }
        for name in sorted(seen)
        if name
    ]


def action_from_openai(msg: dict[str, Any]) -> Action:
    """An OpenAI assistant message as an :class:`Action` (``reasoning_content``/``reasoning`` kept as reasoning)."""
    reasoning = msg.get("reasoning_content") or msg.get("reasoning") or ""
    calls = tuple(tool_call_from_openai(c) for c in msg.get("tool_calls") or () if isinstance(c, dict))
    return Action(text=content_text(msg.get("content")), reasoning=str(reasoning or ""), tool_calls=calls)


def tool_message(call_id: str, text: str, *, name: str | None = None, limit: int | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "tool", "tool_call_id": call_id, "content": truncate_middle(text, limit)}
    if name:
        msg["name"] = name
    return msg


def clean_context(messages: Iterable[dict[str, Any]], limit: int | None) -> list[dict[str, Any]]:
    """Teacher-safe copies of context messages: reasoning dropped from assistant turns, text content flattened,
    over-long user/tool observations truncated in the middle."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "assistant":
            out.append(action_from_openai(m).to_message())
        elif role == "tool":
            out.append(
                tool_message(
                    str(m.get("tool_call_id") or ""), content_text(m.get("content")), name=m.get("name"), limit=limit
                )
            )
        elif role in ("system", "user"):
            out.append({"role": role, "content": truncate_middle(content_text(m.get("content")), limit)})
    return out


NO_RESULT = "[no tool result was recorded]"


def _well_paired(messages: Sequence[dict[str, Any]]) -> bool:
    """Fast check (the common case): every tool call answered before the next turn, no stray results."""
    open_ids: set[str] = set()
    for m in messages:
        if m.get("role") == "tool":
            cid = m.get("tool_call_id")
            if cid not in open_ids:
                return False
            open_ids.discard(cid)
            continue
        if open_ids:
            return False
        calls = m.get("tool_calls") if m.get("role") == "assistant" else None
        if calls:
            ids = [str(c.get("id") or "") for c in calls]
            if len(set(ids)) != len(ids):
                return False
            open_ids = set(ids)
    return not open_ids


def repair_tool_pairing(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Make a context valid for chat-completions APIs: every assistant tool call is answered by a tool message
    before the next turn (a placeholder when the trace recorded none, e.g. an interrupted call), and a tool result
    that answers no open call becomes a user message."""
    if _well_paired(messages):
        return list(messages)
    out: list[dict[str, Any]] = []
    pending: list[str] = []

    def close() -> None:
        out.extend({"role": "tool", "tool_call_id": cid, "content": NO_RESULT} for cid in pending)
        pending.clear()

    for m in messages:
        role = m.get("role")
        if role == "tool":
            cid = m.get("tool_call_id")
            if cid in pending:
                pending.remove(cid)
                out.append(m)
            else:
                out.append({"role": "user", "content": f"Tool result:\n{content_text(m.get('content'))}"})
            continue
        close()
        out.append(m)
        if role == "assistant":
            pending.extend(str(c.get("id") or "") for c in m.get("tool_calls") or ())
    close()
    return out


def make_state(
    *,
    fmt: TraceFormat,
    file: str,
    line: int,
    trace_id: str,
    key: str,
    context: Sequence[dict[str, Any]],
    action: Action,
    tools: Sequence[dict[str, Any]] = (),
    model: str = "",
    step: int = 0,
) -> TraceState:
    """Build a state; a synthetic coding-agent system prompt is prepended when the context has none."""
    messages = repair_tool_pairing(context)
    if not messages or messages[0].get("role") != "system":
        messages.insert(0, {"role": "system", "content": SYNTHETIC_SYSTEM_PROMPT})
    return TraceState(
        state_id=state_id(fmt, trace_id or file, key),
        messages=tuple(messages),
        tools=tuple(tools),
        student_action=action,
        source=Source(format=fmt, file=file, line=line, trace_id=trace_id),
        source_model=model,
        model_family=model_family(model),
        step=step,
    )
