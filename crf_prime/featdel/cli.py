"""``crf-prime featdel generate|validate|corpus``: Feature Deletion tasks from a real project (Cursor's Composer 2.5 recipe).

``generate`` takes :class:`crf_prime.featdel.generate.GenerateConfig` itself, so its flags, ``@ file.toml`` keys and
the library's fields are one declaration. Progress goes to stderr: a live bar on a terminal, plain lines otherwise
(a log file or CI sees each step as it happens).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, TypeVar

from pydantic import Field
from pydantic_config import BaseConfig

from crf_prime.clihelp import print_next
from crf_prime.errors import InputError, NegativeResult, NothingProduced
from crf_prime.extras import require
from crf_prime.featdel.corpus import CorpusConfig, read_sources, run_packages
from crf_prime.featdel.generate import GenerateConfig, check_out, validate_dir
from crf_prime.featdel.suite_setup import set_up
from crf_prime.placement import GradingSandbox
from crf_prime.sandbox import Sandbox

C = TypeVar("C")
ProgressFn = Callable[[str, int, int], None]

LABELS = {
    "source": "fetching source",
    "venv": "test venv",
    "setup": "setting up the suite",
    "coverage": "suite + coverage",
    "validate": "validating tasks",
}


class ValidateConfig(GradingSandbox, BaseConfig):
    task_dir: Path
    """Task directory written by ``crf-prime featdel generate`` (holds tasks.jsonl)."""
    workers: Annotated[int, Field(ge=0)] = 0
    """Parallel validations; 0 = number of CPU cores."""


@contextmanager
def progress_lines(prog: str) -> Iterator[ProgressFn]:
    """Progress reporter: rich bars on a terminal, else one plain stderr line per change of ``(phase, done, total)``."""
    from rich.console import Console  # start-up: +341 ms on every command

    console = Console(stderr=True)
    if not console.is_terminal:
        last: list[tuple[str, int, int]] = []

        def line(phase: str, done: int, total: int) -> None:
            if last[-1:] != [(phase, done, total)]:
                last.append((phase, done, total))
                print(f"{prog}: {LABELS.get(phase, phase)} {done}/{total}", file=sys.stderr, flush=True)

        yield line
        return
    # start-up: +199 ms on every command
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        bars: dict[str, TaskID] = {}

        def bar(phase: str, done: int, total: int) -> None:
            for other, tid in bars.items():
                if other != phase:
                    progress.update(tid, completed=progress.tasks[tid].total)
            if phase not in bars:
                bars[phase] = progress.add_task(LABELS.get(phase, phase), total=total)
            progress.update(bars[phase], completed=done, total=total)

        yield bar


def generate(config: GenerateConfig) -> int:
    """Generate validated 're-implement the deleted feature' tasks (tasks.jsonl + base archive + summary.json)."""
    from rich.console import Console  # start-up: +341 ms on every command
    from rich.markup import escape  # start-up: +140 ms on every command
    from rich.table import Table  # start-up: +55 ms on every command

    from crf_prime.featdel.generate import generate  # name clash with this module's own definition

    if config.replay:  # the replay is the anti-forgery check: without cloudpickle, refuse rather than drop it (exit 6)
        require("cloudpickle", "featdel")
    check_out(config.out)  # before minutes of setup
    t0 = time.monotonic()
    with progress_lines("crf-prime featdel generate") as progress:
        progress("setup", 0, 1)
        run, setup = set_up(config)  # ``config`` stays what the user gave, for the messages below
        progress("setup", 1, 1)
        if config.time_limit_s is not None:  # the limit counts from the command's start
            left = max(config.time_limit_s - (time.monotonic() - t0), 1e-3)
            run = run.model_copy(update={"time_limit_s": left})
        tasks, summary = generate(run, progress)
    table = Table(title=f"Feature Deletion: {summary.source.name} {summary.source.version}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("pytest config", escape(summary.pytest_config))
    if summary.pytest_args:
        table.add_row("pytest args needed", " ".join(summary.pytest_args))
    for action in setup.actions() if setup else ():
        table.add_row("  setup", escape(action))
    table.add_row("suite tests", str(summary.suite_tests))
    table.add_row("public functions", str(summary.functions))
    for reason, n in summary.filtered.items():
        table.add_row(f"  filtered: {reason}", str(n))
    table.add_row("candidates (functions + features)", str(summary.candidates))
    table.add_row("checked in sandbox", str(summary.checked))
    table.add_row("[green]valid tasks[/green]", str(summary.valid))
    for reason, n in summary.rejected.items():
        table.add_row(f"  rejected: {reason}", str(n))
    if config.replay:
        share = summary.replay_covered / summary.valid if summary.valid else 0.0
        table.add_row("covered by the replay", f"{summary.replay_covered}/{summary.valid} ({share:.0%})")
        for reason, n in summary.replay_dropped.items():
            table.add_row(f"  replay calls dropped: {reason}", str(n))
    if summary.mutation is not None:
        table.add_row("grader's mutation rate", summary.mutation.line())
    for phase, s in summary.seconds.items():
        table.add_row(f"time {phase} (s)", f"{s:.1f}")
    Console().print(table)
    if not tasks:
        limit = f" (stopped at --time-limit-s {config.time_limit_s:g})" if summary.time_limit_reached else ""
        raise NothingProduced(f"no valid task among {summary.checked} checked candidates of {config.source}{limit}")
    print_next(generated(len(tasks), config, summary.time_limit_reached), next_after_generate(config.out))
    return 0


def generated(n: int, config: GenerateConfig, time_limit_reached: bool = False) -> str:
    """What generate wrote, and what stopped it: ``--max-tasks`` (8 by default: a first look, not a training set),
    ``--time-limit-s``, or the candidates running out."""
    default = ", the default" if "max_tasks" not in config.model_fields_set else ""
    if n >= config.max_tasks:
        why = f"stopped at --max-tasks {config.max_tasks}{default}"
    elif time_limit_reached:
        why = f"stopped at --time-limit-s {config.time_limit_s:g} with candidates left"
    else:
        why = "every candidate checked"
    return f"wrote {n} tasks to {config.out / 'tasks.jsonl'} ({why})"


def next_after_generate(out: Path) -> list[tuple[str, str]]:
    """Where a task directory goes next: its check, the environment's own check, a run config."""
    return [
        (f"crf-prime featdel validate --task-dir {out}", "re-check every task in the sandbox"),
        (
            f"vf-validate feature-deletion --runtime.type subprocess --taskset.tasks {out}",
            "the environment's own check (gold patch scores 1.0)",
        ),
        (
            f'[orchestrator.train.source.env.taskset] id = "feature-deletion", tasks = "{out}"',
            "the taskset config of a run; the ladder reads tasks/featdel-train and tasks/featdel-eval: generate those "
            "with --out (docs/running.md, step 3)",
        ),
    ]


def validate(config: ValidateConfig) -> int:
    """Re-check a generated task directory (exit 1 if any task is invalid)."""
    from rich.console import Console  # start-up: +341 ms on every command
    from rich.markup import escape  # start-up: +140 ms on every command
    from rich.table import Table  # start-up: +55 ms on every command

    require("cloudpickle", "featdel")  # tasks with a replay are graded with it: never without it (exit 6)
    if not config.task_dir.is_dir():
        what = "is a file" if config.task_dir.exists() else "does not exist"
        raise InputError.field("task_dir", f"{config.task_dir} {what}; give a directory written by featdel generate")
    with progress_lines("crf-prime featdel validate") as progress:
        results = validate_dir(config.task_dir, sandbox=config, workers=config.workers, progress=progress)
    table = Table(title=f"featdel validate {config.task_dir}")
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
    if not results:
        raise NothingProduced(f"{config.task_dir / 'tasks.jsonl'} holds no task")
    if bad:
        raise NegativeResult(f"{bad} of {len(results)} tasks are invalid")
    print_next(f"all {len(results)} tasks of {config.task_dir} are valid", next_after_generate(config.task_dir)[1:])
    return 0


def corpus(config: CorpusConfig) -> int:
    """Feature Deletion tasks from a list of packages, in parallel on Ray: deduplicated, split, with a dataset card."""
    from crf_prime.featdel.corpus_build import assemble, export_hf  # start-up: +26 ms on every command

    lines = read_sources(config.sources)
    out = config.out
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / "packages").is_dir())):
        raise InputError.field("out", f"{out} exists and is not a corpus directory; give a new or an earlier --out")
    if config.export_hf:
        require("datasets", "hf")
    Sandbox(config)  # no bubblewrap here: say so now, not once per package
    config.out.mkdir(parents=True, exist_ok=True)
    statuses = run_packages(config, lines)
    summary = assemble(config.out, lines, statuses, eval_fraction=config.eval_fraction)
    if config.export_hf:
        export_hf(config.out)
    print(
        f"featdel corpus: {summary.tasks} tasks ({summary.splits.get('train', 0)} train, "
        f"{summary.splits.get('eval', 0)} eval) from {summary.packages_done} packages"
        f"{f' and {summary.packages_partial} stopped at the time limit' if summary.packages_partial else ''} "
        f"({summary.packages_failed} failed, {summary.duplicates_exact + summary.duplicates_near} duplicates removed) "
        f"-> {config.out}"
    )
    if summary.mutation is not None:
        print(f"grader's mutation rate: {summary.mutation.line()}")
        for g, st in summary.mutation_by_granularity.items():
            print(f"  {g}: {st.line()}")
        for slug, st in summary.mutation_by_package.items():
            print(f"  {summary.packages[slug].spec}: {st.line()}")
    if not summary.tasks:
        raise NothingProduced(
            f"{config.out}: no package produced a validated task (reasons: {config.out}/summary.json)"
        )

    print_next(
        "",  # the summary line above says what was written
        [
            (
                f'[orchestrator.train.source.env.taskset] id = "feature-deletion", tasks = "{config.out}", '
                'corpus_split = "train"',
                'the taskset config of a training source; an eval source takes corpus_split = "eval"',
            )
        ],
    )
    return 0
