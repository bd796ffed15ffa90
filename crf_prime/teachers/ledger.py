"""Money and journal bookkeeping shared by every call of a job: what was paid for, what may still be sent.

The ledger is the single writer of the journal and the call log. ``admit`` decides, before anything leaves the
machine, whether a call may be sent:

* not when its (state, teacher) row is in the journal, and not when its *question* (the request's content hash)
  already has an answer: that answer is shared with the new state for free; a question in flight is awaited;
* not unless its reservation (worst-case cost) fits: spent + reserved + this reservation <= cap, for the job cap
  and the trace's cap. A call that could fit once the calls in flight are settled waits for them; one that cannot
  fit even then is refused, and a refusal by the job cap stops the job.

``commit`` replaces the reservation by the actual cost (the reservation itself when the request reached the
provider and its cost is unknown) and writes the row. Spend therefore never exceeds a cap, at any concurrency, as
long as the teacher's prices are not below the provider's bill (a bill above the reservation stops the job).

What the caps count (``spent``) is the *known* charges plus the worst case of every call whose cost is unknown
(``unresolved``: cut or unreadable answers, timeouts, calls lost in a crash). Those are reported apart, and resolved
when the provider can say: ``resolve`` books a generation lookup's answer (a ``charge`` row in the call log), and a
call lost in a crash whose requests carried an idempotency key is re-sent with that key on resume, its answer
reporting the one charge.
In live mode the same class runs inside a named detached Ray actor so that several processes share it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from crf_prime.boot import boot_id
from crf_prime.records.journal import JournalRecord, Key, read_journal
from crf_prime.teachers.config import BudgetConfig, PoolOptions
from crf_prime.teachers.journal import CallEvent, GroupCommit, Intent, IntentLog, Journal, intents_path, read_intents
from crf_prime.teachers.money import Ask

Verdict = Literal["send", "done", "shared", "job_budget", "trace_budget"]


@dataclass(frozen=True)
class Admission:
    verdict: Verdict
    record: JournalRecord | None = None
    """The answer when ``verdict`` is "done" (this state's journal row) or "shared" (another state's answer)."""
    message: str = ""
    saved_usd: float = 0.0
    """"shared": what the answer cost when it was paid for."""
    key: str = ""
    """"send": the idempotency key its requests carry (empty unless the ask is ``idempotent``)."""


@dataclass(frozen=True)
class Unknown:
    """A call that may have been charged, booked at its reservation until the provider says what it cost."""

    state_id: str
    teacher: str
    trace_id: str
    question: str
    reserve_usd: float
    generation_id: str = ""
    """The provider's id of its generation, when the answer carried one: what a generation lookup resolves."""


def _call_key(question: str, state_id: str, teacher: str) -> str:
    # journals written before questions existed key their calls by (state, teacher)
    return question or f"{state_id}\0{teacher}"


def _usd(v: float) -> str:
    return f"${v:.4f}"


class Ledger:
    """Journal + call log + spend caps for one job. All methods are coroutines (also inside a Ray actor)."""

    charges_before_await = True
    """``commit`` settles the cost before its first ``await`` (see :class:`~crf_prime.teachers.pool.LedgerLike`)."""

    def __init__(
        self, journal_path: str | Path, budget: BudgetConfig = BudgetConfig(), options: PoolOptions = PoolOptions()
    ) -> None:
        """The caps are ``budget``'s; what a resumed run asks again is ``options``' (``retry_failed``,
        ``resend_lost``)."""
        self.journal_path = Path(journal_path)
        self.budget = budget
        self.retry_failed = options.retry_failed
        self.resend_lost = options.resend_lost
        self.spent = 0.0
        self.trace_spent: dict[str, float] = defaultdict(float)
        self._rows: dict[Key, JournalRecord] = {}
        self._answers: dict[str, JournalRecord] = {}
        self._inflight: dict[str, asyncio.Future[JournalRecord]] = {}
        self._held: dict[str, Ask] = {}
        self._sent: set[str] = set()
        self._changed: asyncio.Event | None = None
        self._stop: tuple[str, str] | None = None
        self.previous_records = 0
        self.lost: list[JournalRecord] = []
        """Calls found possibly paid with their answer lost (a previous run died while they were at the provider)."""
        self.unsent = 0
        """Calls a previous run admitted but never put on the wire: they are simply asked again."""
        self.shared_calls = 0
        self.shared_usd = 0.0
        self._unknown: dict[str, Unknown] = {}
        """Calls booked at their reservation, by generation id (or a local id when there is none)."""
        self._ids = itertools.count()
        self._rekey: dict[str, tuple[Intent, str]] = {}
        """Questions lost in a crash whose requests carried an idempotency key: (its intent row, its unknown's id);
        re-sent with that key when next asked."""
        self._rekeyed: dict[str, tuple[Intent, str]] = {}
        """Those of them admitted again in this run, until answered."""
        self.waiting = 0
        """Admissions waiting for the answer to a question in flight (single flight: they will share it)."""
        self.rekeyed = 0
        """Calls lost in a previous crash that are re-sent with their idempotency key (no second charge)."""
        self.resolved = 0
        """Calls whose unknown cost the provider has reported since (generation lookups, this run and earlier)."""
        self.boot = boot_id()
        """This machine's boot: a "sent" row is written unsynced when there is one (see :mod:`..journal`)."""
        self._load()
        self._journal = Journal(self.journal_path)
        self._intents = IntentLog(intents_path(self.journal_path))
        self._intents.append_line(self._event(None, "open"))
        self._sync = GroupCommit(self._intents, self._journal)
        self._book_lost()

    # -- startup ------------------------------------------------------------------------------------------------
    def _load(self) -> None:
        resolved: Counter[str] = Counter()
        for rec in read_journal(self.journal_path):
            self.previous_records += 1
            if not rec.shared_from:
                resolved[_call_key(rec.question, rec.state_id, rec.teacher)] += 1
            self._book(rec)
        asked: Counter[str] = Counter()
        last: dict[str, tuple[Intent, CallEvent, bool]] = {}
        boot: str | None = None  # the boot of the rows being read; None: "sent" rows were synced (no open row)
        for it in read_intents(intents_path(self.journal_path)):
            if it.event == "open":
                boot = it.boot_id
                continue
            if it.event == "charge":
                self._apply_charge(it.generation_id, it.cost_usd)
                continue
            k = _call_key(it.question, it.state_id, it.teacher)
            # the row's "sent" mark may be missing only when it was not synced and the machine has restarted since
            unsure = boot is not None and boot != self.boot
            if it.event == "intent":
                asked[k] += 1
                last[k] = (it, "intent", unsure)
            elif k in last:
                last[k] = (last[k][0], "intent" if it.event == "clear" else "sent", unsure)
        self._unresolved = [last[k] for k, n in asked.items() if n > resolved[k]]

    def _book_lost(self) -> None:
        for intent, event, unsure in self._unresolved:
            if (intent.state_id, intent.teacher) in self._rows or (intent.question in self._answers):
                continue
            if event != "sent" and not unsure:  # no request of it ever reached the provider: ask again
                self.unsent += 1
                continue
            if intent.key:  # re-sent with its key: the provider answers it without a second charge
                uid = self._add_unknown(
                    Unknown(intent.state_id, intent.teacher, intent.trace_id, intent.question, intent.reserve_usd)
                )
                self._rekey[intent.question] = (intent, uid)
                self.rekeyed += 1
                continue
            self._book_lost_row(intent, event == "sent")

    def _book_lost_row(self, intent: Intent, sent: bool) -> JournalRecord:
        """Journal (and book at its reservation) a call that may have been paid and whose answer is lost."""
        why = (
            "the request was at the provider when a previous run died"
            if sent
            else "the machine restarted while the call was admitted, and its unsynced 'sent' mark may be lost"
        )
        rec = JournalRecord(
            state_id=intent.state_id,
            teacher=intent.teacher,
            model="",
            model_family="",
            ok=False,
            action=None,
            error=f"possibly paid, answer lost: {why}; booked at its reservation and not re-sent (resend with "
            "--pool.resend-lost)",
            error_type="lost",
            input_tokens=0,
            output_tokens=0,
            cost_usd=intent.reserve_usd,
            cost_source="reservation",
            latency_s=0.0,
            attempt=1,
            ts=time.time(),
            trace_id=intent.trace_id,
            question=intent.question,
            reserved_usd=intent.reserve_usd,
            possibly_paid=True,
        )
        self._journal.append(rec)
        self._book(rec)
        self.lost.append(rec)
        return rec

    def _book(self, rec: JournalRecord) -> None:
        self._charge(rec)
        self._settle(rec)

    def _charge(self, rec: JournalRecord) -> None:
        """Count a call's cost towards the caps (at once: also before its journal row is durable); a cost booked at
        the reservation is unresolved until the provider says."""
        self.spent += rec.cost_usd
        if rec.trace_id:
            self.trace_spent[rec.trace_id] += rec.cost_usd
        if rec.cost_source == "reservation":
            u = Unknown(rec.state_id, rec.teacher, rec.trace_id, rec.question, rec.cost_usd, rec.generation_id)
            self._unknown[rec.generation_id or f"#{next(self._ids)}"] = u

    def _add_unknown(self, u: Unknown) -> str:
        """Book a call with no row at its reservation, unresolved; returns its id."""
        uid = f"#{next(self._ids)}"
        self._unknown[uid] = u
        self.spent += u.reserve_usd
        if u.trace_id:
            self.trace_spent[u.trace_id] += u.reserve_usd
        return uid

    def _apply_charge(self, uid: str, cost: float) -> Unknown | None:
        """Replace an unresolved call's reservation by what it cost."""
        u = self._unknown.pop(uid, None)
        if u is None:
            return None
        self.spent += cost - u.reserve_usd
        if u.trace_id:
            self.trace_spent[u.trace_id] += cost - u.reserve_usd
        self.resolved += 1
        return u

    @property
    def unresolved_usd(self) -> float:
        """Worst case of the calls whose cost is unknown (summed afresh: a handful of calls)."""
        return sum(u.reserve_usd for u in self._unknown.values())

    @property
    def known_usd(self) -> float:
        """What the provider has charged, as far as it has said: ``spent`` less the unresolved worst cases."""
        return self.spent - self.unresolved_usd

    def _final(self, rec: JournalRecord) -> bool:
        """An answer that is not asked again: ok, or a failure that must not be retried (or may have been paid)."""
        maybe_paid = rec.possibly_paid or rec.error_type == "lost"  # "lost" rows of journals before possibly_paid
        return rec.ok or not self.retry_failed or (maybe_paid and not self.resend_lost)

    def _settle(self, rec: JournalRecord) -> None:
        """Make a durable answer the final one of its (state, teacher) and of its question."""
        if self._final(rec):
            self._rows[rec.key] = rec
            if rec.question:
                self._answers.setdefault(rec.question, rec)

    # -- caps ---------------------------------------------------------------------------------------------------
    def _reserved(self, trace_id: str | None = None) -> float:
        # summed afresh (a handful of calls in flight) rather than kept as a running float that drifts
        return sum(a.reserve_usd for a in self._held.values() if trace_id is None or a.trace_id == trace_id)

    def _fit(self, ask: Ask) -> Admission | Literal["wait"] | None:
        """None: send now; "wait": fits once calls in flight are settled; an Admission: refused."""
        if self._stop is not None:
            return Admission("job_budget", message=self.stop_message())
        b, r = self.budget, ask.reserve_usd
        if b.job_usd is not None:
            if self.spent + r > b.job_usd:
                self._stop = ("job", f"the next call's worst case ({_usd(r)}, teacher {ask.teacher}) does not fit")
                return Admission("job_budget", message=self.stop_message())
            if self.spent + self._reserved() + r > b.job_usd:
                return "wait"
        if b.per_trace_usd is not None and ask.trace_id:
            spent = self.trace_spent[ask.trace_id]
            if spent + r > b.per_trace_usd:
                return Admission(
                    "trace_budget",
                    message=f"trace {ask.trace_id}: spent {_usd(spent)} of {_usd(b.per_trace_usd)}; the next call's "
                    f"worst case ({_usd(r)}) does not fit",
                )
            if spent + self._reserved(ask.trace_id) + r > b.per_trace_usd:
                return "wait"
        return None

    def stop_message(self) -> str:
        """Why the job stopped, with the spend as of now (the final spend once the calls in flight are done)."""
        if self._stop is None:
            return ""
        kind, why = self._stop
        reserved = self._reserved()
        pending = f" ({_usd(reserved)} still reserved by calls in flight)" if reserved else ""
        if self._unknown:  # after the first "; ": the figure before it is what the cap counts
            pending += (
                f"; of that, known charges {_usd(self.known_usd)} and unresolved, worst case "
                f"{_usd(self.unresolved_usd)} ({len(self._unknown)} call{'' if len(self._unknown) == 1 else 's'} "
                "whose cost the provider has not reported)"
            )
        if kind == "price":
            return (
                f"price table below the bill: {why}; spent {_usd(self.spent)}{pending}. Nothing new was sent: fix "
                f"the teacher's price_in_per_mtok / price_out_per_mtok and rerun to resume."
            )
        cap = self.budget.job_usd
        return (
            f"job budget reached: spent {_usd(self.spent)} of {_usd(cap or 0.0)}{pending}; {why}. In-flight calls "
            f"finished and nothing new was sent. The journal {self.journal_path} is complete up to here: rerun the "
            f"same command with a higher --budget.job-usd to resume."
        )

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def _wait_for_change(self) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        await self._changed.wait()

    # -- the operations -----------------------------------------------------------------------------------------
    async def admit(self, ask: Ask, *, sent: bool = False) -> Admission:
        """May this call be sent now? On "send" the caller must ``commit`` (or ``release``) it.

        ``sent=True``: the caller cannot report when the request reaches the wire (the Ray backend), so the call
        counts as sent from its admission on (a crash books it at its reservation).
        """
        row_key = (ask.state_id, ask.teacher)
        while True:
            row = self._rows.get(row_key)
            if row is not None:
                return Admission("done", record=row)
            answer = self._answers.get(ask.question) if ask.question else None
            if answer is not None:
                return await self._share(ask, answer)
            pending = self._inflight.get(ask.question)
            if pending is not None:  # someone is asking the same question: wait for their answer
                self.waiting += 1
                try:
                    with contextlib.suppress(Exception):  # a failed attempt: the loop decides whether to ask again
                        await asyncio.shield(pending)
                finally:
                    self.waiting -= 1
                continue
            rekey = self._rekey.get(ask.question)
            if rekey is not None and not ask.idempotent:  # its key can no longer be sent: lost, as without one
                del self._rekey[ask.question]
                self._forget_unknown(rekey[1])
                self._book_lost_row(rekey[0], True)
                continue
            fit = self._fit(ask)
            if fit == "wait":
                await self._wait_for_change()
                continue
            if fit is not None:
                return fit
            break
        key = ""
        if ask.idempotent:
            rekey = self._rekey.pop(ask.question, None)
            if rekey is not None:
                self._rekeyed[ask.question] = rekey
            key = rekey[0].key if rekey is not None else uuid.uuid4().hex
        self._inflight[ask.question] = asyncio.get_running_loop().create_future()
        self._held[ask.question] = ask
        intent = self._event(ask, "intent", key=key)
        try:
            if sent:
                self._sent.add(ask.question)
                self._sync.post(intent, self._intents)
                await self._sync.append(self._event(ask, "sent"), self._intents)
            elif self.boot is not None:  # the "sent" row will not be synced: this row is what a power loss keeps
                await self._sync.append(intent, self._intents)
            else:  # alone it proves nothing was sent: it goes out with the "sent" row's sync
                self._sync.post(intent, self._intents)
        except BaseException:  # cancelled, or the log failed: the caller never sends it
            if ask.question in self._sent:  # queued after its "sent" row, in order
                self._sync.post(self._event(ask, "clear"), self._intents)
            self._drop(ask, "admission cancelled")
            raise
        return Admission("send", key=key)

    async def _share(self, ask: Ask, answer: JournalRecord) -> Admission:
        row = answer.model_copy(
            update={
                "state_id": ask.state_id,
                "teacher": ask.teacher,
                "trace_id": ask.trace_id,
                "cost_usd": 0.0,
                "cost_source": "",
                "reserved_usd": 0.0,
                "possibly_paid": False,
                "latency_s": 0.0,
                "shared_from": answer.shared_from or answer.state_id,
                "ts": time.time(),
            }
        )
        self._rows[row.key] = row
        self.shared_calls += 1
        self.shared_usd += answer.cost_usd
        await self._sync.append(Journal.line(row), self._journal)
        return Admission("shared", record=row, saved_usd=answer.cost_usd)

    def _event(self, ask: Ask | None, event: CallEvent, *, key: str = "") -> bytes:
        """One call-log row (an :class:`Intent`), serialised directly: it is on every call's path. ``ask`` None:
        the ``open`` row."""
        if ask is None:
            return json.dumps({"ts": time.time(), "event": event, "boot_id": self.boot}).encode()
        row: dict = {
            "state_id": ask.state_id,
            "teacher": ask.teacher,
            "trace_id": ask.trace_id,
            "ts": time.time(),
            "question": ask.question,
            "reserve_usd": ask.reserve_usd,
            "event": event,
        }
        if key:
            row["key"] = key
        return json.dumps(row).encode()

    async def mark_sent(self, question: str) -> None:
        """The request is about to be written: record that first, so that a crash books it as possibly paid. The
        row is handed to the OS at once (kept if the process is killed; a new boot books unanswered calls anyway);
        synced first on an OS without boot ids."""
        ask = self._held.get(question)
        if ask is None or question in self._sent:
            return
        self._sent.add(question)
        if self.boot is not None:  # after the awaited intent row: in order
            self._sync.write_now(self._event(ask, "sent"), self._intents)
        else:
            await self._sync.append(self._event(ask, "sent"), self._intents)

    async def mark_refused(self, question: str) -> None:
        """The attempt ended with an HTTP error status: the provider did not take it, nothing is owed for it."""
        ask = self._held.get(question)
        if ask is None or question not in self._sent:
            return
        self._sent.discard(question)
        # after the awaited "sent" row, so in order; written at once so that a kill -9 keeps it (not synced: a lost
        # "clear" only makes a crash book the call at its reservation, on the safe side)
        self._sync.write_now(self._event(ask, "clear"), self._intents)

    async def commit(self, ask: Ask, record: JournalRecord) -> JournalRecord:
        """Replace the call's reservation by its cost, then write its row; returns the row once it is durable.

        The cost is settled before the first ``await``: a caller that frees the teacher's slot right before calling
        ``commit`` lets the next call be admitted only against a spend that already includes this one. A cost the
        provider did not report for a request that reached it is booked at the reservation (possibly paid).
        """
        held = self._held.pop(ask.question, ask)
        self._sent.discard(ask.question)
        rekeyed = self._rekeyed.pop(ask.question, None)
        if rekeyed is not None:  # a call lost in a crash, asked again with its key
            if record.cost_source or record.possibly_paid:  # its row books the key's one charge (or worst case)
                self._forget_unknown(rekeyed[1])
            else:  # refused: the first request may still have been charged; its key is sent again next time
                self._rekey[ask.question] = rekeyed
        update: dict = {"question": ask.question, "reserved_usd": held.reserve_usd, "trace_id": ask.trace_id}
        if record.possibly_paid and record.cost_source != "usage":
            update.update(cost_usd=max(record.cost_usd, held.reserve_usd), cost_source="reservation")
        record = record.model_copy(update=update)
        self._charge(record)
        if self.budget.capped and record.cost_usd > held.reserve_usd and self._stop is None:
            self._stop = (
                "price",
                f"teacher {record.teacher} billed {_usd(record.cost_usd)} for a call whose worst case at its prices "
                f"was {_usd(held.reserve_usd)}",
            )
        self._wake()
        # a failed write raises out of the job (an infrastructure error); the question stays in flight so that
        # nobody waiting on it re-sends a call that was paid for
        await self._sync.append(Journal.line(record), self._journal)
        self._settle(record)
        fut = self._inflight.pop(ask.question, None)
        if fut is not None and not fut.done():
            if self._final(record):
                fut.set_result(record)
            else:
                fut.set_exception(RuntimeError(record.error))
                fut.exception()  # mark retrieved
        return record

    async def release(self, ask: Ask) -> None:
        """Give up an admitted call without an answer (cancelled, or an error outside the API). A call that may have
        reached the provider stays booked at its reservation (in memory: the call log books it on resume); one that
        never did is simply forgotten. Whoever waits for its question asks again."""
        held = self._held.get(ask.question)
        if held is not None and ask.question in self._sent and ask.question not in self._rekeyed:
            self._add_unknown(Unknown(held.state_id, held.teacher, held.trace_id, held.question, held.reserve_usd))
        self._drop(ask, "released")

    def _forget_unknown(self, uid: str) -> None:
        """Unbook an unresolved call that has no row (it is booked again otherwise)."""
        u = self._unknown.pop(uid, None)
        if u is not None:
            self.spent -= u.reserve_usd
            if u.trace_id:
                self.trace_spent[u.trace_id] -= u.reserve_usd

    async def resolve(self, generation_id: str, cost_usd: float, via: str = "generation") -> bool:
        """Book what the provider reports an unresolved call cost (its ``generation_id`` from the answer); the
        ``charge`` row is durable when this returns. False when no unresolved call has that id."""
        u = self._apply_charge(generation_id, cost_usd)
        if u is None:
            return False
        if self.budget.capped and cost_usd > u.reserve_usd and self._stop is None:
            self._stop = (
                "price",
                f"teacher {u.teacher} billed {_usd(cost_usd)} for a call whose worst case at its prices was "
                f"{_usd(u.reserve_usd)}",
            )
        self._wake()
        ask = Ask(u.state_id, u.teacher, u.question, u.reserve_usd, u.trace_id)
        row = json.loads(self._event(ask, "charge"))
        row.update(cost_usd=cost_usd, via=via, generation_id=generation_id)
        await self._sync.append(json.dumps(row).encode(), self._intents)
        return True

    async def lookups(self) -> list[tuple[str, str]]:
        """(teacher, generation id) of every unresolved call whose answer named its generation."""
        return [(u.teacher, uid) for uid, u in self._unknown.items() if u.generation_id]

    def _drop(self, ask: Ask, why: str) -> None:
        """Forget an admitted call that has no answer: its reservation is freed, whoever waits for its question
        asks again."""
        self._held.pop(ask.question, None)
        rekeyed = self._rekeyed.pop(ask.question, None)
        if rekeyed is not None:
            self._rekey[ask.question] = rekeyed
        self._sent.discard(ask.question)
        self._wake()
        fut = self._inflight.pop(ask.question, None)
        if fut is not None and not fut.done():
            fut.set_exception(RuntimeError(why))
            fut.exception()

    async def snapshot(self) -> dict:
        unknown = list(self._unknown.values())
        return {
            "spent": self.spent,
            "known_usd": self.known_usd,
            "unresolved": len(unknown),
            "unresolved_usd": sum(u.reserve_usd for u in unknown),
            "unresolved_calls": [f"{u.state_id}/{u.teacher}" for u in unknown],
            "resolved": self.resolved,
            "rekeyed": self.rekeyed,
            "reserved": self._reserved(),
            "stopped": self.stop_message(),
            "lost": len(self.lost),
            "lost_usd": sum(r.cost_usd for r in self.lost),
            "lost_calls": [f"{r.state_id}/{r.teacher}" for r in self.lost],
            "unsent": self.unsent,
            "shared_calls": self.shared_calls,
            "shared_usd": self.shared_usd,
            "previous_records": self.previous_records,
            "inflight": len(self._inflight),
            "waiting": self.waiting,
        }

    def close(self) -> None:
        self._journal.close()
        self._intents.close()
