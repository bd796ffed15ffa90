"""Error-site detection over an episode's messages.

Works on a verifiers v1 ``Trace`` (``trace.nodes`` in creation order, ``trace.tools``), on a trace record as written
to ``traces.jsonl`` (``Trace.to_record()``), or on a plain list of OpenAI-style message dicts. Tool-result texts are
matched against what the verifiers built-in harness loop writes (``error: unknown tool 'x'``, ``error: invalid JSON in
tool arguments ...``; verifiers/v1/harnesses/utils/core.py) and what shells / pytest / CPython print.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crf_prime.hints.models import ErrorSite

_TRACEBACK = re.compile(r"Traceback \(most recent call last\):")
_EXC_LINE = re.compile(
    r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure)|AssertionError)\b(?::\s*(.*))?$"
)
_FILE_LINE = re.compile(r'^\s*File "([^"]+)", line (\d+)')
_LIBRARY_FRAME = re.compile(r"/lib/python\d[^/]*/|site-packages/|^<frozen ")
_EXIT = re.compile(
    r"(?i)(?:\b(?:exit[ _]code|exit[ _]status|return[ _]?code|returncode)\b\s*[:=]?\s*|\bexited with (?:code |status )?)"
    r"\(?(-?\d+)\)?"
)
_ERROR_PREFIX = re.compile(r"^(?:error|fatal)\b\s*:?", re.IGNORECASE)
_UNKNOWN_TOOL_RESULT = re.compile(r"(?i)\bunknown tool\b\s*'?\"?([\w.-]*)")
_INVALID_JSON_RESULT = re.compile(r"(?i)invalid JSON in tool arguments|tool arguments must be a JSON object")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

MAX_DETAIL = 300
"""Characters of evidence kept per error site."""
MIN_DROPPED_TOKENS = 3
"""Sampled tokens of an empty turn from which it counts as a dropped tool call (more than a stop token and a
newline)."""
DROPPED_CALL = "the tool call could not be parsed (invalid JSON, no tool name or no closing tag) and was dropped"


@dataclass(frozen=True)
class Msg:
    """The fields of one message that detection needs, independent of its source type."""

    role: str
    text: str = ""
    tool_calls: tuple[tuple[str, str, str], ...] = ()  # (id, name, raw arguments)
    tool_call_id: str | None = None
    name: str | None = None
    reasoning: str = ""
    sampled_tokens: int = 0
    """Tokens the model sampled for this message (its node's trainable mask); 0 when unknown or not sampled."""


@dataclass
class ToolSpec:
    """What the episode's prompt declared about one tool."""

    name: str
    parameters: dict[str, Any] = field(default_factory=dict)


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if isinstance(part, Mapping):
            if part.get("type", "text") == "text":
                parts.append(str(part.get("text", "")))
        elif getattr(part, "text", None) is not None:
            parts.append(str(part.text))
    return "\n".join(parts)


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _call_fields(call: Any) -> tuple[str, str, str]:
    function = _get(call, "function")
    if function is not None:  # OpenAI wire shape {"id", "function": {"name", "arguments"}}
        name, arguments = _get(function, "name", ""), _get(function, "arguments", "")
    else:  # verifiers v1 ToolCall(id, name, arguments)
        name, arguments = _get(call, "name", ""), _get(call, "arguments", "")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return str(_get(call, "id", "") or ""), str(name or ""), arguments or ""


def to_msg(message: Any, sampled_tokens: int = 0) -> Msg:
    """Normalise a verifiers message model or an OpenAI-style dict."""
    calls = tuple(_call_fields(c) for c in (_get(message, "tool_calls") or ()))
    return Msg(
        role=str(_get(message, "role", "")),
        text=_text(_get(message, "content")),
        tool_calls=calls,
        tool_call_id=_get(message, "tool_call_id"),
        name=_get(message, "name"),
        reasoning=str(_get(message, "reasoning_content") or ""),
        sampled_tokens=sampled_tokens,
    )


def episode_messages(trace: Any) -> list[Msg]:
    """All messages of an episode in creation order (every graph node once, so compacted-away turns count too)."""
    nodes = _get(trace, "nodes")
    if nodes:
        return [to_msg(_get(node, "message"), sum(map(bool, _get(node, "mask") or ()))) for node in nodes]
    if isinstance(trace, Sequence) and not isinstance(trace, str | bytes):
        return [to_msg(m) for m in trace]
    return [to_msg(m) for m in (_get(trace, "messages") or ())]


def episode_tools(trace: Any) -> dict[str, ToolSpec]:
    """Tools the episode's prompt declared (``trace.tools``, else the root nodes' tools)."""
    if isinstance(trace, Sequence) and not isinstance(trace, str | bytes):
        return {}
    declared = list(_get(trace, "tools") or ())
    for node in _get(trace, "nodes") or ():
        declared.extend(_get(node, "tools") or ())
    specs: dict[str, ToolSpec] = {}
    for tool in declared:
        function = _get(tool, "function")  # OpenAI {"type": "function", "function": {...}}
        src = function if function is not None else tool
        name = _get(src, "name")
        if name:
            specs[str(name)] = ToolSpec(str(name), dict(_get(src, "parameters") or {}))
    return specs


def condense(text: str, limit: int = MAX_DETAIL) -> str:
    """One line, ANSI-free, whitespace-collapsed, cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(_ANSI.sub("", text).split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def traceback_summary(text: str) -> str | None:
    """``"ValueError: bad (at pkg/mod.py:12)"`` for the last traceback in ``text``; None without one."""
    matches = list(_TRACEBACK.finditer(text))
    if not matches:
        return None
    tail = text[matches[-1].end() :].splitlines()
    own, deepest, exc = None, None, None
    for line in tail:
        if m := _FILE_LINE.match(line):
            deepest = f"{m.group(1)}:{m.group(2)}"
            if not _LIBRARY_FRAME.search(m.group(1)):  # prefer the agent's own code over stdlib / site-packages
                own = deepest
        elif m := _EXC_LINE.match(line.strip()):
            exc = line.strip()
            break
    location = own or deepest
    if exc is None:
        exc = next((ln.strip() for ln in reversed(tail) if ln.strip()), "traceback")
    return f"{exc} (at {location})" if location else exc


def exit_code(text: str) -> int | None:
    """The last exit status a tool result reports, if it reports one."""
    codes = _EXIT.findall(text)
    return int(codes[-1]) if codes else None


def _error_line(text: str) -> str:
    lines = [ln.strip() for ln in _ANSI.sub("", text).splitlines() if ln.strip()]
    lines = [ln for ln in lines if not _EXIT.fullmatch(ln.strip("[]() "))]
    for line in lines:
        if _ERROR_PREFIX.match(line):
            return line
    return lines[-1] if lines else ""


def schema_errors(arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """JSON-Schema violations of one call's arguments (jsonschema, which verifiers installs through mcp)."""
    if not schema:
        return []
    try:
        import jsonschema  # optional host (verifiers extra)
    except ImportError:  # pragma: no cover - verifiers depends on it; keep a minimal check otherwise
        missing = [k for k in schema.get("required", ()) if k not in arguments]
        return [f"{k!r} is a required property" for k in missing]
    validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    errors = sorted(validator_cls(schema).iter_errors(dict(arguments)), key=lambda e: list(e.path))
    out = []
    for e in errors:
        where = ".".join(str(p) for p in e.path)
        out.append(f"{where}: {e.message}" if where else e.message)
    return out


def _canonical_args(raw: str) -> str:
    try:
        return json.dumps(json.loads(raw), sort_keys=True)
    except (json.JSONDecodeError, TypeError):
        return raw.strip()


def detect_error_sites(
    messages: Sequence[Msg], tools: Mapping[str, ToolSpec] | None = None, *, repeat_threshold: int = 2
) -> list[ErrorSite]:
    """Every error site in the episode, in message order; ``tools`` None means "tool set unknown"."""
    sites: list[ErrorSite] = []
    calls: dict[str, tuple[int, str, str]] = {}  # tool_call_id -> (message index, name, raw arguments)
    flagged_calls: set[str] = set()
    failures: Counter[tuple[str, str]] = Counter()
    first_failure: dict[tuple[str, str], tuple[int, str, str]] = {}

    for i, msg in enumerate(messages):
        if msg.role == "assistant":
            if _dropped_call(msg):
                sites.append(ErrorSite(kind="invalid_json", index=i, detail=DROPPED_CALL))
            for call_id, name, raw in msg.tool_calls:
                calls[call_id] = (i, name, raw)
                flagged_calls.discard(call_id)  # ids repeat across turns (verifiers' renderer client: call_0, ...)
                site = _check_call(i, name, raw, tools)
                if site is not None:
                    sites.append(site)
                    flagged_calls.add(call_id)
        elif msg.role == "tool":
            _, name, raw = calls.get(msg.tool_call_id or "", (i, msg.name or "", ""))
            name = name or msg.name or ""
            text = msg.text
            if msg.tool_call_id not in flagged_calls:
                if m := _UNKNOWN_TOOL_RESULT.search(text):
                    sites.append(ErrorSite(kind="unknown_tool", index=i, tool=m.group(1) or name, arguments=raw))
                    continue
                if _INVALID_JSON_RESULT.search(text):
                    sites.append(
                        ErrorSite(
                            kind="invalid_json", index=i, tool=name, detail=condense(_error_line(text)), arguments=raw
                        )
                    )
                    continue
            # A flagged call's result only echoes the call's own error; otherwise look at what the tool reported.
            failed = msg.tool_call_id in flagged_calls
            if not failed and (site := _check_result(i, name, text)) is not None:
                sites.append(site)
                failed = True
            if failed:
                key = (name, _canonical_args(raw))
                failures[key] += 1
                first_failure.setdefault(key, (i, name, raw))

    for key, count in failures.items():
        if count >= repeat_threshold:
            i, name, raw = first_failure[key]
            sites.append(
                ErrorSite(kind="repeated_failure", index=i, tool=name, arguments=condense(raw, 160), count=count)
            )
    return sites


def _dropped_call(msg: Msg) -> bool:
    """A sampled turn that left no text, no reasoning and no tool call: its tokens were a tool call the client could
    not parse and dropped (verifiers' renderer client keeps only parsed calls, ``v1/clients/train.py``)."""
    empty = not (msg.text.strip() or msg.reasoning.strip() or msg.tool_calls)
    return empty and msg.sampled_tokens >= MIN_DROPPED_TOKENS


def _check_result(index: int, name: str, text: str) -> ErrorSite | None:
    if (tb := traceback_summary(text)) is not None:
        return ErrorSite(kind="traceback", index=index, tool=name, detail=condense(tb))
    code = exit_code(text)
    if (code is not None and code != 0) or _ERROR_PREFIX.match(text.strip()):
        detail = _error_line(text)
        if code not in (None, 0):
            detail = f"exit code {code}, {detail}" if detail else f"exit code {code}"
        return ErrorSite(kind="tool_error", index=index, tool=name, detail=condense(detail))
    return None


def _check_call(index: int, name: str, raw: str, tools: Mapping[str, ToolSpec] | None) -> ErrorSite | None:
    if tools is not None and name not in tools:
        return ErrorSite(kind="unknown_tool", index=index, tool=name, arguments=condense(raw, 160))
    try:
        args = json.loads(raw or "{}")
    except json.JSONDecodeError as e:
        return ErrorSite(kind="invalid_json", index=index, tool=name, detail=str(e), arguments=condense(raw, 160))
    if not isinstance(args, dict):
        return ErrorSite(
            kind="invalid_json",
            index=index,
            tool=name,
            detail=f"arguments must be a JSON object, got {type(args).__name__}",
            arguments=condense(raw, 160),
        )
    spec = tools.get(name) if tools else None
    if spec is not None and (errors := schema_errors(args, spec.parameters)):
        return ErrorSite(kind="schema_violation", index=index, tool=name, detail=condense("; ".join(errors)))
    return None


def tool_specs(names: Iterable[str], declared: Mapping[str, ToolSpec]) -> dict[str, ToolSpec]:
    """The tool set to check against: ``names`` (an override) with schemas from ``declared`` where known."""
    return {n: declared.get(n, ToolSpec(n)) for n in names}
