"""The loss contract: ``LossInputs`` / ``LossOutputs`` from prime-rl when importable, else identical fallbacks.

prime-rl (``src/prime_rl/trainer/rl/loss.py``, stable since 2026-06-27) calls a custom loss once per sequence of a
packed micro-batch with 1-D per-token tensors and divides the returned SUM by the global rl-token count. When
prime-rl is not importable (CPU tests, other trainers) the fallback dataclasses below have the same fields, order
and defaults, and ``isinstance`` against them also accepts prime-rl's own instances, so code written against
``loss_fns.types`` works whichever side created the object.

The 2026-05/06 API (``setup_loss_fns`` era) named the reference stream ``teacher_logprobs`` and had no
``loss_weights``; :func:`ref_logprobs_of` and :func:`loss_weights_of` read either shape.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

PRIME_RL_LOSS_MODULE = "prime_rl.trainer.rl.loss"


class _StructuralMeta(type):
    """``isinstance(x, Fallback)`` is true for the fallback itself and for prime-rl's class of the same name."""

    def __instancecheck__(cls, instance: Any) -> bool:
        if type.__instancecheck__(cls, instance):
            return True
        other = type(instance)
        return other.__name__ == cls.__name__ and other.__module__ == PRIME_RL_LOSS_MODULE


@dataclass
class _FallbackLossInputs(metaclass=_StructuralMeta):
    """Inputs for one sequence (field-for-field prime-rl's ``LossInputs``); all tensors are 1-D ``[seq]``."""

    trainer_logprobs: Tensor
    inference_logprobs: Tensor
    ref_logprobs: Tensor | None
    advantages: Tensor
    loss_mask: Tensor
    loss_weights: Tensor | None = field(default=None)


@dataclass
class _FallbackLossOutputs(metaclass=_StructuralMeta):
    """Scalar loss (a SUM over the sequence's tokens) and per-sequence metrics."""

    loss: Tensor
    metrics: dict[str, Tensor]


_FallbackLossInputs.__name__ = _FallbackLossInputs.__qualname__ = "LossInputs"
_FallbackLossOutputs.__name__ = _FallbackLossOutputs.__qualname__ = "LossOutputs"


def _import_prime_rl() -> tuple[type, type] | None:
    try:
        from prime_rl.trainer.rl.loss import LossInputs as PrimeLossInputs  # optional host (prime-rl extra)
        from prime_rl.trainer.rl.loss import LossOutputs as PrimeLossOutputs  # optional host (prime-rl extra)
    except ImportError:
        return None
    return PrimeLossInputs, PrimeLossOutputs


_prime = _import_prime_rl()
HAS_PRIME_RL: bool = _prime is not None
"""True when prime-rl's loss module was importable when ``loss_fns`` was first imported."""

LossInputs: type = _prime[0] if _prime else _FallbackLossInputs
LossOutputs: type = _prime[1] if _prime else _FallbackLossOutputs


def make_outputs(loss: Tensor, metrics: dict[str, Tensor]) -> Any:
    """Build a ``LossOutputs`` of the class the caller expects.

    prime-rl has always imported its loss module before it calls us, so when that module is loaded now (even if it
    was not importable when ``loss_fns`` was imported) its own class is used.
    """
    module = sys.modules.get(PRIME_RL_LOSS_MODULE)
    cls = getattr(module, "LossOutputs", None) or LossOutputs
    return cls(loss=loss, metrics=metrics)


def ref_logprobs_of(inputs: Any) -> Tensor | None:
    """Reference logprobs of either API era: ``ref_logprobs`` (HEAD) or ``teacher_logprobs`` (2026-05/06)."""
    ref = getattr(inputs, "ref_logprobs", None)
    return ref if ref is not None else getattr(inputs, "teacher_logprobs", None)


def loss_weights_of(inputs: Any) -> Tensor | None:
    """Per-token weights; absent in the 2026-05/06 API, where every token weighs 1."""
    return getattr(inputs, "loss_weights", None)


def masked_sum(per_token: Tensor, inputs: Any) -> Tensor:
    """Σ_t m_t · w_t · ℓ_t — the sum prime-rl expects; masked tokens contribute exact zeros (and zero gradient)."""
    weights = loss_weights_of(inputs)
    if weights is not None:
        per_token = per_token * weights.detach()
    return torch.where(inputs.loss_mask, per_token, 0.0).sum()


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` over ``mask`` (0 on an empty mask); detached, for metrics."""
    return torch.where(mask, values.detach().to(torch.float32), 0.0).sum() / mask.sum().clamp_min(1)


def masked_means(mask: Tensor, values: dict[str, Tensor], count: Tensor | None = None) -> dict[str, Tensor]:
    """:func:`masked_mean` of several ``[seq]`` tensors (any dtype, bool included) in one stacked reduction.

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
