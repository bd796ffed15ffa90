"""``crf-prime report RUN_DIR... --out DIR``: the A/B report over ladder arms (argparse only at import)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report",
        help="pass@1 per arm with bootstrap CIs and paired differences to a baseline (markdown + PNG)",
        description=(
            "Read vf-eval results dirs, prime-rl run dirs (eval rollouts of the last step, or --step) or traces.jsonl "
            "files, one per arm, and write report.md, report.json and report.png. Name an arm with NAME=PATH "
            "(default: the directory name)."
        ),
    )
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="[NAME=]PATH of one arm; the first is the baseline")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--baseline", help="arm the paired differences are taken against (default: the first)")
    p.add_argument("--threshold", type=float, default=1.0, help="reward at or above which a sample passes (1.0)")
    p.add_argument("--reward", help="score one named reward instead of the weighted sum of all rewards")
    p.add_argument("--env", help="only episodes of this environment id (e.g. feature-deletion)")
    p.add_argument("--step", type=int, help="prime-rl runs: eval step to report (default: the last one)")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples (2000)")
    p.add_argument("--confidence", type=float, default=0.95, help="interval coverage (0.95)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def _arm(spec: str) -> tuple[str, Path]:
    name, sep, path = spec.partition("=")
    if not sep:
        path = spec
        p = Path(spec)
        name = (p.parent.name if p.is_file() else p.name) or str(p)
    return name, Path(path)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from crf_prime.report import ReportInputError, build_report, load_arm, write_report

    console = Console()
    try:
        arms = [
            load_arm(name, path, step=args.step, reward_name=args.reward, env=args.env)
            for name, path in map(_arm, args.runs)
        ]
    except ReportInputError as e:
        console.print(f"[red]error:[/red] {e}", soft_wrap=True)
        return 2
    report = build_report(
        arms,
        baseline=args.baseline,
        threshold=args.threshold,
        n_boot=args.n_boot,
        confidence=args.confidence,
        seed=args.seed,
    )
    paths = write_report(report, arms, args.out)
    table = Table(title=f"pass@1 (Δ vs {report.baseline}, paired)")
    for col in ("arm", "tasks", "pass@1", "CI", "Δ", "CI"):
        table.add_column(col)
    for row in report.arms:
        e, d = row.pass_at_1, row.diff
        table.add_row(
            row.name,
            str(e.n),
            f"{100 * e.value:.1f}%",
            f"[{100 * e.low:.1f}, {100 * e.high:.1f}]",
            f"{100 * d.value:+.1f}" if d else "—",
            f"[{100 * d.low:+.1f}, {100 * d.high:+.1f}]" if d else "—",
        )
    console.print(table)
    console.print(f"wrote {paths['markdown']}, {paths['json']}, {paths['png']}")
    return 0
