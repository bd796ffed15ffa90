"""``crf-prime replay``: ask a pool of teacher models for the next action at every recorded trace state.

Channel 3 (trace replay) is crf-prime's own research addition, not part of Cursor's Composer 2.5 recipe.
Only argparse is imported here; the library is imported when the command runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "replay trace states with a pool of teacher models (channel 3: crf-prime's addition, not Cursor's recipe)"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay",
        help=HELP,
        description=HELP + ". Writes DIR/journal.jsonl (append-only, resumable) and DIR/report.json.",
    )
    p.add_argument("states", type=Path, help="states.jsonl written by `crf-prime ingest`")
    p.add_argument("--teachers", type=Path, required=True, help="teacher pool TOML (see configs/teachers.toml)")
    p.add_argument("--out", type=Path, required=True, help="output directory (journal + report); rerun to resume")
    p.add_argument("--backend", choices=["asyncio", "ray"], default="asyncio", help="where teacher clients run")
    p.add_argument("--budget-usd", type=float, default=None, help="hard spend cap for the job (overrides TOML)")
    p.add_argument("--per-trace-usd", type=float, default=None, help="hard spend cap per trace (overrides TOML)")
    p.add_argument("--tiered", action=argparse.BooleanOptionalAction, default=None, help="cheap tiers first")
    p.add_argument(
        "--include-same-family", action="store_true", help="also ask teachers of the trace's own model family"
    )
    p.add_argument(
        "--resend-lost",
        action="store_true",
        help="re-ask calls that may have been paid without an answer (in flight at a crash, timed out, cut off)",
    )
    p.add_argument(
        "--window", type=int, default=None, help="states in flight at once (default 2x the summed teacher concurrency)"
    )
    p.add_argument("--live", metavar="NAME", default=None, help="use (or start) the named detached Ray pool NAME")
    p.add_argument("--ray-address", default=None, help="Ray cluster to connect to (ray backend / live mode)")
    p.add_argument("--no-progress", action="store_true", help="no live progress bar")
    p.set_defaults(func=replay_command)


def replay_command(args: argparse.Namespace) -> int:
    import asyncio
    import sys
    import time

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from crf_prime.teachers.config import ConfigError, load_pool_config
    from crf_prime.teachers.replay import EXIT_BUDGET, StatesFileError, check_states, replay_async
    from crf_prime.teachers.report import render

    err = Console(stderr=True, soft_wrap=True)
    try:
        config = load_pool_config(args.teachers)
        total = check_states(args.states)
        for t in config.teachers:
            t.api_key()
    except (ConfigError, StatesFileError) as e:
        err.print(f"[bold red]error:[/] {e}")
        return 2
    budget = config.budget.model_copy(
        update={k: v for k, v in (("job_usd", args.budget_usd), ("per_trace_usd", args.per_trace_usd)) if v is not None}
    )
    pool_opts = config.pool.model_copy(
        update={
            k: v
            for k, v in (
                ("tiered", args.tiered),
                ("exclude_same_family", False if args.include_same_family else None),
                ("resend_lost", True if args.resend_lost else None),
                ("window", args.window),
            )
            if v is not None
        }
    )
    config = config.model_copy(update={"budget": budget, "pool": pool_opts})
    try:
        config.checked()  # the caps as overridden on the command line
    except ConfigError as e:
        err.print(f"[bold red]error:[/] {args.teachers}: {e}")
        return 2
    if args.backend == "ray" or args.live:
        from crf_prime.extras import require

        ray = require("ray", "ray")
        if not ray.is_initialized():
            kw = {"address": args.ray_address} if args.ray_address else {"include_dashboard": False}
            ray.init(log_to_driver=False, namespace="crf-prime" if args.live else None, **kw)

    console = Console(width=None if sys.stdout.isatty() else 140)
    with Progress(
        TextColumn("[bold]replay"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[stats]}"),
        TimeElapsedColumn(),
        console=console,
        disable=args.no_progress or not sys.stdout.isatty(),
    ) as bar:
        task = bar.add_task("states", total=total, stats="")

        last = [0.0]

        def on_progress(p) -> None:  # type: ignore[no-untyped-def]
            now = time.monotonic()
            if now - last[0] < 0.25 and p.states < total:  # at most 4 refreshes/s (each sorts the live p95 window)
                return
            last[0] = now
            p95 = p.p95()
            bar.update(
                task,
                completed=p.states,
                stats=f"calls {p.calls} (err {p.errors})  spend ${p.spend:.4f}  "
                f"p95 {'-' if p95 is None else f'{p95:.2f}s'}",
            )

        report = asyncio.run(
            replay_async(args.states, config, args.out, backend=args.backend, live=args.live, on_progress=on_progress)
        )
    render(report, console)
    console.print(f"journal: {args.out / 'journal.jsonl'}  report: {args.out / 'report.json'}")
    if report.budget_stopped:
        return EXIT_BUDGET
    return 0
