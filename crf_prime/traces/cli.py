"""``crf-prime ingest``: agent traces (Claude Code, OpenHands, SWE-smith, SWE-Gym, verifiers) to TraceState JSONL."""

from __future__ import annotations

import argparse

FORMATS = ("auto", "claude-code", "openhands", "swe-smith", "swe-gym", "verifiers")

HELP = (
    "Ingest recorded agent traces into replayable states (channel 3: trace replay, crf-prime's own research "
    "addition, not part of Cursor's Composer recipe)."
)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("ingest", help=HELP, description=HELP)
    p.add_argument("paths", nargs="+", metavar="PATH", help="trace files or directories (*.jsonl / *.json inside)")
    p.add_argument(
        "--format",
        action="append",
        default=[],
        type=_format_value,
        metavar="[GLOB=]FORMAT",
        help=f"trace format, one of {', '.join(FORMATS)} (default: auto, detected per file; files of no known format "
        "are skipped and counted). GLOB=FORMAT applies to the matching files only and may be repeated, e.g. "
        "--format 'runs/*.json=openhands'",
    )
    p.add_argument("--out", required=True, help="output JSONL of TraceState rows (written atomically)")
    p.add_argument(
        "--max-observation-chars",
        type=int,
        default=30_000,
        help="truncate longer tool/user observations in the middle (0 = never)",
    )
    p.set_defaults(func=run_ingest)


def _format_value(value: str) -> str:
    """argparse check of one ``--format`` value, so a typo fails at launch."""
    from crf_prime.traces.ingest import format_choice

    try:
        format_choice(value.rpartition("=")[2])
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    return value


def run_ingest(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from crf_prime.traces.ingest import FormatSpec, expand_paths, ingest_to_jsonl
    from crf_prime.traces.records import IngestError

    console = Console(stderr=True)
    try:
        spec = FormatSpec.parse(args.format)
    except ValueError as e:
        console.print(f"[red]error:[/red] {e}")
        return 2
    try:
        files = expand_paths(args.paths)
        with Progress(
            TextColumn("[bold]ingest"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("files · {task.fields[states]} states"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress:
            task = progress.add_task("ingest", total=len(files), states=0)

            def on_file(path, report) -> None:
                progress.update(task, advance=1, states=report.states)

            report = ingest_to_jsonl(
                files,
                args.out,
                spec,
                max_observation_chars=args.max_observation_chars or None,
                on_file=on_file,
            )
    except IngestError as e:
        console.print(f"[red]error:[/red] {escape(str(e))}", soft_wrap=True)
        return 1

    table = Table(title=f"ingest -> {args.out}")
    table.add_column("what")
    table.add_column("count", justify="right")
    table.add_row("files", str(report.files))
    for fmt, n in sorted(report.formats.items()):
        table.add_row(f"  format {fmt}", str(n))
    table.add_row("traces", str(report.traces))
    table.add_row("records read", str(report.records))
    table.add_row("states written", str(report.states))
    for reason, n in sorted(report.skipped.items()):
        table.add_row(f"skipped: {reason}", str(n))
    console.print(table)
    for reason in report.unread[:20]:
        console.print(f"[yellow]skipped file[/yellow] {escape(reason)}", soft_wrap=True)
    if len(report.unread) > 20:
        console.print(f"... {len(report.unread)} files skipped in total")
    for loc in report.malformed[:20]:
        console.print(f"[yellow]malformed[/yellow] {loc}")
    if len(report.malformed) > 20 or report.skipped["malformed_json"] > len(report.malformed):
        console.print(f"... {report.skipped['malformed_json']} malformed lines in total")
    return 0
