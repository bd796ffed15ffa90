"""The channel mix per step, with prime-rl's sampling semantics.

prime-rl's ``TrainSource.next_task`` (orchestrator/train_source.py) draws the source of each TASK with probability
``ratio / Σ ratio``; the dispatcher then generates ``group_size`` rollouts for that task (dispatcher.py). So a source's
expected share of rollouts is ``ratio·group_size / Σ ratio·group_size``, not its ratio.
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
