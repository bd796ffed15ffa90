"""Budget and journal bookkeeping shared by every call of a job: what was paid for, what may still be sent.

The ledger is the single writer of the journal and the intent log. ``admit`` decides, before anything leaves the
machine, whether a (state, teacher) call may be sent: not when the journal already holds its answer, not when the
job or the trace has reached its spend cap (then in-flight calls finish and nothing new is sent), and not twice at
the same time (a second asker awaits the first answer). ``commit`` writes the answer and books its cost. Spend can
therefore exceed a cap only by the cost of calls admitted before the cap was reached, i.e. those in flight.
In live mode the same class runs inside a named detached Ray actor so that several processes share it.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from crf_prime.teachers.config import BudgetConfig
from crf_prime.teachers.journal import (
    GroupCommit,
    Intent,
    IntentLog,
    Journal,
    JournalRecord,
    Key,
    intents_path,
    read_intents,
    read_journal,
)

Verdict = Literal["send", "done", "job_budget", "trace_budget"]


@dataclass(frozen=True)
class Admission:
    verdict: Verdict
    record: JournalRecord | None = None
    """The journal's answer when ``verdict == "done"``."""
    message: str = ""


class Ledger:
    """Journal + intent log + spend caps for one job. All methods are coroutines (also inside a Ray actor)."""

    charges_before_await = True
    """``commit`` counts the cost before its first ``await`` (see :class:`~crf_prime.teachers.pool.LedgerLike`)."""

    def __init__(
        self,
        journal_path: str | Path,
        budget: BudgetConfig = BudgetConfig(),
        *,
        retry_failed: bool = True,
        resend_lost: bool = False,
    ) -> None:
        self.journal_path = Path(journal_path)
        self.budget = budget
        self.retry_failed = retry_failed
        self.resend_lost = resend_lost
        self.spent = 0.0
        self.trace_spent: dict[str, float] = defaultdict(float)
        self._final: dict[Key, JournalRecord] = {}
        self._inflight: dict[Key, asyncio.Future[JournalRecord]] = {}
        self.stopped: str = ""
        self.previous_records = 0
        self.lost: list[Key] = []
        self._load()
        self._journal = Journal(self.journal_path)
        self._intents = IntentLog(intents_path(self.journal_path))
        self._sync = GroupCommit(self._intents, self._journal)
        self._mark_lost()

    # -- startup ------------------------------------------------------------------------------------------------
    def _load(self) -> None:
        records: Counter[Key] = Counter()
        for rec in read_journal(self.journal_path):
            records[rec.key] += 1
            self.previous_records += 1
            self._book(rec)
        intents: Counter[Key] = Counter()
        trace_of: dict[Key, str] = {}
        for it in read_intents(intents_path(self.journal_path)):
            intents[(it.state_id, it.teacher)] += 1
            trace_of[(it.state_id, it.teacher)] = it.trace_id
        # an intent without a matching journal row: sent, maybe billed, answer lost (the previous run died)
        self._lost_candidates = [(k, trace_of[k]) for k, n in intents.items() if n > records[k]]

    def _mark_lost(self) -> None:
        for key, trace_id in self._lost_candidates:
            if key in self._final:
                continue
            self.lost.append(key)
            if self.resend_lost:
                continue
            rec = JournalRecord(
                state_id=key[0],
                teacher=key[1],
                model="",
                model_family="",
                ok=False,
                action=None,
                error="in flight when a previous run died; not re-sent because it may have been billed "
                "(resend with --resend-lost)",
                error_type="lost",
                input_tokens=0,
                output_tokens=0,
                cost_usd=0.0,
                latency_s=0.0,
                attempt=1,
                ts=time.time(),
                trace_id=trace_id,
            )
            self._journal.append(rec)
            self._book(rec)

    def _book(self, rec: JournalRecord) -> None:
        self._charge(rec)
        self._settle(rec)

    def _charge(self, rec: JournalRecord) -> None:
        """Count a call's cost towards the caps (at once: also before its journal row is durable)."""
        self.spent += rec.cost_usd
        if rec.trace_id:
            self.trace_spent[rec.trace_id] += rec.cost_usd

    def _settle(self, rec: JournalRecord) -> None:
        """Make a durable answer the key's final one (what ``admit`` hands out as "done")."""
        final = rec.ok or not self.retry_failed or (rec.error_type == "lost" and not self.resend_lost)
        if final:
            self._final[rec.key] = rec

    # -- the two operations -------------------------------------------------------------------------------------
    def _cap_verdict(self, trace_id: str) -> Admission | None:
        b = self.budget
        if b.job_usd is not None and self.spent >= b.job_usd:
            self.stopped = (
                f"job budget reached: spent ${self.spent:.4f} of ${b.job_usd:.4f}; in-flight calls finished and "
                f"nothing new was sent. The journal {self.journal_path} is complete up to here: rerun the same "
                f"command with a higher --budget-usd to resume."
            )
            return Admission("job_budget", message=self.stopped)
        if b.per_trace_usd is not None and trace_id and self.trace_spent[trace_id] >= b.per_trace_usd:
            return Admission(
                "trace_budget",
                message=f"trace {trace_id}: spent ${self.trace_spent[trace_id]:.4f} of ${b.per_trace_usd:.4f}",
            )
        return None

    async def admit(self, state_id: str, teacher: str, trace_id: str = "") -> Admission:
        """May this call be sent now? On "send" the intent is durable and the caller must ``commit`` the answer."""
        key = (state_id, teacher)
        while True:
            if key in self._final:
                return Admission("done", record=self._final[key])
            pending = self._inflight.get(key)
            if pending is None:
                break
            try:  # someone else is asking the same thing: share their answer
                return Admission("done", record=await asyncio.shield(pending))
            except Exception:
                continue
        capped = self._cap_verdict(trace_id)
        if capped is not None:
            return capped
        self._inflight[key] = asyncio.get_running_loop().create_future()
        await self._sync.append(
            IntentLog.line(Intent(state_id=state_id, teacher=teacher, trace_id=trace_id, ts=time.time())),
            self._intents,
        )
        return Admission("send")

    async def commit(self, record: JournalRecord) -> None:
        """Book an answer's (or failure's) cost, then write it to the journal; returns once the row is durable.

        The cost counts before the first ``await``: a caller that frees the teacher's slot right before calling
        ``commit`` lets the next call be admitted only against a spend that already includes this one, so the
        journal fsync need not hold the slot. The answer is handed to other askers only once it is durable.
        """
        self._charge(record)
        # a failed write raises out of the job (an infrastructure error); the key stays in flight so that nobody
        # waiting on it re-sends a call that was paid for
        await self._sync.append(Journal.line(record), self._journal)
        self._settle(record)
        fut = self._inflight.pop(record.key, None)
        if fut is not None and not fut.done():
            if record.key in self._final:
                fut.set_result(record)
            else:
                fut.set_exception(RuntimeError(record.error))
                fut.exception()  # mark retrieved

    async def release(self, state_id: str, teacher: str) -> None:
        """Forget an admitted call that was never sent (e.g. cancelled before the request left)."""
        fut = self._inflight.pop((state_id, teacher), None)
        if fut is not None and not fut.done():
            fut.set_exception(RuntimeError("released"))
            fut.exception()

    async def snapshot(self) -> dict:
        return {
            "spent": self.spent,
            "stopped": self.stopped,
            "lost": len(self.lost),
            "previous_records": self.previous_records,
            "inflight": len(self._inflight),
        }

    def close(self) -> None:
        self._journal.close()
        self._intents.close()
