"""The teacher pool: ask every eligible teacher for the next action at each state, within budget, resumably.

Per state: teachers of the trace's own model family are excluded (circularity; on by default); the rest are asked
concurrently, tier by tier when tiered querying is on (cheap tier first, escalate only when its answers disagree
with each other or with the student: the value-of-information rule). Every call goes through the ledger (journal,
worst-case reservation against the caps, one paid answer per question) and the backend (asyncio or Ray). At most ``window`` states are in flight: the driver-side bound that
keeps the number of pending calls (and Ray object refs) finite on datasets of any size.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from crf_prime.records.family import family_of
from crf_prime.records.journal import JournalRecord
from crf_prime.records.models import TeacherRequest, TraceState
from crf_prime.teachers.agreement import all_agree
from crf_prime.teachers.backends import Backend, NotSubmitted
from crf_prime.teachers.client import WIRE, question_params, teacher_messages
from crf_prime.teachers.config import PoolConfig, PoolOptions, TeacherConfig
from crf_prime.teachers.ledger import Admission
from crf_prime.teachers.money import Ask, Content, params_json, plan


class LedgerLike(Protocol):
    """The ledger's coroutine interface. A ledger whose ``commit`` settles the cost before its first ``await`` (the
    in-process :class:`~crf_prime.teachers.ledger.Ledger`) says so with ``charges_before_await = True``; the pool
    then frees a teacher's slot before the journal fsync. Otherwise (a remote ledger) the slot is held until the
    commit returns."""

    async def admit(self, ask: Ask, *, sent: bool = False) -> Admission: ...
    async def mark_sent(self, question: str) -> None: ...
    async def mark_refused(self, question: str) -> None: ...
    async def commit(self, ask: Ask, record: JournalRecord) -> JournalRecord: ...
    async def release(self, ask: Ask) -> None: ...
    async def resolve(self, generation_id: str, cost_usd: float, via: str = "generation") -> bool: ...
    async def lookups(self) -> list[tuple[str, str]]: ...
    async def snapshot(self) -> dict: ...


class _LedgerWire:
    """The client's :class:`~crf_prime.teachers.client.Wire` for one call: tells the ledger."""

    __slots__ = ("key", "ledger", "question")

    def __init__(self, ledger: LedgerLike, question: str, key: str) -> None:
        self.ledger, self.question, self.key = ledger, question, key

    async def sent(self) -> None:
        await self.ledger.mark_sent(self.question)

    async def refused(self) -> None:
        await self.ledger.mark_refused(self.question)


def teacher_family(t: TeacherConfig) -> str:
    return family_of(t.model_family, t.model)


@dataclass
class StateOutcome:
    """What happened at one state in this run."""

    state_id: str
    trace_id: str
    records: list[JournalRecord] = field(default_factory=list)
    """Answers for this state: fresh ones and ones already in the journal."""
    sent: list[JournalRecord] = field(default_factory=list)
    """Calls actually sent in this run (a subset of ``records``)."""
    excluded: list[str] = field(default_factory=list)
    """Teachers not asked because they share the trace's model family."""
    skipped_by_tier: list[str] = field(default_factory=list)
    """Teachers not asked because the cheaper tier agreed with itself and with the student."""
    saved_usd: float = 0.0
    """Estimated cost of the calls tiering avoided."""
    budget_skipped: list[str] = field(default_factory=list)
    """Teachers not asked because a spend cap was reached."""
    shared: list[JournalRecord] = field(default_factory=list)
    """Answers to a question another state had paid for (a subset of ``records``; not sent, not paid)."""
    shared_saved_usd: float = 0.0
    """What those answers cost when they were paid for."""
    step_latency_s: float | None = None
    """Wall time from the first call sent at this state to the last answer (None when nothing was sent)."""
    sequential_latency_s: float | None = None
    """Sum of this run's call latencies at the state: what calling the teachers one after another would take."""


class _Payload:
    """The backend's form of a request, made on first use (answers reused from the journal need none), and the
    request's content digest, computed once for all its teachers."""

    def __init__(self, backend: Backend, request: TeacherRequest) -> None:
        self._backend, self._request, self._value, self._made = backend, request, None, False
        self._content: Content | None = None

    def get(self) -> Any:
        if not self._made:
            self._value, self._made = self._backend.prepare(self._request), True
        return self._value

    def ask(self, t: TeacherConfig, params: bytes, idempotent: bool) -> Ask:
        if self._content is None:
            self._content = Content.of(teacher_messages(self._request), list(self._request.tools))
        question, reserve = plan(t, params, self._content)
        r = self._request
        return Ask(r.key, t.name, question, reserve, r.trace_id, idempotent)


class TeacherPool:
    """Asks a config's teachers (through ``backend``) for the next action at each state, under ``ledger``'s caps."""

    def __init__(self, config: PoolConfig, backend: Backend, ledger: LedgerLike) -> None:
        options = config.pool
        self.teachers = list(config.teachers)
        self.backend = backend
        self.ledger = ledger
        self.options = options
        self.stopped = ""
        self.tiers = sorted({t.tier for t in self.teachers}) if options.tiered else [None]
        self.on_record: Callable[[JournalRecord, StateOutcome], None] | None = None
        self._mean_cost: dict[str, tuple[float, int]] = {}
        # admit what can be sent right away plus, on a backend whose clients cap their own concurrency, the calls
        # queued there: a reservation is held only while its request is in flight or next in line
        self._admits = {t.name: t.max_concurrency + self.queue_depth(t, backend, options) for t in self.teachers}
        self._slots = {name: asyncio.Semaphore(n) for name, n in self._admits.items()}
        self._early_release = bool(getattr(ledger, "charges_before_await", False))
        # a backend that cannot tell when a request hits the wire (Ray) has its calls count as sent from admission
        self._reports_wire = bool(getattr(backend, "reports_wire", False))
        # a backend whose teachers can be down for a while (Ray: an actor restarting) says when one takes calls again
        self._ready: Callable[[str], Awaitable[None]] | None = getattr(backend, "ready", None)
        self._params = {
            (t.name, tools): params_json(question_params(t, tools)) for t in self.teachers for tools in (False, True)
        }
        # a teacher whose endpoint takes idempotency keys gets one per call (in the call log before it is sent): the
        # asyncio client reads it from the pool's wire, a Ray actor gets it with the call
        self._idempotent = {t.name: bool(t.idempotency_header) for t in self.teachers}

    @staticmethod
    def queue_depth(t: TeacherConfig, backend: Backend, options: PoolOptions) -> int:
        """Calls admitted beyond the teacher's concurrency, to wait in a backend that caps it itself."""
        if not getattr(backend, "queues", False):
            return 0
        return options.queue if options.queue is not None else max(2, t.max_concurrency // 2)

    def eligible(self, request: TeacherRequest) -> tuple[list[TeacherConfig], list[str]]:
        if not self.options.votes.exclude_same_family:
            return list(self.teachers), []
        fam = request.model_family
        keep = [t for t in self.teachers if not (fam and teacher_family(t) == fam)]
        return keep, [t.name for t in self.teachers if t not in keep]

    def _estimate(self, t: TeacherConfig, answered: list[JournalRecord]) -> float:
        """Cost a skipped call would have had: tokens seen at this state x its prices, else its mean cost so far."""
        priced = [r for r in answered if r.input_tokens or r.output_tokens]
        if priced and (t.price_in_per_mtok or t.price_out_per_mtok):
            n = len(priced)
            return t.price_cost(
                round(sum(r.input_tokens for r in priced) / n), round(sum(r.output_tokens for r in priced) / n)
            )
        total, n = self._mean_cost.get(t.name, (0.0, 0))
        return total / n if n else 0.0

    async def _call(
        self, t: TeacherConfig, request: TeacherRequest, payload: _Payload, out: StateOutcome, times: list
    ) -> None:
        """Admit, send and journal one call. The teacher's admission slot (its concurrency, plus the backend's queue)
        is held from admission until the answer is in:
        its journal write (fsync) runs after the slot is freed, so the next call to that teacher does not wait for
        the disk. ``Ledger.commit`` settles the cost before its first ``await``, i.e. before anyone else can be
        admitted through the freed slot, and the answer counts as done only once its row is durable."""
        slot = self._slots[t.name]
        await slot.acquire()
        rec: JournalRecord | None = None
        try:
            if self._ready is not None:  # nothing is admitted for a teacher that cannot take it (a restarting actor)
                await self._ready(t.name)
            ask = payload.ask(t, self._params[(t.name, bool(request.tools))], self._idempotent[t.name])
            adm = await self.ledger.admit(ask, sent=not self._reports_wire)
        except BaseException:
            slot.release()
            raise
        if adm.verdict == "send":
            token = WIRE.set(_LedgerWire(self.ledger, ask.question, adm.key)) if self._reports_wire else None
            sent = time.perf_counter()
            try:
                if adm.key and not self._reports_wire:
                    rec = await self.backend.ask(t.name, payload.get(), key=adm.key)
                else:
                    rec = await self.backend.ask(t.name, payload.get())
            except BaseException as e:  # cancelled, or an infrastructure error: no answer to commit
                slot.release()
                if isinstance(e, NotSubmitted):  # nothing to book, though admitted as sent (Ray)
                    await self.ledger.mark_refused(ask.question)
                await self.ledger.release(ask)
                raise
            finally:
                times.append((sent, time.perf_counter()))
                if token is not None:
                    WIRE.reset(token)
        if rec is None:
            slot.release()
            if adm.verdict in ("done", "shared"):
                assert adm.record is not None
                out.records.append(adm.record)
                if adm.verdict == "shared":
                    out.shared.append(adm.record)
                    out.shared_saved_usd += adm.saved_usd
            else:
                out.budget_skipped.append(t.name)
                if adm.verdict == "job_budget":
                    self.stopped = adm.message
            return
        if self._early_release:
            slot.release()
            rec = await self._commit(ask, rec)
        else:
            try:
                rec = await self._commit(ask, rec)
            finally:
                slot.release()
        out.records.append(rec)
        out.sent.append(rec)
        total, n = self._mean_cost.get(t.name, (0.0, 0))
        self._mean_cost[t.name] = (total + rec.cost_usd, n + 1)
        if self.on_record is not None:
            self.on_record(rec, out)

    async def _commit(self, ask: Ask, rec: JournalRecord) -> JournalRecord:
        """``ledger.commit``, carried to its end when the call is cancelled meanwhile (another call's infrastructure
        error stops the job): an answer that came back is paid for, so its row is written, never thrown away."""
        commit = asyncio.ensure_future(self.ledger.commit(ask, rec))
        try:
            return await asyncio.shield(commit)
        except asyncio.CancelledError:
            await commit
            raise

    async def resolve_costs(self) -> int:
        """Ask the providers that can say (``TeacherConfig.looks_up_costs``) what each unresolved call cost, and book
        the answers; returns how many were resolved. A generation the provider has no record of yet stays
        unresolved (booked at its worst case) for a later run."""
        teachers = {t.name: t for t in self.teachers}
        pending = [(t, g) for t, g in await self.ledger.lookups() if t in teachers and teachers[t].looks_up_costs]
        gate = asyncio.Semaphore(8)

        async def one(teacher: str, generation_id: str) -> bool:
            async with gate:
                cost = await self.backend.lookup(teacher, generation_id)
            return cost is not None and await self.ledger.resolve(generation_id, cost)

        return sum(await asyncio.gather(*(one(t, g) for t, g in pending)))

    async def ask(self, request: TeacherRequest) -> StateOutcome:
        """Ask every eligible teacher (tier by tier when tiered) once; answers already journaled are reused."""
        out = StateOutcome(state_id=request.key, trace_id=request.trace_id)
        teachers, out.excluded = self.eligible(request)
        payload = _Payload(self.backend, request)
        times: list[tuple[float, float]] = []
        for i, tier in enumerate(self.tiers):
            group = [t for t in teachers if tier is None or t.tier == tier]
            if not group:
                continue
            await asyncio.gather(*(self._call(t, request, payload, out, times) for t in group))
            if self.stopped:
                break
            later = [t for t in teachers if tier is not None and t.tier in self.tiers[i + 1 :]]
            answers = [r.action for r in out.records if r.ok and r.action is not None]
            if later and answers and all_agree(answers, request.student_action, self.options.votes):
                out.skipped_by_tier = [t.name for t in later]
                out.saved_usd = sum(self._estimate(t, out.records) for t in later)
                break
        if times:
            out.step_latency_s = max(e for _, e in times) - min(s for s, _ in times)
            out.sequential_latency_s = sum(e - s for s, e in times)
        return out

    async def replay(
        self, states: Iterable[TraceState], *, on_state: Callable[[StateOutcome], None] | None = None
    ) -> list[StateOutcome]:
        """Replay states with at most ``window`` in flight; stops sending (and starting states) at the job cap."""
        window = self.options.window or 2 * sum(self._admits.values())
        sem = asyncio.Semaphore(window)
        outcomes: list[StateOutcome] = []
        tasks: set[asyncio.Task[StateOutcome]] = set()
        errors: list[BaseException] = []

        def finished(task: asyncio.Task[StateOutcome]) -> None:
            tasks.discard(task)
            if not task.cancelled() and (error := task.exception()) is not None:
                errors.append(error)

        async def one(state: TraceState) -> StateOutcome:
            try:
                out = await self.ask(state.request())
            finally:
                sem.release()
            outcomes.append(out)
            if on_state is not None:
                on_state(out)
            return out

        await self.resolve_costs()  # calls of earlier runs the provider can now account for
        try:
            for state in states:
                await sem.acquire()
                if self.stopped:
                    sem.release()
                    break
                task = asyncio.create_task(one(state))
                tasks.add(task)
                task.add_done_callback(finished)
                if errors:  # infrastructure errors (bugs, broken journal) surface as soon as they happen
                    raise errors[0]
            if tasks:
                await asyncio.gather(*tasks)
            if errors:
                raise errors[0]
        finally:  # stopped by an error: states waiting for a slot give up, answers already back are journaled
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        await self.resolve_costs()
        if self.stopped:  # the message as of now, with every call of this run settled: the final spend
            self.stopped = (await self.ledger.snapshot())["stopped"] or self.stopped
        return outcomes
