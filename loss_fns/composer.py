"""Composer 2.5's combined objective: an RL objective plus α · token-level self-distillation where a reference exists.

Cursor's recipe trains with RLVR and targeted self-distillation (hint-conditioned self-teacher) together. Through
prime-rl's single custom-loss hook this is ``base(inputs) + alpha_sdpo · self_distill(inputs)``; with
``alpha_sdpo = 0`` the base objective's output is returned untouched (bit-identical loss and gradient).
With α > 0 both terms share one pass: the objective's importance ratio feeds the distillation's IS weight, the two
per-token losses are added before one masked sum, and all token metrics are reduced together.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import Field, model_validator
from torch import Tensor

from loss_fns.distill import absent_metrics, has_ref_metric, reference_of, self_distill_coefficient
from loss_fns.kwargs import KWARGS_KEY, LossKwargs, resolve, typed_kwargs
from loss_fns.policy import OBJECTIVES, PolicyTerms, reduce_metrics, token_factor
from loss_fns.types import LossInputs, LossOutputs, make_outputs, masked_sum


class ComposerKwargs(LossKwargs):
    """``[trainer.loss.kwargs]`` of ``composer_loss``; ``objective_kwargs`` are checked by the objective's own model."""

    objective: Literal[tuple(OBJECTIVES)] = "dr_grpo"  # type: ignore[valid-type]  # the Literal is built from OBJECTIVES' names so the two cannot drift; pydantic reads it at runtime
    """The RL objective (a name in ``loss_fns.policy.OBJECTIVES``)."""
    alpha_sdpo: float = Field(0.0, ge=0.0)
    """Weight α of the sampled-token self-distillation term; 0 = the objective alone, bit-identical."""
    is_clip: float | None = Field(2.0, gt=0.0)
    """Cap of the distillation's importance weight π_θ/π_inference; unset = no importance correction."""
    objective_kwargs: dict[str, Any] = {}
    """The objective's own kwargs (``[trainer.loss.kwargs.objective_kwargs]``), validated by its kwargs model."""

    @model_validator(mode="after")
    def _objective_kwargs(self) -> ComposerKwargs:
        model = OBJECTIVES[self.objective].kwargs_model
        prefix = f"{KWARGS_KEY}.objective_kwargs"
        # raises LossKwargsError (a ValueError) naming trainer.loss.kwargs.objective_kwargs.<name>
        object.__setattr__(self, "objective_kwargs", resolve(model, self.objective_kwargs, prefix))
        return self


@typed_kwargs(ComposerKwargs)
def composer_loss(
    inputs: LossInputs, objective: str, alpha_sdpo: float, is_clip: float | None, objective_kwargs: dict[str, Any]
) -> LossOutputs:
    """``objective`` (a name in :data:`loss_fns.policy.OBJECTIVES`) + ``alpha_sdpo`` · sampled-token reverse KL.

    ``objective_kwargs`` go to the objective (TOML: ``[trainer.loss.kwargs.objective_kwargs]``). The distillation
    term is a token SUM like the objective, so both share prime-rl's global token normaliser. Metrics: the
    objective's plus ``distill/*`` when ``alpha_sdpo != 0``.
    """
    base_fn = OBJECTIVES[objective]
    if alpha_sdpo == 0.0:
        return base_fn(inputs, **objective_kwargs)
    ref = reference_of(inputs)
    if ref is None:
        base = base_fn(inputs, **objective_kwargs)
        return make_outputs(base.loss, {**base.metrics, **absent_metrics(is_clip, inputs.trainer_logprobs.device)})
    terms: PolicyTerms = base_fn.terms(inputs, **objective_kwargs)
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
