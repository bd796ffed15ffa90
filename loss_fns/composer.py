"""Composer 2.5's combined objective: an RL objective plus α · token-level self-distillation where a reference exists.

Cursor's recipe trains with RLVR and targeted self-distillation (hint-conditioned self-teacher) together. Through
prime-rl's single custom-loss hook this is ``base(inputs) + alpha_sdpo · self_distill(inputs)``; with
``alpha_sdpo = 0`` the base objective's output is returned untouched (bit-identical loss and gradient).
With α > 0 both terms share one pass: the objective's importance ratio feeds the distillation's IS weight, the two
per-token losses are added before one masked sum, and all token metrics are reduced together.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from loss_fns.distill import absent_metrics, has_ref_metric, reference_of, self_distill_coefficient
from loss_fns.policy import OBJECTIVES, PolicyTerms, reduce_metrics, token_factor
from loss_fns.types import make_outputs, masked_sum


def composer_loss(
    inputs: Any,
    objective: str = "dr_grpo",
    alpha_sdpo: float = 0.0,
    is_clip: float | None = 2.0,
    objective_kwargs: dict[str, Any] | None = None,
) -> Any:
    """``objective`` (a name in :data:`loss_fns.policy.OBJECTIVES`) + ``alpha_sdpo`` · sampled-token reverse KL.

    ``objective_kwargs`` go to the objective (TOML: ``[trainer.loss.kwargs.objective_kwargs]``). The distillation
    term is a token SUM like the objective, so both share prime-rl's global token normaliser. Metrics: the
    objective's plus ``distill/*`` when ``alpha_sdpo != 0``.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"trainer.loss.kwargs.objective must be one of {sorted(OBJECTIVES)}, got {objective!r}")
    if alpha_sdpo < 0:
        raise ValueError(f"trainer.loss.kwargs.alpha_sdpo must be >= 0, got {alpha_sdpo}")
    kwargs = objective_kwargs or {}
    base_fn = OBJECTIVES[objective]
    if alpha_sdpo == 0.0:
        return base_fn(inputs, **kwargs)
    if is_clip is not None and is_clip <= 0:
        raise ValueError(f"trainer.loss.kwargs.is_clip must be > 0 or None, got {is_clip}")
    ref = reference_of(inputs)
    if ref is None:
        base = base_fn(inputs, **kwargs)
        return make_outputs(base.loss, {**base.metrics, **absent_metrics(is_clip, inputs.trainer_logprobs.device)})
    terms: PolicyTerms = base_fn.terms(inputs, **kwargs)
    coefficient, rows = self_distill_coefficient(inputs, ref, is_clip, ratio=terms.ratio)
    # Σ m·w·(f·ℓ_base + α·c·logπ_θ) = base loss + α · self-distillation loss, f = the objective's reduction factor
    per_token = torch.addcmul(
        _scaled(terms.per_token, token_factor(terms)), coefficient, inputs.trainer_logprobs, value=alpha_sdpo
    )
    metrics = {**reduce_metrics(terms, inputs.loss_mask, rows), "distill/has_ref": has_ref_metric(inputs)}
    return make_outputs(masked_sum(per_token, inputs), metrics)


def _scaled(per_token: Tensor, factor: Tensor | float) -> Tensor:
    """``factor · ℓ`` (``ℓ`` unchanged when the factor is the float 1.0, the token-sum objectives' case)."""
    return per_token if isinstance(factor, float) and factor == 1.0 else per_token * factor
