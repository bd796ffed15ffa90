"""Cost/latency report of a replay: the prototype's cost-feasibility table, reproduced for any pool.

The prototype of channel 3 measured $0.98 per 100-step trace and 20.5 s p95 latency per step with three teachers
called one after another; the report shows the same quantities for this run ($/trace, $/state, $ per 100 steps,
p50/p95 step latency, concurrent and as-if-sequential) plus per-teacher latency, errors, same-family exclusions
and the saving of tiered querying.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, ConfigDict
from rich.console import Console
from rich.table import Table

from crf_prime.records.journal import JournalRecord
from crf_prime.teachers.pool import StateOutcome

if TYPE_CHECKING:
    from rich.console import Console


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100: numpy's ``inverted_cdf``, always an observed value); None for none."""
    return float(np.percentile(values, q, method="inverted_cdf")) if values else None


class TeacherStats(BaseModel):
    model_config = ConfigDict(frozen=True)

    teacher: str
    calls: int
    """Calls sent in this run."""
    from_journal: int
    """Answers reused from the journal (not re-sent)."""
    ok: int
    errors: dict[str, int]
    """Failed calls of this run by error class."""
    cost_usd: float
    """Spend of this run's calls."""
    p50_latency_s: float | None
    p95_latency_s: float | None
    excluded_same_family: int
    """States where the teacher was excluded because it shares the trace's model family."""
    skipped_by_tier: int


class ReplayReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    backend: str
    states: int
    """States handled in this run (answers fresh or from the journal)."""
    traces: int
    calls_sent: int
    calls_from_journal: int
    lost_in_previous_crash: int
    """Calls possibly paid with their answer lost (at the provider when a previous run died): booked at their
    reservation, not re-sent unless ``--pool.resend-lost``."""
    lost_usd: float
    """What those calls are booked at (their reservations)."""
    lost_calls: tuple[str, ...]
    """``state_id/teacher`` of each of them."""
    unsent_in_previous_crash: int
    """Calls a previous run admitted but never put on the wire: asked again, nothing booked."""
    shared_calls: int
    """Answers taken from another state that asked the same question (same model, messages, tools, sampling)."""
    shared_saved_usd: float
    """What those answers cost when they were paid for: the money content addressing saved."""
    possibly_paid_calls: int
    """Calls of this run that reached the provider without a known cost (timeouts, cut responses, dead actors):
    booked at their reservation."""
    cost_run_usd: float
    """Spend of the calls sent in this run."""
    cost_states_usd: float
    """Spend of every answer at these states, earlier runs included."""
    cost_journal_usd: float
    """Everything the job's journal has booked (what the job budget is checked against): the known charges plus
    the unresolved calls' worst cases."""
    known_usd: float = 0.0
    """What the job has cost, as far as the providers have said: every charge reported (``usage.cost``, a later
    generation lookup) or priced from reported tokens. The unresolved calls are not in it."""
    unresolved_calls: int = 0
    """Calls whose cost is unknown (they reached the provider and no cost came back, or were lost in a crash): each
    booked at its reservation against the caps until the provider says."""
    unresolved_usd: float = 0.0
    """The unresolved calls' worst case (their reservations): counted against the caps, not in ``known_usd``."""
    unresolved_list: tuple[str, ...] = ()
    """``state_id/teacher`` of each unresolved call."""
    resolved_calls: int = 0
    """Calls whose unknown cost a provider reported later (its generation lookup), in this run or an earlier one."""
    rekeyed_calls: int = 0
    """Calls lost in a previous crash that were re-sent with their idempotency key (answered without a second
    charge)."""
    usd_per_state: float | None
    usd_per_trace: float | None
    usd_per_100_steps: float | None
    p50_step_s: float | None
    p95_step_s: float | None
    p95_step_s_sequential: float | None
    """p95 of the per-state sum of call latencies: the latency of calling the teachers one after another."""
    wall_s: float
    teachers: tuple[TeacherStats, ...]
    excluded_same_family: int
    """Calls not made because of same-family exclusion (summed over states)."""
    tiered: bool
    tier_skipped_calls: int
    tier_saved_usd: float
    tier_saving_fraction: float | None
    """Estimated saving / estimated cost of asking every eligible teacher at every state."""
    budget_stopped: str
    budget_skipped_calls: int
    agreement_source: str


def build_report(
    outcomes: Sequence[StateOutcome],
    *,
    backend: str,
    wall_s: float,
    tiered: bool,
    ledger_snapshot: dict,
    stopped: str,
    agreement_source: str,
) -> ReplayReport:
    per_teacher: dict[str, list[JournalRecord]] = defaultdict(list)
    reused: Counter[str] = Counter()
    excluded: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    all_records: list[JournalRecord] = []
    sent: list[JournalRecord] = []
    for o in outcomes:
        for t in o.excluded:
            excluded[t] += 1
        for t in o.skipped_by_tier:
            skipped[t] += 1
        all_records.extend(o.records)
        sent.extend(o.sent)
        fresh = {id(r) for r in o.sent} | {id(r) for r in o.shared}
        for r in o.records:
            if id(r) not in fresh:
                reused[r.teacher] += 1
    for r in sent:
        per_teacher[r.teacher].append(r)
    names = sorted({*per_teacher, *reused, *excluded, *skipped})
    stats = []
    for name in names:
        recs = per_teacher.get(name, [])
        lat = [r.latency_s for r in recs]
        stats.append(
            TeacherStats(
                teacher=name,
                calls=len(recs),
                from_journal=reused[name],
                ok=sum(r.ok for r in recs),
                errors=dict(Counter(r.error_type or "error" for r in recs if not r.ok)),
                cost_usd=sum(r.cost_usd for r in recs),
                p50_latency_s=percentile(lat, 50),
                p95_latency_s=percentile(lat, 95),
                excluded_same_family=excluded[name],
                skipped_by_tier=skipped[name],
            )
        )
    answered = [o for o in outcomes if o.records]
    cost_states = sum(r.cost_usd for r in all_records)
    traces = {o.trace_id or o.state_id for o in answered}
    steps = [o.step_latency_s for o in outcomes if o.step_latency_s is not None]
    seq = [o.sequential_latency_s for o in outcomes if o.sequential_latency_s is not None]
    saved = sum(o.saved_usd for o in outcomes)
    tier_skipped = sum(len(o.skipped_by_tier) for o in outcomes)
    per_state = cost_states / len(answered) if answered else None
    return ReplayReport(
        backend=backend,
        states=len(answered),
        traces=len(traces),
        calls_sent=len(sent),
        calls_from_journal=sum(reused.values()),
        lost_in_previous_crash=int(ledger_snapshot.get("lost", 0)),
        lost_usd=float(ledger_snapshot.get("lost_usd", 0.0)),
        lost_calls=tuple(ledger_snapshot.get("lost_calls", ())),
        unsent_in_previous_crash=int(ledger_snapshot.get("unsent", 0)),
        shared_calls=sum(len(o.shared) for o in outcomes),
        shared_saved_usd=sum(o.shared_saved_usd for o in outcomes),
        possibly_paid_calls=sum(r.possibly_paid for r in sent),
        cost_run_usd=sum(r.cost_usd for r in sent),
        cost_states_usd=cost_states,
        cost_journal_usd=float(ledger_snapshot.get("spent", 0.0)),
        known_usd=float(ledger_snapshot.get("known_usd", ledger_snapshot.get("spent", 0.0))),
        unresolved_calls=int(ledger_snapshot.get("unresolved", 0)),
        unresolved_usd=float(ledger_snapshot.get("unresolved_usd", 0.0)),
        unresolved_list=tuple(ledger_snapshot.get("unresolved_calls", ())),
        resolved_calls=int(ledger_snapshot.get("resolved", 0)),
        rekeyed_calls=int(ledger_snapshot.get("rekeyed", 0)),
        usd_per_state=per_state,
        usd_per_trace=cost_states / len(traces) if traces else None,
        usd_per_100_steps=None if per_state is None else 100 * per_state,
        p50_step_s=percentile(steps, 50),
        p95_step_s=percentile(steps, 95),
        p95_step_s_sequential=percentile(seq, 95),
        wall_s=wall_s,
        teachers=tuple(stats),
        excluded_same_family=sum(excluded.values()),
        tiered=tiered,
        tier_skipped_calls=tier_skipped,
        tier_saved_usd=saved,
        tier_saving_fraction=saved / (cost_states + saved) if (cost_states + saved) > 0 else None,
        budget_stopped=stopped,
        budget_skipped_calls=sum(len(o.budget_skipped) for o in outcomes),
        agreement_source=agreement_source,
    )


def _fmt_usd(v: float | None) -> str:
    return "-" if v is None else f"${v:.4f}"


def _fmt_s(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}s"


def render(report: ReplayReport, console: Console | None = None) -> None:
    """Print the report as rich tables."""

    con = console if console is not None else Console()
    t = Table(title=f"teacher replay ({report.backend}) - cost and latency", show_lines=False)
    t.add_column("teacher")
    for col in ("calls", "reused", "ok", "errors", "cost", "p50", "p95", "excl. family", "tier-skipped"):
        t.add_column(col, justify="right")
    for s in report.teachers:
        errs = ", ".join(f"{k}={v}" for k, v in sorted(s.errors.items())) or "0"
        t.add_row(
            s.teacher,
            str(s.calls),
            str(s.from_journal),
            str(s.ok),
            errs,
            _fmt_usd(s.cost_usd),
            _fmt_s(s.p50_latency_s),
            _fmt_s(s.p95_latency_s),
            str(s.excluded_same_family),
            str(s.skipped_by_tier),
        )
    con.print(t)
    feasibility = Table(
        title="cost feasibility (prototype: $0.98 / 100-step trace, 20.5 s p95 per step, 3 teachers sequential)"
    )
    feasibility.add_column("metric")
    feasibility.add_column("this run", justify="right")
    rows = [
        ("states / traces", f"{report.states} / {report.traces}"),
        ("calls sent / reused from journal", f"{report.calls_sent} / {report.calls_from_journal}"),
        (
            "same question at another state: calls / $ saved",
            f"{report.shared_calls} / {_fmt_usd(report.shared_saved_usd)}",
        ),
        (
            "spend this run / at these states / journal",
            f"{_fmt_usd(report.cost_run_usd)} / "
            f"{_fmt_usd(report.cost_states_usd)} / {_fmt_usd(report.cost_journal_usd)}",
        ),
        ("job spend: known charges", _fmt_usd(report.known_usd)),
        (
            "unresolved, worst case (cost not reported; counted against the caps)",
            f"{report.unresolved_calls} / {_fmt_usd(report.unresolved_usd)}"
            + (f": {', '.join(report.unresolved_list[:8])}" if report.unresolved_list else "")
            + (" ..." if len(report.unresolved_list) > 8 else ""),
        ),
        ("$ per state", _fmt_usd(report.usd_per_state)),
        ("$ per trace", _fmt_usd(report.usd_per_trace)),
        ("$ per 100 steps", _fmt_usd(report.usd_per_100_steps)),
        ("p50 / p95 latency per step (concurrent)", f"{_fmt_s(report.p50_step_s)} / {_fmt_s(report.p95_step_s)}"),
        ("p95 latency per step if sequential", _fmt_s(report.p95_step_s_sequential)),
        ("same-family exclusions (calls not made)", str(report.excluded_same_family)),
        ("wall time", _fmt_s(report.wall_s)),
    ]
    if report.tiered:
        frac = "-" if report.tier_saving_fraction is None else f"{100 * report.tier_saving_fraction:.1f}%"
        rows.append(
            (
                "tiered: calls skipped / est. saving",
                f"{report.tier_skipped_calls} / {_fmt_usd(report.tier_saved_usd)} ({frac})",
            )
        )
    if report.lost_in_previous_crash:
        rows.append(
            (
                "possibly paid, answer lost (previous crash; booked at reservation)",
                f"{report.lost_in_previous_crash} / {_fmt_usd(report.lost_usd)}: {', '.join(report.lost_calls[:8])}"
                + (" ..." if len(report.lost_calls) > 8 else ""),
            )
        )
    if report.resolved_calls:
        rows.append(("unknown costs resolved by the provider (generation lookup)", str(report.resolved_calls)))
    if report.rekeyed_calls:
        rows.append(("lost in a previous crash, re-sent with their idempotency key", str(report.rekeyed_calls)))
    if report.unsent_in_previous_crash:
        rows.append(("never sent before a previous crash (asked again)", str(report.unsent_in_previous_crash)))
    if report.possibly_paid_calls:
        rows.append(("possibly paid this run (cost unknown; booked at reservation)", str(report.possibly_paid_calls)))
    if report.budget_skipped_calls:
        rows.append(("calls not sent (budget)", str(report.budget_skipped_calls)))
    for k, v in rows:
        feasibility.add_row(k, v)
    con.print(feasibility)
    if report.budget_stopped:
        con.print(f"[bold red]stopped:[/] {report.budget_stopped}")
