"""The check's report on the terminal: problems by key, notes, and the channel mix per step."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from crf_prime.check.mix import distilled_share
from crf_prime.check.models import CheckReport


def mix_table(report: CheckReport) -> Table:
    """One row per train source: algo, ratio, group size, expected share and rollouts per step."""
    per_step = f"{report.batch_size} rollouts" if report.batch_size else "batch_size unset"
    table = Table(title=f"Channel mix per step ({per_step}; share = ratio·group_size normalised)")
    for column in ("source", "algo", "ratio", "group_size", "share of rollouts", "rollouts / step"):
        table.add_column(column, justify="left" if column in ("source", "algo") else "right")
    for s in report.train:
        rollouts = f"{s.share * report.batch_size:.1f}" if report.batch_size else "-"
        table.add_row(s.name, s.algo, f"{s.ratio:g}", str(s.group_size), f"{s.share:.1%}", rollouts)
    return table


def print_report(report: CheckReport, console: Console | None = None) -> None:
    console = console or Console(soft_wrap=True)
    if report.train:
        console.print(mix_table(report))
        console.print(
            f"hint-distilled samples (algo opsd): {report.hint_share:.1%} of each step's rollouts", markup=False
        )
        if report.hint_share:
            rates = ", ".join(f"{distilled_share(report.hint_share, p):.1%} at p = {p:g}" for p in (1.0, 0.5))
            console.print(
                f"  a hint rollout without an error site yields no sample; share of trainer samples for an error-site "
                f"rate p: {rates}",
                markup=False,
            )
    if report.eval:
        console.print(f"eval sources: {', '.join(report.eval)}")
    console.print(f"prime-rl RLConfig: {report.rl_config}")
    for note in report.notes:
        console.print(f"note: {note}", markup=False)
    for problem in report.problems:
        console.print(f"error: {problem}", markup=False, style="red")
    verdict = "ready to launch" if report.ok else f"{len(report.problems)} problem(s)"
    console.print(f"crf-prime check: {verdict}", markup=False)
