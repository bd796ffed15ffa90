"""verifiers v1 ``traces.jsonl`` (written by ``vf-eval``/``vf-debug``/prime-rl evals) to trace states.

One line = one episode (``verifiers/v1/utils/trace_store.py: write_episode``): ``{"id", "env", "task", "ok",
"traces": [Trace...]}``. A ``Trace`` holds a message graph ``nodes: [{"parent": int|None, "message": {...},
"sampled": bool, "tools": [...] (roots only)}]`` with verifiers' flat message types (``ToolCall = {id, type,
name, arguments}``, ``Tool = {type, name, description, parameters}``), ``calls`` (``model`` per call) and
``agent.config.model``. Every sampled assistant node becomes one state whose context is its root-to-node path;
nodes shared by several branches are emitted once. Memory: one episode line at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crf_prime.records.models import TraceState
from crf_prime.traces.chat import action_from_openai, clean_context, make_state, tool_schema_from_any
from crf_prime.traces.records import IngestReport, iter_records


def _openai_message(msg: dict[str, Any]) -> dict[str, Any]:
    """A verifiers message dict in OpenAI shape (flat tool calls nested under ``function``)."""
    if msg.get("role") == "assistant" and msg.get("tool_calls"):
        calls = [
            c
            if "function" in c
            else {
                "id": c.get("id", ""),
                "type": "function",
                "function": {"name": c.get("name", ""), "arguments": c.get("arguments", "{}")},
            }
            for c in msg["tool_calls"]
            if isinstance(c, dict)
        ]
        return {**msg, "tool_calls": calls}
    return msg


def _trace_model(trace: dict[str, Any]) -> dict[int, str]:
    by_node = {}
    for call in trace.get("calls") or ():
        if isinstance(call, dict) and call.get("node") is not None and call.get("model"):
            by_node[int(call["node"])] = str(call["model"])
    return by_node


def ingest_verifiers(
    path: Path, report: IngestReport, *, max_observation_chars: int | None = None
) -> Iterator[TraceState]:
    for line, episode in iter_records(path, report):
        if not isinstance(episode, dict) or not isinstance(episode.get("traces"), list):
            report.skip("unknown_record")
            continue
        for trace in episode["traces"]:
            nodes = trace.get("nodes") if isinstance(trace, dict) else None
            if not isinstance(nodes, list):
                report.skip("unknown_record")
                continue
            agent_cfg = (trace.get("agent") or {}).get("config") or {}
            default_model = str(agent_cfg.get("model") or "")
            call_models = _trace_model(trace)
            trace_id = str(trace.get("id") or f"{episode.get('id', path.stem)}:{line}")
            tools_all = [tool_schema_from_any(t) for t in trace.get("tools") or () if isinstance(t, dict)]
            step = 0
            for i, node in enumerate(nodes):
                msg = node.get("message") if isinstance(node, dict) else None
                if not isinstance(msg, dict) or msg.get("role") != "assistant" or not node.get("sampled"):
                    continue
                # root-to-node path
                chain: list[int] = []
                cur = node.get("parent")
                while isinstance(cur, int) and 0 <= cur < len(nodes) and cur not in chain:
                    chain.append(cur)
                    cur = nodes[cur].get("parent")
                chain.reverse()
                root_tools = nodes[chain[0]].get("tools") if chain else None
                tools = [tool_schema_from_any(t) for t in root_tools or () if isinstance(t, dict)] or tools_all
                context = clean_context((_openai_message(nodes[j]["message"]) for j in chain), max_observation_chars)
                action = action_from_openai(_openai_message(msg))
                if action.is_empty():
                    report.skip("empty_action")
                    continue
                yield make_state(
                    fmt="verifiers",
                    file=str(path),
                    line=line,
                    trace_id=trace_id,
                    key=str(i),
                    context=context,
                    action=action,
                    tools=tools,
                    model=call_models.get(i, default_model),
                    step=step,
                )
                step += 1
            if step:
                report.traces += 1
