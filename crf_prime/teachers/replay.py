"""``crf-prime teachers replay`` as a library function: states file + teacher config -> journal + cost/latency report.

Channel 3 (trace replay) is crf-prime's own addition to Cursor's Composer 2.5 recipe.
"""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from crf_prime.records.journal import JournalRecord
from crf_prime.records.states import read_states
from crf_prime.teachers import live as live_mode
from crf_prime.teachers.agreement import SAME_ACTION_SOURCE
from crf_prime.teachers.backends import AsyncioBackend, Backend, RayBackend
from crf_prime.teachers.config import PoolConfig
from crf_prime.teachers.ledger import Ledger
from crf_prime.teachers.pool import StateOutcome, TeacherPool
from crf_prime.teachers.report import ReplayReport, build_report, percentile

JOURNAL_NAME = "journal.jsonl"
REPORT_NAME = "report.json"


LIVE_P95_WINDOW = 2048
"""Calls the live p95 looks back over: a refresh sorts at most this many latencies, however long the job."""


@dataclass
class Progress:
    """Live counters the CLI shows (states, calls, spend, p95 latency of the last ``LIVE_P95_WINDOW`` calls).

    The report's p50/p95 are exact over every call; the live bar only needs a recent view, and sorting every
    latency of a long job on each refresh would block the event loop that drives the requests.
    """

    states: int = 0
    calls: int = 0
    errors: int = 0
    spend: float = 0.0
    _lat: deque[float] = field(default_factory=lambda: deque(maxlen=LIVE_P95_WINDOW))

    def record(self, rec: JournalRecord) -> None:
        self.calls += 1
        self.errors += not rec.ok
        self.spend += rec.cost_usd
        self._lat.append(rec.latency_s)

    def p95(self) -> float | None:
        return percentile(self._lat, 95)


async def replay_async(
    states_path: str | Path,
    config: PoolConfig,
    out_dir: str | Path,
    *,
    backend: Literal["asyncio", "ray"] = "asyncio",
    live: str | None = None,
    on_progress: Any = None,
    api_keys: dict[str, str] | None = None,
) -> ReplayReport:
    """Replay every state of ``states_path``; the journal and report.json land in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    journal = out / JOURNAL_NAME
    ledger: Ledger | None = None
    be: Backend
    if live is not None:
        pool = live_mode.serve(config, journal, name=live, api_keys=api_keys)
        be = pool.backend
    else:
        ledger = Ledger(journal, config.budget, config.pool)
        if backend == "ray":
            be = RayBackend(config.teachers, api_keys=api_keys)
        else:
            be = AsyncioBackend(config.teachers, api_keys=api_keys)
        pool = TeacherPool(config, be, ledger)
    progress = Progress()

    def on_record(rec: JournalRecord, _: StateOutcome) -> None:
        progress.record(rec)
        if on_progress is not None:
            on_progress(progress)

    def on_state(_: StateOutcome) -> None:
        progress.states += 1
        if on_progress is not None:
            on_progress(progress)

    pool.on_record = on_record
    start = time.perf_counter()
    try:
        outcomes = await pool.replay(read_states(states_path), on_state=on_state)
    finally:
        if live is None:
            await be.close()
    snapshot = await pool.ledger.snapshot()
    if ledger is not None:
        ledger.close()
    report = build_report(
        outcomes,
        backend=f"live:{live}" if live else backend,
        wall_s=time.perf_counter() - start,
        tiered=config.pool.tiered,
        ledger_snapshot=snapshot,
        stopped=pool.stopped,
        agreement_source=f"{SAME_ACTION_SOURCE} (min_tier={config.pool.votes.tier})",
    )
    tmp = out / (REPORT_NAME + ".tmp")
    tmp.write_text(json.dumps(report.model_dump(), indent=2) + "\n")
    tmp.replace(out / REPORT_NAME)
    return report
