"""``crf-prime swe grade|mini-fixture|test-cmd``: grade a SWE-bench test log offline, build the mini SWE-bench
fixture, show an instance's test run."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic_config import BaseConfig

from crf_prime.errors import InputError, NegativeResult
from crf_prime.outputs import output_dir
from crf_prime.swe.dataset import LITE, load_instances
from crf_prime.swe.evalscript import eval_script
from crf_prime.swe.fixture import build_mini_swebench
from crf_prime.swe.grading import grade_instance_log
from crf_prime.swe.logparse import PARSERS


class InstanceConfig(BaseConfig):
    instance: str
    """instance_id, e.g. ``django__django-11099``."""
    dataset: str = LITE
    """Local .json / .jsonl / .parquet file or Hugging Face dataset id."""
    split: str = "test"
    """Dataset split."""


class GradeConfig(InstanceConfig):
    log: Path
    """Log file: the eval script's combined output, with >>>>> Start/End Test Output markers."""
    parser: str | None = None
    """Log parser name (default: the instance repository's)."""
    format: Literal["table", "json"] = "table"
    """Print the report as a table or as JSON."""


class FixtureConfig(BaseConfig):
    out: Path
    """Directory (new or empty) that receives instances.jsonl and the repos/ git mirrors."""


class TestCmdConfig(InstanceConfig):
    repo_dir: str = "/testbed"
    """Where the repository lives when the script runs."""


def instance(config: InstanceConfig):  # -> SweInstance

    (found,) = load_instances(config.dataset, config.split, instance_ids=[config.instance])
    return found


def grade(config: GradeConfig) -> int:
    """Grade a test log for an instance with swebench's rules (exit 1: not resolved)."""
    from rich.console import Console  # start-up: +341 ms on every command
    from rich.markup import escape  # start-up: +140 ms on every command
    from rich.table import Table  # start-up: +55 ms on every command

    if not config.log.is_file():
        raise InputError.field("log", f"{config.log} {'is a directory' if config.log.is_dir() else 'does not exist'}")
    if config.parser is not None and config.parser.removeprefix("parse_log_") not in PARSERS:
        raise InputError.field("parser", f"unknown log parser {config.parser!r}; known: {', '.join(sorted(PARSERS))}")
    found = instance(config)
    log = config.log.read_text(encoding="utf-8", errors="replace")
    report = grade_instance_log(found, log, config.parser)
    console = Console()
    if config.format == "json":
        console.print_json(report.model_dump_json())
    else:
        title = f"{found.instance_id}: {report.resolution}" + ("" if report.found else " (log rejected)")
        table = Table(title=escape(title))
        for column in ("list", "passed", "failed", "failing tests"):
            table.add_column(column, justify="right" if column in ("passed", "failed") else "left")
        for name, passed, failed in (
            ("FAIL_TO_PASS", report.f2p_success, report.f2p_failure),
            ("PASS_TO_PASS", report.p2p_success, report.p2p_failure),
        ):
            table.add_row(
                name, str(len(passed)), str(len(failed)), escape("\n".join(failed[:10]))
            )  # ids keep their [params]
        console.print(table)
        if not report.found:
            console.print(f"[red]log not trusted:[/red] {escape(report.reason or '')}")
    if not report.resolved:
        raise NegativeResult(
            f"{found.instance_id}: {report.resolution}" + (f" ({report.reason})" if report.reason else "")
        )
    return 0


def mini_fixture(config: FixtureConfig) -> int:
    """Write the offline mini SWE-bench (git repo + instances.jsonl) into a new or empty directory."""

    out = output_dir("out", config.out)
    if out.is_dir() and any(out.iterdir()):
        raise InputError.field("out", f"{out} is not empty; give a new or empty directory")
    out.mkdir(parents=True, exist_ok=True)
    built = build_mini_swebench(out)
    print(f"instance {built.instance_id}: {out / 'instances.jsonl'} (repo mirrors in {out / 'repos'})")
    print(
        "validate: vf-validate swebench-lite --runtime.type subprocess "
        f"--taskset.dataset {out / 'instances.jsonl'} --taskset.repos-dir {out / 'repos'}"
    )
    return 0


def test_cmd(config: TestCmdConfig) -> int:
    """Print the eval script that runs an instance's tests."""

    print(eval_script(instance(config), repo_dir=config.repo_dir), end="")
    return 0
