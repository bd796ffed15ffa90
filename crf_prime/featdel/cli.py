"""``crf-prime featdel generate|validate``: Feature Deletion tasks from a real project (Cursor's Composer 2.5 recipe)."""

from __future__ import annotations

import argparse
import functools
import signal
import threading
from collections.abc import Callable

DEFAULT_SOURCE = "pypi:toolz==1.2.0"  # kept in sync with crf_prime.featdel.generate.DEFAULT_SOURCE (tested)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "featdel",
        help="Feature Deletion: generate/validate 're-implement the deleted feature' tasks (Cursor's recipe)",
        description=(
            "Feature Deletion (Cursor's Composer 2.5 synthetic-task recipe): take a project whose tests pass, delete "
            "a tested function or feature, and keep the tests as the reward. Generation and validation run in the "
            "crf-prime sandbox (bubblewrap); no Docker, GPU or API key needed."
        ),
    )
    sub = parser.add_subparsers(dest="featdel_command", metavar="SUBCOMMAND", required=True)

    gen = sub.add_parser("generate", help="generate validated tasks (tasks.jsonl + base archive + summary.json)")
    gen.add_argument(
        "--source",
        default=DEFAULT_SOURCE,
        help=f"local project directory or pypi:NAME==VERSION (pinned sdist); default {DEFAULT_SOURCE}",
    )
    gen.add_argument("--out", default="out/featdel", help="output task directory (replaced atomically)")
    gen.add_argument("--max-tasks", type=int, default=8, help="stop after this many valid tasks (default 8)")
    gen.add_argument("--seed", type=int, default=0, help="sampling seed; same seed -> same tasks")
    gen.add_argument("--workers", type=int, default=0, help="parallel validations (default: CPU cores)")
    gen.add_argument(
        "--deselect", action="append", default=[], metavar="NODEID", help="leave out a test that fails as shipped"
    )
    gen.add_argument(
        "--extra-requirement",
        action="append",
        default=[],
        metavar="REQ",
        help="extra test-only requirement for the test venv (e.g. hypothesis==6.100.0)",
    )
    gen.add_argument("--max-target-tests", type=int, default=40, help="skip functions covered by more tests")
    gen.add_argument(
        "--no-replay",
        action="store_true",
        help="do not record gold's calls for the replay verdict (tasks are then graded by their tests alone)",
    )
    gen.add_argument(
        "--unsandboxed", action="store_true", help="run WITHOUT bubblewrap isolation (explicit opt-in, unsafe)"
    )
    gen.set_defaults(func=_exit_on_sigterm(_generate))

    val = sub.add_parser("validate", help="re-check a task directory; exit 1 if any task is invalid")
    val.add_argument("task_dir", help="directory written by 'crf-prime featdel generate'")
    val.add_argument("--workers", type=int, default=0)
    val.add_argument("--unsandboxed", action="store_true", help="run WITHOUT bubblewrap isolation (explicit opt-in)")
    val.set_defaults(func=_exit_on_sigterm(_validate))


def _exit_on_sigterm(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run ``command`` with SIGTERM raising SystemExit(143), like Ctrl-C raises KeyboardInterrupt: every ``finally``
    runs, so the temporary trees (``crf-featdel-*`` in $TMPDIR) and sandbox boxes are removed on kill too."""

    @functools.wraps(command)
    def wrapped(args: argparse.Namespace) -> int:
        if threading.current_thread() is not threading.main_thread():
            return command(args)

        def stop(signum: int, _frame: object) -> None:
            raise SystemExit(128 + signum)

        previous = signal.signal(signal.SIGTERM, stop)
        try:
            return command(args)
        finally:
            signal.signal(signal.SIGTERM, previous)

    return wrapped


def _progress(console):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )


def _generate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from crf_prime.extras import MissingExtraError
    from crf_prime.featdel.generate import GenerateConfig, generate
    from crf_prime.featdel.source import SourceError

    console = Console(stderr=True)
    cfg = GenerateConfig(
        source=args.source,
        out=Path(args.out),
        max_tasks=args.max_tasks,
        seed=args.seed,
        workers=args.workers,
        deselect=tuple(args.deselect),
        extra_requirements=tuple(args.extra_requirement),
        max_target_tests=args.max_target_tests,
        unsandboxed=args.unsandboxed,
        replay=not args.no_replay,
    )
    labels = {
        "source": "fetching source",
        "venv": "test venv",
        "coverage": "suite + coverage",
        "validate": "validating tasks",
    }
    with _progress(console) as progress:
        bars: dict[str, int] = {}

        def on_progress(phase: str, done: int, total: int) -> None:
            for other, tid in bars.items():
                if other != phase:
                    t = progress.tasks[tid]
                    progress.update(tid, completed=t.total)
            if phase not in bars:
                bars[phase] = progress.add_task(labels.get(phase, phase), total=total)
            progress.update(bars[phase], completed=done, total=total)

        try:
            tasks, summary = generate(cfg, on_progress)
        except (SourceError, MissingExtraError) as e:
            console.print("[red]error:[/red]", escape(str(e)), soft_wrap=True)
            return 1
    table = Table(title=f"Feature Deletion: {summary.source.name} {summary.source.version}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("pytest config", escape(summary.pytest_config))
    if summary.pytest_args:
        table.add_row("pytest args needed", " ".join(summary.pytest_args))
    table.add_row("suite tests", str(summary.suite_tests))
    table.add_row("public functions", str(summary.functions))
    for reason, n in summary.filtered.items():
        table.add_row(f"  filtered: {reason}", str(n))
    table.add_row("candidates (functions + features)", str(summary.candidates))
    table.add_row("checked in sandbox", str(summary.checked))
    table.add_row("[green]valid tasks[/green]", str(summary.valid))
    for reason, n in summary.rejected.items():
        table.add_row(f"  rejected: {reason}", str(n))
    if cfg.replay:
        share = summary.replay_covered / summary.valid if summary.valid else 0.0
        table.add_row("covered by the replay", f"{summary.replay_covered}/{summary.valid} ({share:.0%})")
        for reason, n in summary.replay_dropped.items():
            table.add_row(f"  replay calls dropped: {reason}", str(n))
    for phase, s in summary.seconds.items():
        table.add_row(f"time {phase} (s)", f"{s:.1f}")
    Console().print(table)
    Console().print(f"wrote {len(tasks)} tasks to {cfg.out / 'tasks.jsonl'}", soft_wrap=True)
    return 0 if tasks else 1


def _validate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from crf_prime.featdel.generate import validate_dir
    from crf_prime.featdel.source import SourceError

    console = Console(stderr=True)
    try:
        with _progress(console) as progress:
            bar = progress.add_task("validating tasks", total=None)
            results = validate_dir(
                Path(args.task_dir),
                unsandboxed=args.unsandboxed,
                workers=args.workers,
                progress=lambda phase, done, total: progress.update(bar, completed=done, total=total),
            )
    except SourceError as e:
        console.print("[red]error:[/red]", escape(str(e)), soft_wrap=True)
        return 2
    table = Table(title=f"featdel validate {args.task_dir}")
    table.add_column("task")
    table.add_column("status")
    table.add_column("detail")
    bad = 0
    for task, rej in results:
        if rej is None:
            table.add_row(escape(task.task_id), "[green]valid[/green]", "")
        else:
            bad += 1
            table.add_row(escape(task.task_id), f"[red]{rej.reason}[/red]", escape(rej.detail[:120]))
    Console().print(table)
    Console().print(f"{len(results) - bad}/{len(results)} valid")
    return 1 if bad or not results else 0
