"""Composer 2.5's combined objective: an RL objective plus α · token-level self-distillation where a reference exists.

Cursor's recipe trains with RLVR and targeted self-distillation (hint-conditioned self-teacher) together. Through
prime-rl's single custom-loss hook this is ``base(inputs) + alpha_sdpo · self_distill(inputs)``; with
``alpha_sdpo = 0`` the base objective's output is returned untouched (bit-identical loss and gradient).
"""

from __future__ import annotations

from typing import Any

from loss_fns.distill import absent_metrics, reference_of, self_distill_terms
from loss_fns.policy import OBJECTIVES
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
    base = OBJECTIVES[objective](inputs, **(objective_kwargs or {}))
    if alpha_sdpo == 0.0:
        return base
    ref = reference_of(inputs)
    metrics = dict(base.metrics)
    if ref is None:
        metrics.update(absent_metrics(is_clip, inputs.trainer_logprobs.device))
        return make_outputs(base.loss, metrics)
    per_token, distill_metrics = self_distill_terms(inputs, ref, is_clip)
    metrics.update(distill_metrics)
    return make_outputs(base.loss + alpha_sdpo * masked_sum(per_token, inputs), metrics)
