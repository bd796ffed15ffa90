"""The channel mix per step, with prime-rl's sampling semantics.

prime-rl's ``TrainSource.next_task`` (orchestrator/train_source.py) draws the source of each TASK with probability
``ratio / Σ ratio``; the dispatcher then generates ``group_size`` rollouts for that task (dispatcher.py). So a source's
expected share of rollouts is ``ratio·group_size / Σ ratio·group_size``, not its ratio.

A hint (opsd) rollout becomes a trainer sample only when it has an error site (``hint_target = "error_turns"``), and
the batch fills up with the other sources' samples instead, so the hint-distilled share of a step's samples also
depends on the policy's error-site rate (``distilled_share``).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict


class SourceShare(BaseModel):
    """One training source and its expected share of a step's rollouts."""

    model_config = ConfigDict(frozen=True)

    name: str
    algo: str
    """Training algorithm (the source's ``algo.type``, else ``orchestrator.algo.type``)."""
    ratio: float
    """Task sampling weight (``[[orchestrator.train.source]] ratio``)."""
    group_size: int
    """Rollouts per task."""
    share: float
    """Expected share of the step's rollouts: ``ratio·group_size / Σ ratio·group_size``."""


def channel_mix(sources: Sequence[tuple[str, str, float, int]]) -> list[SourceShare]:
    """``(name, algo, ratio, group_size)`` per source → each source's expected rollout share."""
    total = sum(ratio * group_size for _, _, ratio, group_size in sources)
    return [
        SourceShare(name=name, algo=algo, ratio=ratio, group_size=group_size, share=ratio * group_size / total)
        for name, algo, ratio, group_size in sources
    ]


def distilled_share(hint_share: float, error_rate: float, kept: float = 1.0) -> float:
    """Share of a step's trainer samples that are hint-distilled: ``ρ·p / (ρ·p + (1 − ρ)·q)``.

    ``hint_share`` ρ: the opsd sources' share of rollouts; ``error_rate`` p: the share of hint rollouts with an error
    site (the others yield no sample); ``kept`` q: the share of the other rollouts that reach the trainer (prime-rl's
    ``filter_zero_advantages`` drops GRPO samples of groups whose rewards were all equal).
    """
    distilled = hint_share * error_rate
    rest = (1.0 - hint_share) * kept
    return distilled / (distilled + rest) if distilled + rest else 0.0
