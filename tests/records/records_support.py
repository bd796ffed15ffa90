"""A minimal valid TraceState for the command-line and records-layer tests."""

from __future__ import annotations

from crf_prime.records import Action, Source, ToolCall, TraceState


def state(i: int) -> TraceState:
    """State ``s<i>`` of trace ``t``: one user message, the recorded action ``bash ls``."""
    call = ToolCall(id="c", name="bash", arguments='{"command": "ls"}')
    return TraceState(
        state_id=f"s{i}",
        messages=({"role": "user", "content": f"state s{i}"},),
        student_action=Action(tool_calls=(call,)),
        source=Source(format="swe-gym", file="t.jsonl", line=i + 1, trace_id="t"),
    )
