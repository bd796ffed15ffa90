"""``crf-prime report --runs [NAME=]PATH ... --out DIR``: the A/B report over ladder arms."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field
from pydantic_config import BaseConfig

from crf_prime.clihelp import print_next


class ReportConfig(BaseConfig):
    runs: Annotated[list[str], Field(min_length=1)]
    """One arm per entry, ``[NAME=]PATH``: a vf-eval results dir, a prime-rl run dir or a traces.jsonl (default
    name: the directory name). The first is the baseline unless ``baseline`` names another."""
    out: Path
    """Directory that receives report.md, report.json and report.png."""
    baseline: str | None = None
    """Arm the paired differences are taken against (default: the first)."""
    threshold: float = 1.0
    """Reward at or above which a sample passes."""
    reward: str | None = None
    """Score one named reward instead of the weighted sum of all rewards."""
    env: str | None = None
    """Only episodes of this environment id (e.g. ``feature-deletion``)."""
    step: Annotated[int, Field(ge=0)] | None = None
    """prime-rl runs: eval step to report (default: the last one)."""
    n_boot: Annotated[int, Field(ge=100)] = 2000
    """Bootstrap resamples."""
    confidence: Annotated[float, Field(gt=0, lt=1)] = 0.95
    """Interval coverage."""
    seed: int = 0
    """Seed of the bootstrap."""


def arm(spec: str) -> tuple[str, Path]:
    """``NAME=PATH`` or ``PATH`` (named after its directory, or a traces file's directory)."""
    name, sep, path = spec.partition("=")
    if not sep:
        path = spec
        p = Path(spec)
        name = (p.parent.name if p.is_file() else p.name) or str(p)
    return name, Path(path)


def run(config: ReportConfig) -> int:
    """pass@1 per arm with bootstrap CIs and paired differences to a baseline (markdown + JSON + PNG)."""
    from rich.console import Console  # start-up: +341 ms on every command
    from rich.markup import escape  # start-up: +140 ms on every command
    from rich.table import Table  # start-up: +55 ms on every command

    from crf_prime.report import build_report, load_arm, write_report  # start-up: not loaded by every command

    console = Console()
    arms = [
        load_arm(name, path, step=config.step, reward_name=config.reward, env=config.env)
        for name, path in map(arm, config.runs)
    ]
    report = build_report(
        arms,
        baseline=config.baseline,
        threshold=config.threshold,
        n_boot=config.n_boot,
        confidence=config.confidence,
        seed=config.seed,
    )
    paths = write_report(report, arms, config.out)
    table = Table(title=f"pass@1 (Δ vs {report.baseline}, paired)")
    for col in ("arm", "tasks", "pass@1", "CI", "Δ", "CI"):
        table.add_column(col)
    for row in report.arms:
        e, d = row.pass_at_1, row.diff
        table.add_row(
            escape(row.name),
            str(e.n),
            f"{100 * e.value:.1f}%",
            f"[{100 * e.low:.1f}, {100 * e.high:.1f}]",
            f"{100 * d.value:+.1f}" if d else "—",
            f"[{100 * d.low:+.1f}, {100 * d.high:+.1f}]" if d else "—",
        )
    console.print(table)

    print_next(
        f"wrote {paths['markdown']}, {paths['json']}, {paths['png']}",
        [(f"cat {paths['markdown']}", "the table with CIs and paired differences, ready to paste")],
    )
    return 0
