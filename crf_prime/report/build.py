"""The A/B report: pass@1 per arm with bootstrap CIs, paired differences to a baseline arm, a markdown table, a
JSON summary and a PNG (bars with CI whiskers; train-reward curves over steps when the runs have them)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from crf_prime.extras import require
from crf_prime.outputs import output_dir
from crf_prime.report.load import ArmData, ReportInputError
from crf_prime.report.stats import Estimate, paired_difference, pass_at_1


class ArmRow(BaseModel):
    name: str
    source: str
    samples: int
    unscored: int
    pass_at_1: Estimate
    diff: Estimate | None = None
    """pass@1 − baseline's pass@1 over shared tasks; None for the baseline itself."""


class Report(BaseModel):
    baseline: str
    threshold: float
    """A sample passes when its reward is at least this."""
    confidence: float
    n_boot: int
    arms: list[ArmRow]


def build_report(
    arms: Sequence[ArmData],
    *,
    baseline: str | None = None,
    threshold: float = 1.0,
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Report:
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise ReportInputError(f"runs: arm names must be unique, got {names} (name an arm with NAME=PATH)")
    base_name = baseline or names[0]
    if base_name not in names:
        raise ReportInputError(f"baseline: {base_name!r} is not one of the arms {names}")
    base = next(a for a in arms if a.name == base_name)
    for a in arms:
        if not {s.task for s in a.samples} & {s.task for s in base.samples}:
            raise ReportInputError(f"runs: arm {a.name!r} shares no task with the baseline {base_name!r}")
    kw: dict[str, Any] = {"threshold": threshold, "n_boot": n_boot, "confidence": confidence, "seed": seed}
    rows = [
        ArmRow(
            name=a.name,
            source=a.source,
            samples=len(a.samples),
            unscored=a.unscored,
            pass_at_1=pass_at_1(a.samples, **kw),
            diff=None if a.name == base_name else paired_difference(a.samples, base.samples, **kw),
        )
        for a in arms
    ]
    return Report(baseline=base_name, threshold=threshold, confidence=confidence, n_boot=n_boot, arms=rows)


def _pct(e: Estimate, signed: bool = False) -> tuple[str, str]:
    fmt = "{:+.1f}" if signed else "{:.1f}"
    return fmt.format(100 * e.value), f"[{fmt.format(100 * e.low)}, {fmt.format(100 * e.high)}]"


def markdown(report: Report) -> str:
    ci = f"{round(100 * report.confidence)}% CI"
    lines = [
        f"| arm | tasks | samples | unscored | pass@1 (%) | {ci} | Δ vs {report.baseline} (pp) | {ci} | shared tasks |",
        "|---|---:|---:|---:|---:|---|---:|---|---:|",
    ]
    for row in report.arms:
        p, p_ci = _pct(row.pass_at_1)
        d, d_ci = _pct(row.diff, signed=True) if row.diff else ("—", "—")
        shared = str(row.diff.n) if row.diff else "—"
        lines.append(
            f"| {row.name} | {row.pass_at_1.n} | {row.samples} | {row.unscored} | {p} | {p_ci} | {d} | {d_ci} | {shared} |"
        )
    notes = [
        "",
        f"pass@1 = mean over tasks of the fraction of a task's samples with reward ≥ {report.threshold:g}; "
        f"{ci}: percentile bootstrap over tasks ({report.n_boot} resamples); Δ: paired bootstrap over the tasks "
        f"both arms scored. Unscored episodes (failed before scoring) are excluded, not counted as failures.",
    ]
    return "\n".join(lines + notes) + "\n"


def plot(report: Report, arms: Sequence[ArmData], path: Path) -> None:
    """Bars with CI whiskers; a second panel with train reward over steps when any arm has a curve."""
    matplotlib = require("matplotlib", "report")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # optional host (report extra)

    curves = [a for a in arms if a.curve]
    fig, axes = plt.subplots(1, 2 if curves else 1, figsize=(11 if curves else 6, 4), squeeze=False)
    ax = axes[0][0]
    names = [r.name for r in report.arms]
    values = [100 * r.pass_at_1.value for r in report.arms]
    err = [
        [100 * (r.pass_at_1.value - r.pass_at_1.low) for r in report.arms],
        [100 * (r.pass_at_1.high - r.pass_at_1.value) for r in report.arms],
    ]
    ax.bar(names, values, yerr=err, capsize=6, color="#4C72B0")
    ax.set_ylabel("pass@1 (%)")
    ax.set_title(f"pass@1 with {round(100 * report.confidence)}% bootstrap CI")
    if curves:
        ax2 = axes[0][1]
        for arm in curves:
            steps, rewards = zip(*arm.curve, strict=True)
            ax2.plot(steps, rewards, marker=".", label=arm.name)
        ax2.set_xlabel("step")
        ax2.set_ylabel("mean train reward")
        ax2.set_title("train reward over steps")
        ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


REPORT_MODE = 0o644
"""Mode of the written files: readable by all, like featdel's outputs (mkstemp alone makes them 0600)."""


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, REPORT_MODE)
    os.replace(tmp, path)


def write_report(report: Report, arms: Sequence[ArmData], out_dir: Path) -> dict[str, Path]:
    """report.md, report.json and report.png in ``out_dir``; each file appears whole or not at all."""
    output_dir("out", out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out_dir / "report.md", "json": out_dir / "report.json", "png": out_dir / "report.png"}
    fd, tmp_png = tempfile.mkstemp(dir=out_dir, prefix=".report.png.", suffix=".png")
    os.close(fd)
    try:
        plot(report, arms, Path(tmp_png))
        os.chmod(tmp_png, REPORT_MODE)
        _atomic_write(paths["json"], report.model_dump_json(indent=2).encode())
        _atomic_write(paths["markdown"], markdown(report).encode())
        os.replace(tmp_png, paths["png"])
    finally:
        Path(tmp_png).unlink(missing_ok=True)
    return paths
