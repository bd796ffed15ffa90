"""The loss contract: ``LossInputs`` / ``LossOutputs`` as protocols that prime-rl's dataclasses satisfy.

prime-rl (``src/prime_rl/trainer/rl/loss.py``, stable since 2026-06-27) calls a custom loss once per sequence of a
packed micro-batch with 1-D per-token tensors and divides the returned SUM by the global rl-token count. Losses are
typed against the :class:`LossInputs` protocol (the fields every API era has), so they accept prime-rl's own
instances and :class:`SequenceInputs`, the field-for-field dataclass tests and other trainers build; they return
prime-rl's ``LossOutputs`` when its loss module is loaded, else :class:`SequenceOutputs` (see :func:`make_outputs`).

The 2026-05/06 API (``setup_loss_fns`` era) named the reference stream ``teacher_logprobs`` and had no
``loss_weights``; :func:`ref_logprobs_of` and :func:`loss_weights_of` read either shape.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

PRIME_RL_LOSS_MODULE = "prime_rl.trainer.rl.loss"


@runtime_checkable
class LossInputs(Protocol):
    """One sequence's 1-D ``[seq]`` tensors, as every prime-rl API era passes them (read-only here)."""

    @property
    def trainer_logprobs(self) -> Tensor: ...
    @property
    def inference_logprobs(self) -> Tensor: ...
    @property
    def advantages(self) -> Tensor: ...
    @property
    def loss_mask(self) -> Tensor: ...


@runtime_checkable
class LossOutputs(Protocol):
    """Scalar loss (a SUM over the sequence's tokens) and per-sequence metrics."""

    @property
    def loss(self) -> Tensor: ...
    @property
    def metrics(self) -> dict[str, Tensor]: ...


@dataclass
class SequenceInputs:
    """Inputs for one sequence, field-for-field (order and defaults) prime-rl's current ``LossInputs``."""

    trainer_logprobs: Tensor
    inference_logprobs: Tensor
    ref_logprobs: Tensor | None
    advantages: Tensor
    loss_mask: Tensor
    loss_weights: Tensor | None = field(default=None)


@dataclass
class SequenceOutputs:
    """A loss's result when prime-rl's loss module is not loaded, field-for-field its ``LossOutputs``."""

    loss: Tensor
    metrics: dict[str, Tensor]


def make_outputs(loss: Tensor, metrics: dict[str, Tensor]) -> LossOutputs:
    """Build a ``LossOutputs`` of the class the caller expects.

    prime-rl has always imported its loss module before it calls us, so when that module is loaded its own class is
    used; otherwise (tests, other trainers) :class:`SequenceOutputs`.
    """
    module = sys.modules.get(PRIME_RL_LOSS_MODULE)
    cls = getattr(module, "LossOutputs", None) or SequenceOutputs
    outputs: LossOutputs = cls(loss=loss, metrics=metrics)
    return outputs


def ref_logprobs_of(inputs: LossInputs) -> Tensor | None:
    """Reference logprobs of either API era: ``ref_logprobs`` (HEAD) or ``teacher_logprobs`` (2026-05/06)."""
    ref = getattr(inputs, "ref_logprobs", None)
    return ref if ref is not None else getattr(inputs, "teacher_logprobs", None)


def loss_weights_of(inputs: LossInputs) -> Tensor | None:
    """Per-token weights; absent in the 2026-05/06 API, where every token weighs 1."""
    return getattr(inputs, "loss_weights", None)


def masked_sum(per_token: Tensor, inputs: LossInputs) -> Tensor:
    """Σ_t m_t · w_t · ℓ_t — the sum prime-rl expects; masked tokens contribute exact zeros (and zero gradient)."""
    weights = loss_weights_of(inputs)
    if weights is not None:
        per_token = per_token * weights.detach()
    return torch.where(inputs.loss_mask, per_token, 0.0).sum()


def masked_means(mask: Tensor, values: dict[str, Tensor], count: Tensor | None = None) -> dict[str, Tensor]:
    """Means of several ``[seq]`` tensors (any dtype, bool included) over ``mask`` (0 on an empty mask), in one
    stacked reduction, for metrics.

    ``count`` is the mask's token count (at least 1) when the caller already has it. Float32 results, no grad.
    """
    if not values:
        return {}
    with torch.no_grad():
        stacked = torch.stack(list(values.values()))
        if stacked.dtype not in (torch.float32, torch.float64):
            stacked = stacked.to(torch.float32)
        denom = mask.sum().clamp_min(1) if count is None else count
        means = (torch.where(mask, stacked, 0.0).sum(-1) / denom).to(torch.float32)
    return dict(zip(values, means.unbind(0), strict=True))
