"""``crf-prime teachers replay @ configs/teachers.toml --states states.jsonl --out DIR``: ask a pool of teacher models
for the next action at every recorded trace state.

The teachers TOML is the command's config (``[[teachers]]``, ``[budget]``, ``[pool]``), so a TOML key and a flag are
the same setting: ``--budget.job-usd 5``, ``--pool.tiered``, ``--pool.votes.exclude-same-family false``.
Channel 3 (trace replay) is crf-prime's own research addition, not part of Cursor's Composer 2.5 recipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Literal

from pydantic_config import BaseConfig

from crf_prime.clihelp import print_next
from crf_prime.errors import BudgetExhausted, InfraError, NothingProduced
from crf_prime.outputs import output_dir
from crf_prime.rayinit import init_ray
from crf_prime.records.states import count_states
from crf_prime.teachers.config import PoolConfig


class ReplayConfig(PoolConfig, BaseConfig):
    """A teacher pool (the ``teachers.toml`` tables) plus where the states come from and the journal goes."""

    states: Path
    """States JSONL written by ``crf-prime traces ingest`` (a file)."""
    out: Path
    """Output directory: journal.jsonl (append-only; rerun with the same ``out`` to resume) and report.json."""
    backend: Literal["asyncio", "ray"] = "asyncio"
    """Where the teacher clients run: this process's event loop, or one Ray actor per teacher."""
    live: str | None = None
    """Use (or start) the named detached Ray pool NAME, which env-server processes attach to."""
    ray_address: str | None = None
    """Ray cluster to connect to (ray backend / live mode); default: start a local one."""
    progress: bool = True
    """Live progress bar on a terminal."""


def run(config: ReplayConfig) -> int:
    """Replay trace states with a pool of teacher models (channel 3: crf-prime's addition, not part of Cursor's recipe)."""

    from rich.console import Console  # start-up: +341 ms on every command

    from crf_prime.teachers.replay import replay_async  # start-up: +5201 ms on every command
    from crf_prime.teachers.report import render  # start-up: +4524 ms on every command

    output_dir("out", config.out)
    total = count_states(config.states)
    if total == 0:
        raise NothingProduced(f"states: {config.states} has no states; nothing to replay")
    for t in config.teachers:
        t.api_key()
    if config.backend == "ray" or config.live:
        kw = {"address": config.ray_address} if config.ray_address else {"include_dashboard": False}
        init_ray(log_to_driver=False, namespace="crf-prime" if config.live else None, **kw)

    console = Console(width=None if sys.stdout.isatty() else 140)  # the report is the command's output
    with _progress_bar(console, total, config.progress) as on_progress:
        report = asyncio.run(
            replay_async(
                config.states,
                config,
                config.out,
                backend=config.backend,
                live=config.live,
                on_progress=on_progress,
            )
        )
    render(report, console)
    console.print(f"journal: {config.out / 'journal.jsonl'}  report: {config.out / 'report.json'}", soft_wrap=True)
    console.print(
        f"spend: known ${report.known_usd:.4f}; unresolved, worst case ${report.unresolved_usd:.4f} "
        f"({report.unresolved_calls} calls)",
        soft_wrap=True,
    )
    if report.budget_stopped:
        raise BudgetExhausted(f"spend cap reached: {report.budget_stopped}; rerun with a higher cap to go on")
    if report.calls_sent and not sum(t.ok for t in report.teachers):
        errors = Counter[str]()
        for stats in report.teachers:
            errors.update(stats.errors)
        why = ", ".join(f"{kind}: {n}" for kind, n in errors.most_common())
        raise InfraError(f"all {report.calls_sent} teacher calls failed ({why}); is the teacher server up?")

    print_next(
        f"replayed {config.states} with {len(config.teachers)} teachers into {config.out / 'journal.jsonl'}",
        [
            (
                f"crf-prime pairs --journal {config.out / 'journal.jsonl'} --states {config.states} "
                f"--out {config.out / 'pairs.jsonl'}",
                "DPO pairs where the teachers disagree with the student",
            ),
            (
                f'[orchestrator.train.source.env.taskset] id = "trace-replay", states = "{config.states}", '
                f'journal = "{config.out / "journal.jsonl"}"',
                "the taskset config of a trace-replay source (A3, A4; docs/running.md)",
            ),
        ],
    )
    return 0


def _progress_bar(console, total: int, enabled: bool):
    """A live bar on a terminal (at most 4 refreshes/s: each sorts the live p95 window); nothing otherwise."""

    # start-up: +199 ms on every command
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    @contextlib.contextmanager
    def bar():
        with Progress(
            TextColumn("[bold]replay"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            console=console,
            disable=not enabled or not console.is_terminal,
        ) as progress:
            task = progress.add_task("states", total=total, stats="")
            last = [0.0]

            def on_progress(p) -> None:
                now = time.monotonic()
                if now - last[0] < 0.25 and p.states < total:
                    return
                last[0] = now
                p95 = p.p95()
                progress.update(
                    task,
                    completed=p.states,
                    stats=f"calls {p.calls} (err {p.errors})  spend ${p.spend:.4f}  "
                    f"p95 {'-' if p95 is None else f'{p95:.2f}s'}",
                )

            yield on_progress

    return bar()
