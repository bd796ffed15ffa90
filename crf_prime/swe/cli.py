"""``crf-prime swe ...``: grade a SWE-bench test log offline, build the mini SWE-bench fixture, show an instance's test run.

Only argparse is imported here; handlers import the library lazily.
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    swe = subparsers.add_parser(
        "swe", help="SWE-bench-lite: grade logs with swebench's rules, build the offline fixture"
    )
    sub = swe.add_subparsers(dest="swe_command", metavar="SUBCOMMAND", required=True)

    grade = sub.add_parser("grade", help="grade a test log (with >>>>> Start/End Test Output markers) for an instance")
    grade.add_argument("log", help="log file (the eval script's combined output)")
    grade.add_argument("--instance", required=True, help="instance_id, e.g. django__django-11099")
    grade.add_argument("--dataset", default=None, help="local .json/.jsonl/.parquet or HF id (default: SWE-bench_Lite)")
    grade.add_argument("--split", default="test")
    grade.add_argument("--parser", default=None, help="log parser name (default: the repo's)")
    grade.add_argument("--json", action="store_true", help="print the report as JSON")
    grade.set_defaults(func=_grade)

    fixture = sub.add_parser("mini-fixture", help="write the offline mini SWE-bench (git repo + instances.jsonl)")
    fixture.add_argument("out", help="empty or new directory")
    fixture.set_defaults(func=_mini_fixture)

    show = sub.add_parser("test-cmd", help="print the eval script that runs an instance's tests")
    show.add_argument("--instance", required=True)
    show.add_argument("--dataset", default=None)
    show.add_argument("--split", default="test")
    show.add_argument("--repo-dir", default="/testbed")
    show.set_defaults(func=_test_cmd)


def _instance(args: argparse.Namespace):  # -> SweInstance
    from crf_prime.swe.dataset import LITE, load_instances

    (instance,) = load_instances(args.dataset or LITE, args.split, instance_ids=[args.instance])
    return instance


def _grade(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    from crf_prime.swe.grading import grade_log
    from crf_prime.swe.specs import repo_spec

    instance = _instance(args)
    parser = args.parser or repo_spec(instance).log_parser
    log = Path(args.log).read_text(encoding="utf-8", errors="replace")
    report = grade_log(instance.instance_id, log, parser, instance.FAIL_TO_PASS, instance.PASS_TO_PASS)
    console = Console()
    if args.json:
        console.print_json(report.model_dump_json())
    else:
        table = Table(
            title=f"{instance.instance_id}: {report.resolution}" + ("" if report.found else " (log rejected)")
        )
        table.add_column("list")
        table.add_column("passed", justify="right")
        table.add_column("failed", justify="right")
        table.add_column("failing tests")
        table.add_row(
            "FAIL_TO_PASS",
            str(len(report.f2p_success)),
            str(len(report.f2p_failure)),
            "\n".join(report.f2p_failure[:10]),
        )
        table.add_row(
            "PASS_TO_PASS",
            str(len(report.p2p_success)),
            str(len(report.p2p_failure)),
            "\n".join(report.p2p_failure[:10]),
        )
        console.print(table)
        if not report.found:
            console.print(f"[red]log not trusted:[/red] {report.reason}")
    return 0 if report.resolved else 1


def _mini_fixture(args: argparse.Namespace) -> int:
    from pathlib import Path

    from crf_prime.swe.fixture import build_mini_swebench

    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        print(f"error: {out} is not empty")
        return 2
    out.mkdir(parents=True, exist_ok=True)
    instance = build_mini_swebench(out)
    print(f"instance {instance.instance_id}: {out / 'instances.jsonl'} (repo mirrors in {out / 'repos'})")
    print(
        "validate: vf-validate swebench-lite --runtime.type subprocess "
        f"--taskset.dataset {out / 'instances.jsonl'} --taskset.repos-dir {out / 'repos'}"
    )
    return 0


def _test_cmd(args: argparse.Namespace) -> int:
    from crf_prime.swe.evalscript import eval_script

    print(eval_script(_instance(args), repo_dir=args.repo_dir), end="")
    return 0
