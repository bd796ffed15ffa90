"""Optional LLM-written hints: a teacher of the pool turns the detected error sites into one short piece of advice.

The request goes through the teacher pool of ``crf_prime.teachers`` (one ``[[teachers]]`` entry of
``configs/teachers.toml``): a one-teacher :class:`~crf_prime.teachers.TeacherPool` over the pool's
:class:`~crf_prime.teachers.TeacherClient` (its retries, timeout and concurrency cap) and
:class:`~crf_prime.teachers.Ledger` (spend caps enforced on each call's worst case before it is sent -- the job cap
and the per-episode cap alike --, append-only journal, one paid answer per question).
The hint prompt is a :class:`~crf_prime.records.TeacherRequest` whose key hashes the prompt, so a re-run of the same
episode with the same teacher is answered from the journal and not paid twice.

Only episodes with at least one error site are sent; a clean episode keeps the empty hint without a call. When the
call fails or a spend cap is reached the templated hint is kept and the reason is recorded in
``trace.info["hint_error"]`` (``trace.info["hint_source"]`` says which hint was stored): a hint is training context,
not a score, so a flaky writer must not fail the rollout, but it must not hide either. Configuration problems (a
missing teachers file, an unknown teacher name, an unset API key variable) do raise, when the writer is built.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crf_prime.extras import require
from crf_prime.hints.attach import build_hint, store_hint, trace_info
from crf_prime.hints.detect import condense, episode_messages
from crf_prime.hints.models import HintTarget, HintWriterConfig
from crf_prime.hints.templates import MAX_CHARS
from crf_prime.rayinit import init_ray
from crf_prime.records.failing import FailingTest
from crf_prime.records.models import TeacherRequest
from crf_prime.teachers.config import check_priced

if TYPE_CHECKING:
    from crf_prime.teachers import BudgetConfig, Ledger, TeacherConfig, TeacherPool

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You coach a coding agent. Given the task, the end of its attempt and the errors found in it, write at most "
    "three short imperative sentences telling the agent what to do differently. Name concrete tools, files, tests "
    "or commands. Do not solve the task, do not mention graders or hidden tests, no preamble."
)
DEFAULT_MAX_TOKENS = 512
"""Token cap of a hint (the teacher's ``sampling.max_tokens`` when lower)."""


@dataclass(frozen=True)
class HintReply:
    """What the writer got for one episode: the text, or why there is none."""

    text: str | None
    error: str = ""
    """``Type: message`` of the failure; ``BudgetExhausted: ...`` when a spend cap refused the call."""
    cached: bool = False
    """True when the answer came from the journal (nothing was paid in this call)."""
    cost_usd: float = 0.0
    """Cost of the call sent now (0 when cached or refused)."""


def hint_state_id(messages: Sequence[dict[str, str]]) -> str:
    """Journal key of a hint prompt: same prompt (episode tail + error sites) -> same id -> answered once."""
    digest = hashlib.sha256(json.dumps(list(messages), sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    return f"hint:{digest[:32]}"


def _episode_id(trace: Any) -> str:
    value = trace.get("id") if isinstance(trace, dict) else getattr(trace, "id", "")
    return str(value or "")


class LLMHintWriter:
    """Writes a hint with one call through a one-teacher pool (client + budget ledger + journal).

    The pool and the ledger are built on first use inside the running event loop (their clients, semaphores and
    futures belong to it) and rebuilt if a later call runs in another loop; the journal on disk carries over.
    """

    def __init__(
        self,
        teacher: TeacherConfig,
        *,
        journal: str | Path,
        budget: BudgetConfig | None = None,
        api_key: str | None = None,
        transcript_chars: int = 4000,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        live: str | None = None,
        ray_address: str | None = "auto",
    ) -> None:
        from crf_prime.teachers import BudgetConfig  # start-up: not loaded by every command

        s = teacher.sampling
        self.teacher = teacher.model_copy(
            update={"sampling": s.model_copy(update={"max_tokens": min(s.max_tokens, max_tokens)})}
        )
        self.journal = Path(journal)
        self.budget = budget if budget is not None else BudgetConfig()
        check_priced([self.teacher], self.budget)  # a cap needs prices to reserve a hint's worst case
        self.transcript_chars = transcript_chars
        self.live = live
        self.ray_address = ray_address
        self._api_key = api_key if api_key is not None else teacher.api_key()  # an unset key variable fails here
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool: TeacherPool | None = None
        self._building: asyncio.Task[TeacherPool] | None = None
        self._ledger: Ledger | None = None

    @classmethod
    def from_config(cls, config: HintWriterConfig, **kwargs: Any) -> LLMHintWriter:
        """The writer a taskset's ``hint_writer`` table describes (teacher, journal, caps from the teachers file)."""
        # start-up: not loaded by every command
        from crf_prime.teachers import BudgetConfig, ConfigError, load_pool_config

        pool = load_pool_config(config.teachers)
        teacher = next((t for t in pool.teachers if t.name == config.name), None)
        if teacher is None:
            raise ConfigError(
                f"{config.teachers}: no [[teachers]] entry named {config.name!r} (hint_writer.name; have "
                f"{[t.name for t in pool.teachers]})"
            )
        budget = BudgetConfig(
            job_usd=pool.budget.job_usd if config.budget_usd is None else config.budget_usd,
            per_trace_usd=pool.budget.per_trace_usd if config.per_episode_usd is None else config.per_episode_usd,
        )
        try:
            check_priced([teacher], budget, positions=[pool.teachers.index(teacher)])
        except ConfigError as e:
            raise ConfigError(f"{config.teachers}: {e} (hint_writer caps)") from None
        return cls(
            teacher,
            journal=config.journal,
            budget=budget,
            transcript_chars=config.transcript_chars,
            max_tokens=config.max_tokens,
            live=config.live,
            ray_address=config.ray_address,
            **kwargs,
        )

    def prompt(self, trace: Any, evidence: str) -> list[dict[str, str]]:
        messages = episode_messages(trace)
        task = next((m.text for m in messages if m.role == "user"), "")
        tail: list[str] = []
        budget = self.transcript_chars
        for m in reversed(messages[1:]):
            calls = " ".join(f"{name}({args})" for _, name, args in m.tool_calls)
            line = f"[{m.role}] {condense(' '.join(filter(None, [m.text, calls])), 600)}"
            if len(line) > budget:
                break
            tail.append(line)
            budget -= len(line)
        user = (
            f"TASK:\n{condense(task, 1500)}\n\nEND OF THE ATTEMPT:\n"
            + "\n".join(reversed(tail))
            + f"\n\nERRORS FOUND:\n{evidence}"
        )
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]

    async def _ensure_pool(self) -> TeacherPool:
        """The loop's one pool: concurrent first hints share one build (one ledger, so one set of caps)."""
        loop = asyncio.get_running_loop()
        if self._building is None or self._loop is not loop:
            if self._ledger is not None:
                self._ledger.close()
                self._ledger = None
            self._pool, self._loop = None, loop
            self._building = loop.create_task(self._live_pool() if self.live else asyncio.to_thread(self._local_pool))
        building = self._building
        try:
            self._pool = await asyncio.shield(building)
        except Exception:
            if self._building is building:  # the next hint tries again
                self._building = None
            raise
        return self._pool

    def _local_pool(self) -> TeacherPool:
        # start-up: not loaded by every command
        from crf_prime.teachers import AsyncioBackend, Ledger, PoolConfig, TeacherPool

        self._ledger = Ledger(self.journal, self.budget)  # reads the journal: off the event loop
        backend = AsyncioBackend([self.teacher], api_keys={self.teacher.name: self._api_key})
        return TeacherPool(PoolConfig(teachers=(self.teacher,), budget=self.budget), backend, self._ledger)

    async def _live_pool(self) -> TeacherPool:
        """Join (or, first, serve) the named detached pool: one ledger actor shared by every process on the cluster."""
        from crf_prime.teachers import PoolConfig, PoolOptions  # start-up: not loaded by every command
        from crf_prime.teachers import live as live_mode  # start-up: +2744 ms on every command

        require("ray", "ray")  # a missing extra says so here, not in the worker thread
        assert self.live is not None
        live = self.live

        def join() -> TeacherPool:
            init_ray(address=self.ray_address, namespace=live_mode.DEFAULT_NAMESPACE, log_to_driver=False)
            config = PoolConfig(teachers=(self.teacher,), budget=self.budget, pool=PoolOptions())
            return live_mode.serve(config, self.journal, name=live, api_keys={self.teacher.name: self._api_key})

        return await asyncio.to_thread(join)

    async def write(self, trace: Any, evidence: str) -> HintReply:
        """Ask the teacher (or the journal) for a hint; never raises for API, budget or journal trouble."""

        messages = self.prompt(trace, evidence)
        episode = _episode_id(trace)
        request = TeacherRequest(key=hint_state_id(messages), messages=tuple(messages), trace_id=episode)
        try:
            pool = await self._ensure_pool()
            out = await pool.ask(request)
            snap = (await pool.ledger.snapshot()) if out.budget_skipped else {}
        except Exception as e:  # journal I/O and the like: the templated hint stays, the trace says why
            return HintReply(None, error=f"{type(e).__name__}: {e}")
        if out.budget_skipped:
            b = self.budget
            if snap.get("stopped"):  # the job cap: the ledger refuses every later hint too
                why = (
                    f"hint budget reached: spent ${snap['spent']:.4f} of ${b.job_usd or 0.0:.4f} on {self.journal}; "
                    f"the next hint's worst case does not fit"
                )
            else:
                why = (
                    f"per-episode hint budget of ${b.per_trace_usd or 0.0:.4f} reached for episode {episode!r}: "
                    f"the next hint's worst case does not fit"
                )
            return HintReply(None, error=f"BudgetExhausted: {why}")
        (record,) = out.records
        cached = not out.sent
        if not record.ok:
            return HintReply(None, error=record.error or record.error_type, cost_usd=record.cost_usd)
        text = (record.action.text if record.action is not None else "").strip()
        if not text:
            return HintReply(
                None, error=f"ValueError: teacher {self.teacher.name!r} returned no hint text", cost_usd=record.cost_usd
            )
        return HintReply(text, cached=cached, cost_usd=0.0 if cached else record.cost_usd)

    async def close(self) -> None:
        if self._pool is not None and self._loop is asyncio.get_running_loop() and not self.live:
            await self._pool.backend.close()  # a live pool's actors outlive this process (live.shutdown ends them)
        if self._ledger is not None:
            self._ledger.close()
        self._pool = self._ledger = self._loop = self._building = None


_WRITERS: dict[HintWriterConfig, LLMHintWriter] = {}


def hint_writer(config: HintWriterConfig | None) -> LLMHintWriter | None:
    """The process-wide writer of a ``hint_writer`` config (one ledger per journal), or None when unset."""
    if config is None:
        return None
    writer = _WRITERS.get(config)
    if writer is None:
        writer = _WRITERS[config] = LLMHintWriter.from_config(config)
    return writer


async def attach_hint_async(
    trace: Any,
    *,
    failing_tests: Sequence[FailingTest] = (),
    tools: Sequence[str] | None = None,
    test_sources: Mapping[str, str] | None = None,
    writer: LLMHintWriter | None = None,
    max_chars: int = MAX_CHARS,
    target: HintTarget = "episode",
) -> str:
    """``attach_hint`` with an optional LLM writer; without one it stores exactly the templated hint.

    With a writer, ``trace.info`` also gets ``hint_cached`` (served from the journal) and ``hint_cost_usd``
    (paid now), or ``hint_error`` when the templated hint was kept.
    """
    hint, sites = build_hint(
        trace, failing_tests=failing_tests, tools=tools, test_sources=test_sources, max_chars=max_chars
    )
    info = trace_info(trace)
    source = "template"
    if writer is not None and sites:
        reply = await writer.write(trace, hint)
        if reply.text is None:
            info["hint_error"] = reply.error
            log.warning("LLM hint writer %s: keeping the templated hint: %s", writer.teacher.name, reply.error)
        else:
            hint, source = condense_lines(reply.text, max_chars), "llm"
            info["hint_cached"] = reply.cached
        info["hint_cost_usd"] = reply.cost_usd
    store_hint(trace, hint, sites, source=source, target=target)
    return hint


def condense_lines(text: str, max_chars: int) -> str:
    """Strip blank lines and cap the length (the hint is prepended to every scored branch)."""
    out = "\n".join(ln.rstrip() for ln in text.strip().splitlines() if ln.strip())
    return out if len(out) <= max_chars else out[: max_chars - 1].rstrip() + "…"
