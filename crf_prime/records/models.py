"""Wire rows of trace replay: a recorded agent state, the action taken there, and where it came from.

A ``TraceState`` is everything a teacher needs to propose the next action (the conversation so far, in OpenAI chat
format, and the tools offered) plus the action the recorded ("student") model actually took. Rows are frozen and
written as JSONL by ``crf-prime traces ingest``; the teacher pool, the pair builder and the trace_replay environment
read them back. A :class:`TeacherRequest` is what the teacher pool is asked: a state's context, or any other.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from crf_prime.records.family import family_of

TraceFormat = Literal["claude-code", "openhands", "swe-smith", "swe-gym", "verifiers"]


class ToolCall(BaseModel):
    """One tool call of an assistant turn, OpenAI style (``arguments`` is the raw JSON string)."""

    model_config = ConfigDict(frozen=True)

    id: str = ""
    """Call id as recorded (may be empty for formats without ids)."""
    name: str
    """Tool (function) name."""
    arguments: str = "{}"
    """Arguments as the model emitted them: a JSON string, not parsed (it may be invalid JSON)."""


class Action(BaseModel):
    """An assistant turn: free text plus zero or more tool calls."""

    model_config = ConfigDict(frozen=True)

    text: str = ""
    """Visible assistant text."""
    reasoning: str = ""
    """Thinking/reasoning content; kept for the student action, never sent to teachers."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Tool calls in the order they were emitted."""

    def is_empty(self) -> bool:
        return not self.text.strip() and not self.tool_calls

    def to_message(self) -> dict[str, Any]:
        """The action as an OpenAI assistant message (reasoning dropped)."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.tool_calls:
            msg["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return msg


class Source(BaseModel):
    """Where a state was read from."""

    model_config = ConfigDict(frozen=True)

    format: TraceFormat
    file: str
    """Path of the trace file."""
    line: int
    """1-based line (JSONL) or record index (JSON arrays) of the recorded action."""
    trace_id: str = ""
    """Session / trajectory id the state belongs to (states of one trace share it)."""


class TraceState(BaseModel):
    """One decision point of a recorded agent trace."""

    model_config = ConfigDict(frozen=True)

    state_id: str
    """Stable id: same input file and position give the same id (resume and dedup rely on it)."""
    messages: tuple[dict[str, Any], ...]
    """Context before the action, OpenAI chat messages (system/user/assistant/tool, tool calls included)."""
    tools: tuple[dict[str, Any], ...] = ()
    """OpenAI tool schemas offered to the agent at this state (``{"type": "function", "function": {...}}``)."""
    student_action: Action
    """The recorded assistant turn at this state."""
    source: Source
    source_model: str = ""
    """Model that produced the trace, as recorded (e.g. ``claude-sonnet-4-5``)."""
    model_family: str = ""
    """Normalised family of ``source_model`` (e.g. ``anthropic``); teachers of this family are excluded."""
    step: int = 0
    """0-based index of this state within its trace."""

    def request(self) -> TeacherRequest:
        """What the teacher pool is asked at this state."""
        return TeacherRequest(
            key=self.state_id,
            messages=self.messages,
            tools=self.tools,
            trace_id=self.source.trace_id,
            model_family=family_of(self.model_family, self.source_model),
            student_action=self.student_action,
        )


class TeacherRequest(BaseModel):
    """One question for the teacher pool: a context and the tools offered, journaled under ``key``.

    Trace replay asks one per recorded state (:meth:`TraceState.request`); hints and the trace_replay environment's
    live mode build one directly.
    """

    model_config = ConfigDict(frozen=True)

    key: str
    """Journal key (the ``state_id`` of its rows): a rerun with the same key reuses the answers already paid for."""
    messages: tuple[dict[str, Any], ...]
    """The context, OpenAI chat messages; reasoning fields are dropped before sending."""
    tools: tuple[dict[str, Any], ...] = ()
    """OpenAI tool schemas offered to the teachers."""
    trace_id: str = ""
    """Trace (or episode) the question belongs to: the per-trace spend cap counts by it."""
    model_family: str = ""
    """Normalised family of the model whose context this is; teachers of that family are not asked (when the pool
    excludes the same family)."""
    student_action: Action | None = None
    """The recorded action, if any: tiered querying escalates when the cheap tier disagrees with it."""
