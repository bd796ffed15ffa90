"""Rows exchanged between the environments and the hint builder."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ErrorKind = Literal[
    "failing_test",
    "unknown_tool",
    "invalid_json",
    "schema_violation",
    "tool_error",
    "traceback",
    "repeated_failure",
]
"""Error-site kinds, in the order their hints are written (most actionable first)."""

KIND_ORDER: tuple[ErrorKind, ...] = (
    "failing_test",
    "unknown_tool",
    "invalid_json",
    "schema_violation",
    "repeated_failure",
    "traceback",
    "tool_error",
)


class ErrorSite(BaseModel):
    """One place in the episode where the agent went wrong."""

    model_config = ConfigDict(frozen=True)

    kind: ErrorKind
    index: int
    """Index into the analysed message list of the message that shows the error; -1 for failing tests."""
    tool: str | None = None
    """Tool name involved, if any."""
    detail: str = ""
    """Condensed evidence: parse error, schema error, last traceback line, test failure text."""
    arguments: str = ""
    """Raw arguments of the offending call (for unknown tools / invalid JSON / repeated failures), truncated."""
    count: int = Field(default=1, ge=1)
    """How many times the same failure happened (repeated_failure)."""


class HintWriterConfig(BaseModel):
    """An LLM hint writer taken from the teacher pool (``--env.taskset.task.hint_writer``; None = templated hints).

    The request goes through the pool's machinery (``crf_prime.teachers``): the teacher's client with its retries and
    concurrency cap, the budget ledger and the append-only journal, so a re-run of the same episode with the same
    teacher is served from the journal instead of being paid again.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    teachers: Path = Path("configs/teachers.toml")
    """Teacher pool config (``[[teachers]]`` tables) holding the writer's endpoint, model, key variable and prices."""
    name: str
    """Name of the ``[[teachers]]`` entry that writes the hints."""
    journal: Path = Path("runs/hints/journal.jsonl")
    """Append-only JSONL journal of the hint calls (one row per (episode, teacher) call; an intent log beside it).
    Runs sharing it share the budget and never pay twice for the same episode."""
    budget_usd: float | None = Field(default=None, ge=0)
    """Spend cap in USD for every run on ``journal``; None = the teachers file's ``[budget] job_usd``. Once reached,
    episodes keep the templated hint and ``trace.info["hint_error"]`` says so."""
    per_episode_usd: float | None = Field(default=None, ge=0)
    """Spend cap in USD per episode (trace id); None = the teachers file's ``[budget] per_trace_usd``."""
    live: str | None = None
    """Name of a live (detached Ray) teacher pool to run the hint calls through, for env servers with several worker
    processes: every process joins the same ledger actor, so the caps and the journal hold across processes (the
    first process serves it with this table's teacher, journal and caps; ``crf_prime.teachers.live``). None = an
    in-process pool per worker process (caps and de-duplication then hold per process)."""
    ray_address: str | None = "auto"
    """Ray cluster the live pool lives on when this process is not connected yet (``ray.init(address=...)``; None
    starts a local one). Only with ``live``."""
    max_tokens: int = Field(default=512, ge=1)
    """Upper bound on generated tokens per hint (the teacher's own ``sampling.max_tokens`` if that is lower)."""
    transcript_chars: int = Field(default=4000, ge=0)
    """Characters of the end of the episode sent with the task and the error sites."""


HintTarget = Literal["episode", "error_turns"]
"""Which sampled turns of an episode keep their trainable tokens after the hint is attached."""


class HintTaskConfig(BaseModel):
    """Channel-2 settings of an environment's task config (``[...env.taskset.task]``), shared by the tasksets that
    write hints."""

    hint_writer: HintWriterConfig | None = None
    """Have a teacher of the pool (``configs/teachers.toml``) phrase the channel-2 hint, budget-capped and journaled
    (``[...env.taskset.task.hint_writer]``); None = the templated hint only. A failed or refused call keeps the
    templated hint and records why in ``trace.info["hint_error"]``."""
    hint_target: HintTarget = "episode"
    """``"episode"`` leaves the trace's trainable tokens alone (every source that is not the hint source).
    ``"error_turns"`` keeps them only on the assistant turns that produced an error site, so prime-rl's opsd distils
    those turns and nothing else, and an episode without an error site keeps none and yields no trainer sample. Set it
    on the opsd source only."""
