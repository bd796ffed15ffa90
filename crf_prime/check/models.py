"""The check's own settings and its report (pydantic at the edges)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from crf_prime.check.mix import SourceShare


class CheckConfig(BaseModel):
    """``crf-prime check`` settings, given as ``--check.<field> VALUE`` beside the run's own ``@ file`` / ``--key``."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    base_dir: Path = Path(".")
    """Launch directory of ``uv run rl``: relative task, states, journal and teachers paths resolve against it."""
    prime_rl: Literal["auto", "require", "skip"] = "auto"
    """Validate with prime-rl's own ``RLConfig``: when importable (auto; ``CRF_PRIME_RL_SRC`` names a source
    checkout), always (require: an error when it is not importable) or never (skip)."""


class Problem(BaseModel):
    """One thing that would fail the run, under the config key that causes it."""

    model_config = ConfigDict(frozen=True)

    key: str
    """Dotted TOML key (``trainer.loss.kwargs.clip_high``, ``orchestrator.train.source[1].env.taskset.tasks``)."""
    message: str
    """What is wrong and, where useful, what was given."""

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


class CheckReport(BaseModel):
    """Everything ``crf-prime check`` found: problems (empty = ready to launch), notes, and the channel mix."""

    problems: list[Problem] = []
    """Errors, each naming its key; the command exits 1 when there is any."""
    notes: list[str] = []
    """What was or was not checked (e.g. prime-rl not importable, a loss without a typed kwargs model)."""
    rl_config: Literal["validated", "skipped", "failed"] = "skipped"
    """Whether prime-rl's ``RLConfig`` validated the composed config."""
    batch_size: int | None = None
    """``orchestrator.batch_size``: rollouts per step."""
    train: list[SourceShare] = []
    """Training sources and their expected share of each step's rollouts."""
    eval: list[str] = []
    """Names of the eval sources."""

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def hint_share(self) -> float:
        """Expected share of a step's rollouts that carry hint distillation (sources with ``algo.type = "opsd"``)."""
        return sum(s.share for s in self.train if s.algo == "opsd")
