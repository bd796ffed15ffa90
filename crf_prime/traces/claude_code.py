"""Claude Code session JSONL (``~/.claude/projects/<cwd>/<sessionId>.jsonl``) to trace states.

Format (Anthropic publishes no schema; this is what Claude Code writes): one JSON record per line, linked by
``uuid``/``parentUuid`` into a DAG. One API reply is often written as several ``assistant`` lines (one content
block each) sharing ``message.id``; tool results come back as ``user`` lines with ``tool_result`` blocks
(``is_error``); sub-agent records carry ``isSidechain``; ``isMeta`` lines are injected notices; ``/compact`` starts a
new root (``system``/``compact_boundary``) followed by an ``isCompactSummary`` user record; ``summary`` and
``file-history-snapshot`` lines are bookkeeping.

Streaming with a bounded memory: pass 1 reads the file line by line and keeps, per record, only its uuid, parent
uuid and byte offset (~150 bytes/record); each session's main branch is the parent chain of that session's last
main-chain record (later forks win, abandoned branches are counted, not ingested). A file may hold many sessions
(session files concatenated); records carry ``sessionId`` and each session becomes its own trace. Pass 2 seeks to
each session's main-branch records only and builds its conversation. Peak memory = the id map + one context (the messages of the last state), independent of
sidechains, snapshots and abandoned branches. A compact boundary is spliced to its ``logicalParentUuid`` so the
turns before ``/compact`` are ingested too, and the context is reset there: after ``/compact`` the model saw the
summary, not the older turns.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from crf_prime.records.models import Action, ToolCall, TraceState
from crf_prime.traces.chat import content_text, make_state, tool_message
from crf_prime.traces.records import IngestReport, iter_jsonl_offsets

_CONVERSATIONAL = {"user", "assistant", "system"}


class _Compact:
    """Marker type of :data:`_COMPACT`."""


_COMPACT = _Compact()  # marker: context reset at a compact boundary

# Parameter schemas of Claude Code's built-in tools (names as they appear in tool_use blocks); the file records no
# tool declarations, so teachers are offered these for the tool names the session used.
_TOOLS: dict[str, tuple[str, dict[str, str], tuple[str, ...]]] = {
    "Bash": ("Run a shell command.", {"command": "string", "description": "string", "timeout": "number"}, ("command",)),
    "Read": ("Read a file.", {"file_path": "string", "offset": "number", "limit": "number"}, ("file_path",)),
    "Write": ("Write a file.", {"file_path": "string", "content": "string"}, ("file_path", "content")),
    "Edit": (
        "Replace a string in a file.",
        {"file_path": "string", "old_string": "string", "new_string": "string", "replace_all": "boolean"},
        ("file_path", "old_string", "new_string"),
    ),
    "MultiEdit": (
        "Apply several edits to one file.",
        {"file_path": "string", "edits": "array"},
        ("file_path", "edits"),
    ),
    "Grep": (
        "Search file contents with a regex.",
        {"pattern": "string", "path": "string", "glob": "string"},
        ("pattern",),
    ),
    "Glob": ("Find files by glob pattern.", {"pattern": "string", "path": "string"}, ("pattern",)),
    "LS": ("List a directory.", {"path": "string"}, ("path",)),
    "TodoWrite": ("Update the task list.", {"todos": "array"}, ("todos",)),
    "Task": ("Delegate a task to a sub-agent.", {"description": "string", "prompt": "string"}, ("prompt",)),
    "WebFetch": ("Fetch a URL.", {"url": "string", "prompt": "string"}, ("url",)),
}


def tool_schemas(names_and_keys: dict[str, set[str]]) -> list[dict[str, Any]]:
    """OpenAI tool declarations for the tool names used in a session (known schema, else the argument keys seen)."""
    out = []
    for name in sorted(names_and_keys):
        if name in _TOOLS:
            desc, props, required = _TOOLS[name]
            params = {
                "type": "object",
                "properties": {k: {"type": t} for k, t in props.items()},
                "required": list(required),
            }
        else:
            desc = f"Tool {name} (schema not recorded in the trace)."
            params = {"type": "object", "properties": {k: {} for k in sorted(names_and_keys[name])}}
        out.append({"type": "function", "function": {"name": name, "description": desc, "parameters": params}})
    return out


class _Turn:
    """One assistant reply being assembled from its content-block lines."""

    def __init__(self, message_id: str, uuid: str, line: int, model: str) -> None:
        self.message_id, self.uuid, self.line, self.model = message_id, uuid, line, model
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[ToolCall] = []

    def add(self, blocks: Any, used_tools: dict[str, set[str]]) -> None:
        if isinstance(blocks, str):
            self.text.append(blocks)
            return
        for b in blocks or ():
            if not isinstance(b, dict):
                continue
            kind = b.get("type")
            if kind == "text" and b.get("text"):
                self.text.append(b["text"])
            elif kind == "thinking" and b.get("thinking"):
                self.reasoning.append(b["thinking"])
            elif kind == "tool_use":
                args: dict[str, Any] = b["input"] if isinstance(b.get("input"), dict) else {}
                name = str(b.get("name") or "")
                used_tools.setdefault(name, set()).update(args)
                self.calls.append(
                    ToolCall(id=str(b.get("id") or ""), name=name, arguments=json.dumps(args, ensure_ascii=False))
                )
            # redacted_thinking and unknown blocks carry nothing a teacher or student can use

    def action(self) -> Action:
        return Action(text="\n\n".join(self.text), reasoning="\n\n".join(self.reasoning), tool_calls=tuple(self.calls))


def _user_messages(content: Any, limit: int | None) -> list[dict[str, Any]]:
    """A user record as chat messages: tool results first (they answer the previous assistant turn), then text."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}] if content.strip() else []
    tools, texts = [], []
    for b in content or ():
        if not isinstance(b, dict):
            continue
        if b.get("type") == "tool_result":
            text = content_text(b.get("content"))
            if b.get("is_error"):
                text = f"[tool error]\n{text}"
            tools.append(tool_message(str(b.get("tool_use_id") or ""), text, limit=limit))
        else:
            t = content_text([b])
            if t:
                texts.append(t)
    out = tools
    if texts:
        out.append({"role": "user", "content": "\n".join(texts)})
    return out


def _hidden(rec: dict[str, Any]) -> bool:
    """Injected notices the model never saw. A compact summary is context whatever its visibility flag."""
    if rec.get("isCompactSummary"):
        return False
    return bool(rec.get("isMeta") or rec.get("isVisibleInTranscriptOnly"))


def ingest_claude_code(
    path: Path, report: IngestReport, *, max_observation_chars: int | None = None
) -> Iterator[TraceState]:
    """States of every session in ``path``: one trace per ``sessionId`` (concatenated session files included)."""
    # pass 1: uuid -> (parentUuid, byte offset, line) over the whole file (a compact boundary or a resumed session
    # may link across sessions); per session its last main-chain record and main-chain record count
    index: dict[str, tuple[str | None, int, int]] = {}
    leaves: dict[str, str] = {}
    main_records: dict[str, int] = {}
    for line_no, start, rec in iter_jsonl_offsets(path, report):
        if not isinstance(rec, dict):
            report.skip("unknown_record")
            continue
        kind = rec.get("type")
        if kind not in _CONVERSATIONAL or not rec.get("uuid"):
            report.skip("snapshot" if kind == "file-history-snapshot" else "non_conversational")
            continue
        if rec.get("isSidechain"):
            report.skip("sidechain")
            continue
        parent = rec.get("parentUuid")
        if kind == "system" and rec.get("subtype") == "compact_boundary":
            parent = rec.get("logicalParentUuid")  # splice: states before /compact keep their full context
        index[str(rec["uuid"])] = (parent, start, line_no)
        if _hidden(rec):
            report.skip("meta")
        elif kind in ("user", "assistant"):
            session = str(rec.get("sessionId") or "")
            leaves[session] = str(rec["uuid"])  # re-inserted keys keep first-seen order: sessions in file order
            main_records[session] = main_records.get(session, 0) + 1
    branches = {session: _main_branch(index, leaf, report) for session, leaf in leaves.items()}
    del index
    on_branches = Counter(off for branch in branches.values() for off, _ in branch)
    counted: set[int] = set()  # main-chain records ingested (offsets), once even when sessions share a prefix
    with path.open("rb") as f:
        for session, branch in branches.items():
            if branch and on_branches[branch[-1][0]] > 1:
                continue  # the whole session lies on a later one's branch (resumed, history copied): ingested there
            yield from _session_states(f, path, session or path.stem, branch, counted, report, max_observation_chars)
    report.skip("off_main_branch", sum(main_records.values()) - len(counted))


def _main_branch(
    index: dict[str, tuple[str | None, int, int]], leaf: str, report: IngestReport
) -> list[tuple[int, int]]:
    """(byte offset, line) of the records on the parent chain of ``leaf``, root first."""
    path_ids: list[str] = []
    seen: set[str] = set()
    cur: str | None = leaf
    while cur is not None and cur not in seen:
        if cur not in index:
            report.skip("dangling_parent")
            break
        seen.add(cur)
        path_ids.append(cur)
        cur = index[cur][0]
    path_ids.reverse()
    return [(index[u][1], index[u][2]) for u in path_ids]


def _session_states(
    f: BinaryIO,
    path: Path,
    trace_id: str,
    offsets: list[tuple[int, int]],
    counted: set[int],
    report: IngestReport,
    max_observation_chars: int | None,
) -> Iterator[TraceState]:
    """Pass 2 for one session: build the conversation from its main-branch records only."""
    items: list[dict[str, Any] | _Turn | _Compact] = []
    used_tools: dict[str, set[str]] = {}
    for off, line_no in offsets:
        f.seek(off)
        rec = json.loads(f.readline())
        kind = rec.get("type")
        if kind == "system":
            if rec.get("subtype") == "compact_boundary":
                items.append(_COMPACT)  # the model saw only the summary after this point
            continue  # other system records are local notices, not model messages
        if _hidden(rec):
            continue
        counted.add(off)
        msg = rec.get("message") or {}
        if kind == "user":
            items.extend(_user_messages(msg.get("content"), max_observation_chars))
            continue
        model = str(msg.get("model") or "")
        if model == "<synthetic>":
            report.skip("synthetic")
            continue
        mid = str(msg.get("id") or rec.get("requestId") or rec["uuid"])
        last_turn = next((i for i in range(len(items) - 1, -1, -1) if isinstance(items[i], _Turn)), None)
        turn = items[last_turn] if last_turn is not None else None
        if (
            last_turn is not None
            and isinstance(turn, _Turn)
            and turn.message_id == mid
            and all(isinstance(x, dict) and x.get("role") == "tool" for x in items[last_turn + 1 :])
        ):
            turn.add(msg.get("content"), used_tools)
        else:
            turn = _Turn(mid, str(rec["uuid"]), line_no, model)
            turn.add(msg.get("content"), used_tools)
            items.append(turn)
    tools = tool_schemas(used_tools)
    context: list[dict[str, Any]] = []
    step = 0
    for item in items:
        if isinstance(item, _Compact):
            context = []
            continue
        if isinstance(item, dict):
            context.append(item)
            continue
        action = item.action()
        if action.is_empty():
            report.skip("empty_action")  # a thinking-only reply: nothing to replay, nothing a teacher saw
            continue
        yield make_state(
            fmt="claude-code",
            file=str(path),
            line=item.line,
            trace_id=trace_id,
            key=item.uuid,
            context=context,
            action=action,
            tools=tools,
            model=item.model,
            step=step,
        )
        step += 1
        context.append(action.to_message())
    if step:
        report.traces += 1
