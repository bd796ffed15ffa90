"""Policy-gradient objectives for prime-rl's ``[trainer.loss] type = "custom"`` hook (channel 1, RLVR).

Each function takes ONE sequence's 1-D tensors (``LossInputs``) and returns the SUM of its per-token losses over
``loss_mask`` (times ``loss_weights`` when given); prime-rl divides by the global rl-token count of the step.
The behaviour policy π_old is the inference engine's sampling logprobs (prime-rl is asynchronous: there is no
separate "old" trainer pass), so the token ratio is ``r_t = exp(logπ_θ − logπ_inference)``.

Normalisation: summing here and dividing by the global token count N gives ``Σ_{i,t} ℓ_{i,t} / N``. That is exactly
DAPO's and CISPO's token-level mean. ``length_norm=True`` divides each sequence by its own token count |o_i| first,
which gives ``(1/N)·Σ_i mean_t ℓ_{i,t}`` = ``(B/N)·`` the per-sequence mean of GRPO/GSPO: the relative weighting of
sequences is exact, the global factor B/N (1 / mean length) is a per-step constant that a per-sequence hook cannot
see; ``scale`` multiplies the result (e.g. by a typical length) if the magnitude matters. See docs/losses.md.

Only ``trainer_logprobs`` carries gradient: inference logprobs and advantages are detached here.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from loss_fns.types import loss_weights_of, make_outputs, masked_mean, masked_means, masked_sum


def _token_ratio(inputs: Any) -> tuple[Tensor, Tensor]:
    log_ratio = inputs.trainer_logprobs - inputs.inference_logprobs.detach()
    return log_ratio, torch.exp(log_ratio)


def _mask_count(inputs: Any) -> Tensor:
    return inputs.loss_mask.sum().clamp_min(1).to(inputs.trainer_logprobs.dtype)


def _reduce(per_token: Tensor, inputs: Any, length_norm: bool, scale: float) -> Tensor:
    loss = masked_sum(per_token, inputs)
    if length_norm:
        loss = loss / _mask_count(inputs)
    return loss * scale if scale != 1.0 else loss


def _check_clip(clip_low: float, clip_high: float) -> None:
    if not 0.0 <= clip_low < 1.0:
        raise ValueError(f"trainer.loss.kwargs.clip_low must be in [0, 1), got {clip_low}")
    if clip_high < 0.0:
        raise ValueError(f"trainer.loss.kwargs.clip_high must be >= 0, got {clip_high}")


def _clipped_surrogate(
    ratio: Tensor, advantages: Tensor, clip_low: float, clip_high: float
) -> tuple[Tensor, Tensor, Tensor]:
    """PPO's pessimistic surrogate ``−min(r·A, clip(r, 1−ε_low, 1+ε_high)·A)`` and where each clip bound is active."""
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = -torch.minimum(ratio * advantages, clipped * advantages)
    active_high = (ratio > 1.0 + clip_high) & (advantages > 0)
    active_low = (ratio < 1.0 - clip_low) & (advantages < 0)
    return per_token, active_low, active_high


def _ratio_metrics(
    name: str, mask: Tensor, active_low: Tensor, active_high: Tensor, ratio: Tensor, log_ratio: Tensor
) -> dict[str, Tensor]:
    """``<name>/clip_frac_low|clip_frac_high|ratio|mismatch_kl`` (mismatch_kl = r − log r − 1, prime-rl's k3)."""
    ratio, log_ratio = ratio.detach(), log_ratio.detach()
    values = {"clip_frac_low": active_low, "clip_frac_high": active_high, "ratio": ratio}
    values["mismatch_kl"] = ratio - log_ratio - 1
    return {f"{name}/{key}": value for key, value in masked_means(mask, values).items()}


def _clip_objective(name: str, inputs: Any, clip_low: float, clip_high: float, length_norm: bool, scale: float) -> Any:
    _check_clip(clip_low, clip_high)
    log_ratio, ratio = _token_ratio(inputs)
    advantages = inputs.advantages.detach()
    per_token, active_low, active_high = _clipped_surrogate(ratio, advantages, clip_low, clip_high)
    metrics = _ratio_metrics(name, inputs.loss_mask, active_low, active_high, ratio, log_ratio)
    return make_outputs(_reduce(per_token, inputs, length_norm, scale), metrics)


def ppo_clip(
    inputs: Any, clip_low: float = 0.2, clip_high: float = 0.2, length_norm: bool = False, scale: float = 1.0
) -> Any:
    """PPO-clip / GRPO surrogate (Schulman et al. 2017, arXiv:1707.06347; Shao et al. 2024, arXiv:2402.03300).

    ``ℓ_t = −min(r_t·A_t, clip(r_t, 1−clip_low, 1+clip_high)·A_t)``. Token-sum by default (global token mean under
    prime-rl); ``length_norm=True`` gives GRPO's per-sequence mean (up to the per-step factor B/N).
    Metrics: ``ppo_clip/clip_frac_low|clip_frac_high|ratio|mismatch_kl``.
    """
    return _clip_objective("ppo_clip", inputs, clip_low, clip_high, length_norm, scale)


def dr_grpo(inputs: Any, clip_low: float = 0.2, clip_high: float = 0.2, scale: float = 1.0) -> Any:
    """Dr.GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training", arXiv:2503.20783).

    The clipped surrogate summed over tokens with NO length normalisation. The paper divides by the constant
    ``B·L_max``; prime-rl divides by the step's token count N, also one constant for every token of the step, so
    there is no length bias either way: the gradient direction is the paper's and the magnitude differs by
    ``B·L_max/N`` (``scale = N/(B·L_max)`` recovers it when that ratio is known). The other half of Dr.GRPO, no std
    scaling of advantages, is prime-rl's ``grpo`` default (reward minus group mean).
    Metrics: ``dr_grpo/clip_frac_low|clip_frac_high|ratio|mismatch_kl``.
    """
    return _clip_objective("dr_grpo", inputs, clip_low, clip_high, False, scale)


def dapo(
    inputs: Any, clip_low: float = 0.2, clip_high: float = 0.28, length_norm: bool = False, scale: float = 1.0
) -> Any:
    """DAPO (Yu et al. 2025, arXiv:2503.14476): clip-higher ε_low = 0.2, ε_high = 0.28, token-level loss.

    The paper's global token mean ``Σ_{i,t} ℓ / Σ_i |o_i|`` is exactly what prime-rl computes from this sum.
    Dynamic sampling and overlong shaping are orchestrator/environment features, not part of the loss.
    Metrics: ``dapo/clip_frac_low|clip_frac_high|ratio|mismatch_kl``.
    """
    return _clip_objective("dapo", inputs, clip_low, clip_high, length_norm, scale)


def gspo(
    inputs: Any,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    variant: str = "sequence",
    length_norm: bool = True,
    scale: float = 1.0,
) -> Any:
    """GSPO (Zheng et al. 2025, arXiv:2507.18071): sequence-level importance ratio, ε = 3e-4 / 4e-4 (paper §5.1).

    ``s = exp(mean_t log r_t)`` over the masked tokens, ``A`` = the masked mean of the advantages (the sequence's
    advantage, broadcast per token by prime-rl). ``variant="sequence"``: ``ℓ = −min(s·A, clip(s)·A)`` on every
    token. ``variant="token"`` (GSPO-token): ``s_t = sg[s]·π_θ(y_t)/sg[π_θ(y_t)]`` with per-token advantages,
    equal in value to ``s`` but with each token's own gradient path. ``length_norm=True`` (default) gives the
    paper's per-sequence mean up to the per-step factor B/N; ``False`` weights sequences by length.
    Metrics: ``gspo/clip_frac_low|clip_frac_high|seq_ratio|mismatch_kl``.
    """
    if variant not in ("sequence", "token"):
        raise ValueError(f"trainer.loss.kwargs.variant must be 'sequence' or 'token', got {variant!r}")
    _check_clip(clip_low, clip_high)
    mask = inputs.loss_mask
    log_ratio, ratio = _token_ratio(inputs)
    count = _mask_count(inputs)
    seq_log_ratio = torch.where(mask, log_ratio, 0.0).sum() / count
    seq_ratio = torch.exp(seq_log_ratio)
    if variant == "token":
        lp = inputs.trainer_logprobs
        s = seq_ratio.detach() * torch.exp(lp - lp.detach())
        per_token, active_low, active_high = _clipped_surrogate(s, inputs.advantages.detach(), clip_low, clip_high)
        loss = _reduce(per_token, inputs, length_norm, scale)
    else:
        # one scalar surrogate per sequence, counted once per (weighted) token: Σ_t m_t·w_t·ℓ
        weights = loss_weights_of(inputs)
        token_mass = mask.sum().to(count.dtype) if weights is None else torch.where(mask, weights.detach(), 0.0).sum()
        advantage = torch.where(mask, inputs.advantages.detach(), 0.0).sum() / count
        seq_loss, active_low, active_high = _clipped_surrogate(seq_ratio, advantage, clip_low, clip_high)
        loss = seq_loss * (token_mass / count if length_norm else token_mass)
        loss = loss * scale if scale != 1.0 else loss
    if variant == "token":
        metrics = _ratio_metrics("gspo", mask, active_low, active_high, ratio, log_ratio)
        del metrics["gspo/ratio"]
    else:  # sequence variant: the clip is one decision per sequence
        metrics = {
            "gspo/clip_frac_low": active_low.to(torch.float32),
            "gspo/clip_frac_high": active_high.to(torch.float32),
            "gspo/mismatch_kl": masked_mean((ratio - log_ratio - 1).detach(), mask),
        }
    metrics["gspo/seq_ratio"] = seq_ratio.detach().to(torch.float32)
    return make_outputs(loss, metrics)


def cispo(
    inputs: Any,
    ratio_max: float = 5.0,
    ratio_min: float | None = None,
    length_norm: bool = False,
    scale: float = 1.0,
) -> Any:
    """CISPO (MiniMax-M1, arXiv:2506.13585): ``ℓ_t = −sg[clip(r_t, ratio_min, ratio_max)]·A_t·logπ_θ(y_t)``.

    REINFORCE with a clipped, detached importance weight: no token leaves the gradient. ``ratio_max`` is the
    upper bound of the ratio itself (1 + ε_high; ScaleRL / TRL use 5.0); ``ratio_min=None`` means no lower bound,
    as in the paper. Token-level global mean, which prime-rl's division gives exactly.
    Metrics: ``cispo/clip_frac_low|clip_frac_high|ratio|mismatch_kl``.
    """
    if ratio_max <= 0 or (ratio_min is not None and not 0 <= ratio_min <= ratio_max):
        raise ValueError(
            f"trainer.loss.kwargs.ratio_max/ratio_min must satisfy 0 <= ratio_min <= ratio_max, "
            f"got ratio_min={ratio_min}, ratio_max={ratio_max}"
        )
    mask = inputs.loss_mask
    log_ratio, ratio = _token_ratio(inputs)
    weight = torch.clamp(ratio.detach(), min=ratio_min, max=ratio_max)
    per_token = -weight * inputs.advantages.detach() * inputs.trainer_logprobs
    low = ratio < ratio_min if ratio_min is not None else torch.zeros_like(mask)
    metrics = _ratio_metrics("cispo", mask, low, ratio > ratio_max, ratio, log_ratio)
    return make_outputs(_reduce(per_token, inputs, length_norm, scale), metrics)


OBJECTIVES = {"ppo_clip": ppo_clip, "dr_grpo": dr_grpo, "dapo": dapo, "gspo": gspo, "cispo": cispo}
"""Objective name → function, for :func:`loss_fns.composer.composer_loss`."""
