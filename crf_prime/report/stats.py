"""pass@1 with task-level bootstrap confidence intervals, and the paired difference between two arms.

pass@1 of a task with n samples and c successes is c/n (the unbiased pass@k estimator of Chen et al. 2021 at k=1);
an arm's pass@1 is the mean over tasks. Tasks are the resampling unit (samples of one task are not independent).
The paired difference resamples the tasks both arms share, with the same draw for both arms, so task difficulty
cancels (Efron & Tibshirani 1993, ch. 13; the "paired bootstrap" of Koehn 2004 for MT evaluation).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from crf_prime.report.load import Sample


class Estimate(BaseModel):
    """A point estimate with a percentile bootstrap interval."""

    model_config = ConfigDict(frozen=True)

    value: float
    low: float
    high: float
    n: int
    """Tasks the estimate is over."""


def per_task_pass(samples: Sequence[Sample], threshold: float) -> dict[str, float]:
    """Task -> fraction of its samples whose reward reaches ``threshold`` (pass@1 of that task)."""
    hits: dict[str, list[float]] = defaultdict(list)
    for s in samples:
        hits[s.task].append(1.0 if s.reward >= threshold - 1e-9 else 0.0)
    return {task: float(np.mean(v)) for task, v in hits.items()}


def _interval(values: np.ndarray, boot: np.ndarray, confidence: float) -> Estimate:
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(boot, [alpha, 1.0 - alpha]) if len(boot) else (np.nan, np.nan)
    return Estimate(value=float(values.mean()), low=float(low), high=float(high), n=len(values))


def bootstrap_mean(values: Sequence[float], *, n_boot: int = 2000, confidence: float = 0.95, seed: int = 0) -> Estimate:
    """Mean of per-task values with a percentile bootstrap CI over tasks."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        raise ValueError("no tasks to estimate over")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, arr.size, size=(n_boot, arr.size))
    return _interval(arr, arr[idx].mean(axis=1), confidence)


def pass_at_1(
    samples: Sequence[Sample], *, threshold: float = 1.0, n_boot: int = 2000, confidence: float = 0.95, seed: int = 0
) -> Estimate:
    return bootstrap_mean(
        list(per_task_pass(samples, threshold).values()), n_boot=n_boot, confidence=confidence, seed=seed
    )


def paired_difference(
    arm: Sequence[Sample],
    baseline: Sequence[Sample],
    *,
    threshold: float = 1.0,
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Estimate:
    """pass@1(arm) − pass@1(baseline) over the tasks both arms scored, with a paired bootstrap CI."""
    a, b = per_task_pass(arm, threshold), per_task_pass(baseline, threshold)
    common = sorted(a.keys() & b.keys())
    if not common:
        raise ValueError("the two arms share no task: a paired difference is undefined")
    return bootstrap_mean([a[t] - b[t] for t in common], n_boot=n_boot, confidence=confidence, seed=seed)
