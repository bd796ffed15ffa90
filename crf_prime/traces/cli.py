"""``crf-prime traces ingest --paths PATH ... --out states.jsonl``: agent traces (Claude Code, OpenHands, SWE-smith,
SWE-Gym, verifiers) to TraceState JSONL."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, field_validator
from pydantic_config import BaseConfig

from crf_prime.clihelp import print_next
from crf_prime.errors import NothingProduced
from crf_prime.outputs import output_file
from crf_prime.traces.ingest import FormatSpec, estimate_output, expand_paths, ingest_to_jsonl
from crf_prime.traces.records import IngestReport

if TYPE_CHECKING:
    from crf_prime.traces.records import IngestReport


class IngestConfig(BaseConfig):
    paths: Annotated[list[Path], Field(min_length=1)]
    """Trace files or directories (``*.jsonl`` / ``*.json`` inside, recursively)."""
    out: Path
    """Output file: JSONL of TraceState rows (written atomically; a failed run leaves nothing)."""
    format: list[str] = []
    """``FORMAT`` (at most one: the default) or ``GLOB=FORMAT`` rules for the matching files, e.g.
    ``--format 'runs/*.json=openhands'``. Formats: auto, claude-code, openhands, swe-smith, swe-gym, verifiers
    (default: auto, detected per file; files of no known format are skipped and counted)."""
    max_observation_chars: Annotated[int, Field(ge=0)] = 30_000
    """Truncate longer tool/user observations in the middle (0 = never)."""
    max_context_chars: Annotated[int, Field(ge=0)] = 0
    """Cap each state's context at about this many characters: the system prompt and the task are kept, then the
    most recent messages that fit (0 = no cap). Every state repeats its trace so far, so without a cap the output can
    be tens of times its input; its estimated size is printed before anything is written."""
    progress_every: Annotated[float, Field(gt=0)] = 10.0
    """When stderr is not a terminal, print a plain progress line at most this often (seconds)."""

    @field_validator("format")
    @classmethod
    def _formats(cls, values: list[str]) -> list[str]:

        FormatSpec.parse(values)  # a typo fails at launch
        return values


def run(config: IngestConfig) -> int:
    """Ingest recorded agent traces into replayable states (channel 3: crf-prime's addition, not part of Cursor's recipe)."""
    from rich.console import Console  # start-up: +341 ms on every command

    output_file("out", config.out)
    spec = FormatSpec.parse(config.format)
    console = Console(stderr=True)
    options: dict[str, Any] = {
        "max_observation_chars": config.max_observation_chars or None,
        "max_context_chars": config.max_context_chars or None,
    }
    files = expand_paths(config.paths)
    input_bytes = sum(p.stat().st_size for p in files)
    with _progress(console, "sizing", input_bytes, config.progress_every) as on_read:
        sizing = IngestReport(on_read=on_read)
        n_states, chars = estimate_output(files, spec, report=sizing, **options)
    if n_states == 0:
        read_as = ", ".join(f"{fmt}: {n}" for fmt, n in sorted(sizing.formats.items()))
        skipped = ", ".join(f"{why}: {n}" for why, n in sizing.skipped.most_common(3))
        raise NothingProduced(
            f"0 states from {len(files)} file(s) read as {read_as} ({sizing.records} records; skipped {skipped or '-'})"
            f"; nothing written to {config.out}. Is --format right?"
        )
    console.print(
        f"ingest: will write {n_states} states, about {_mb(chars)} (input {_mb(input_bytes)})"
        + ("" if config.max_context_chars else "; cap each state's context with --max-context-chars"),
        soft_wrap=True,
    )
    with _progress(console, "ingest", input_bytes, config.progress_every) as on_read:
        report = ingest_to_jsonl(files, config.out, spec, report=IngestReport(on_read=on_read), **options)
    _print_summary(console, config.out, report)

    print_next(
        f"wrote {report.states} states to {config.out}",
        [
            (
                f"crf-prime teachers replay @ configs/teachers.toml --states {config.out} --out replay/run",
                "ask the frozen teachers at each state (budget-capped, resumable; docs/trace_replay.md)",
            )
        ],
    )
    return 0


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} kB"


@contextlib.contextmanager
def _progress(console, label: str, total_bytes: int, every: float) -> Iterator[Callable[[IngestReport], None]]:
    """A per-record progress callback: a live bar on a terminal, else a plain line at most every ``every`` s."""
    if console.is_terminal:
        # start-up: +199 ms on every command
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn(f"[bold]{label}"),
            BarColumn(),
            DownloadColumn(),
            TextColumn("· {task.fields[records]} records · {task.fields[states]} states"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress:
            task = progress.add_task(label, total=total_bytes, records=0, states=0)
            last = [0.0]

            def on_read(report: IngestReport) -> None:
                now = time.monotonic()
                if now - last[0] >= 0.1:
                    last[0] = now
                    progress.update(task, completed=report.bytes_read, records=report.records, states=report.states)

            yield on_read
        return
    start = time.monotonic()
    last = [start]

    def on_read_logged(report: IngestReport) -> None:
        now = time.monotonic()
        if now - last[0] >= every:
            last[0] = now
            console.print(
                f"{label}: {_mb(report.bytes_read)} / {_mb(total_bytes)} read · {report.records} records · "
                f"{report.states} states · {now - start:.0f} s",
                soft_wrap=True,
                highlight=False,
            )

    yield on_read_logged


def _print_summary(console, out: Path, report: IngestReport) -> None:
    from rich.markup import escape  # start-up: +140 ms on every command
    from rich.table import Table  # start-up: +55 ms on every command

    table = Table(title=f"ingest -> {out}")
    table.add_column("what")
    table.add_column("count", justify="right")
    table.add_row("files", str(report.files))
    for fmt, n in sorted(report.formats.items()):
        table.add_row(f"  format {fmt}", str(n))
    table.add_row("traces", str(report.traces))
    table.add_row("records read", str(report.records))
    table.add_row("states written", str(report.states))
    if report.capped:
        table.add_row("contexts capped", str(report.capped))
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
