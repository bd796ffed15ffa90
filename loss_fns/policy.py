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

Each objective is written as a builder of :class:`PolicyTerms` (per-token loss, reduction, metric rows) and wrapped
by :func:`objective` into prime-rl's ``fn(inputs, **kwargs) -> LossOutputs``; the builder stays reachable as
``fn.terms`` so :func:`loss_fns.composer.composer_loss` can add its distillation term and reduce once.
Only ``trainer_logprobs`` carries gradient: inference logprobs and advantages are detached here; metrics are
computed under ``no_grad``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, cast

import torch
from pydantic import Field, model_validator
from torch import Tensor

from loss_fns.kwargs import LossKwargs, TypedLoss, kwargs_signature, resolve
from loss_fns.types import LossInputs, LossOutputs, loss_weights_of, make_outputs, masked_means, masked_sum


@dataclass(frozen=True)
class PolicyTerms:
    """One sequence's objective before reduction: ``loss = scale · Σ_t m_t·w_t·ℓ_t (/ count if length_norm)``."""

    per_token: Tensor
    """``ℓ_t``, ``[seq]``; 0-d when every token carries the same value (GSPO's sequence surrogate)."""
    ratio: Tensor
    """``r_t = exp(logπ_θ − logπ_inference)``, ``[seq]``, in the graph (detach before reuse)."""
    count: Tensor
    """Loss-mask token count |o_i|, at least 1, in the logprobs' dtype."""
    length_norm: bool
    """Divide the token sum by ``count`` (the paper's per-sequence mean, up to the per-step factor B/N)."""
    scale: float
    """Multiplier of the reduced loss."""
    token_metrics: dict[str, Tensor]
    """Metric name → ``[seq]`` values whose masked mean is reported (reduced under ``no_grad``)."""
    metrics: dict[str, Tensor] = field(default_factory=dict)
    """Metric name → finished 0-d value."""


def token_factor(terms: PolicyTerms) -> Tensor | float:
    """The factor the reduction applies to the token sum (``scale / count`` or ``scale``)."""
    return terms.scale / terms.count if terms.length_norm else terms.scale


def reduce_loss(terms: PolicyTerms, inputs: LossInputs) -> Tensor:
    """The sequence's loss SUM; a 0-d ``per_token`` counts once per (weighted) loss token."""
    if terms.per_token.dim() == 0:
        loss = terms.per_token * token_mass(inputs)
    else:
        loss = masked_sum(terms.per_token, inputs)
    if terms.length_norm:
        loss = loss / terms.count
    return loss * terms.scale if terms.scale != 1.0 else loss


def reduce_metrics(terms: PolicyTerms, mask: Tensor, extra: dict[str, Tensor] | None = None) -> dict[str, Tensor]:
    """Masked means of ``terms.token_metrics`` (and ``extra`` rows) in one reduction, then the finished scalars."""
    rows = terms.token_metrics if extra is None else {**terms.token_metrics, **extra}
    return {**masked_means(mask, rows, terms.count), **terms.metrics}


class Objective(TypedLoss, Protocol):
    """A policy objective: a :class:`TypedLoss` whose terms builder stays reachable (``composer_loss`` reuses it)."""

    terms: Callable[..., PolicyTerms]


def objective(model: type[LossKwargs]) -> Callable[[Callable[..., PolicyTerms]], Objective]:
    """prime-rl's ``fn(inputs, **kwargs) -> LossOutputs`` from a terms builder whose kwargs ``model`` types.

    The kwargs are validated once per distinct value (:func:`loss_fns.kwargs.resolve`); the builder stays at
    ``fn.terms`` (it takes every field of the validated kwargs) and the model at ``fn.kwargs_model``.
    """

    def wrap(build: Callable[..., PolicyTerms]) -> Objective:
        @functools.wraps(build)
        def loss_fn(inputs: LossInputs, **kwargs: Any) -> LossOutputs:
            terms = build(inputs, **resolve(model, kwargs))
            return make_outputs(reduce_loss(terms, inputs), reduce_metrics(terms, inputs.loss_mask))

        typed = cast(Objective, loss_fn)
        typed.terms = build
        typed.kwargs_model = model
        typed.__signature__ = kwargs_signature(model)
        return typed

    return wrap


class ClipKwargs(LossKwargs):
    """``[trainer.loss.kwargs]`` of the PPO-clipped objectives (``ppo_clip``, ``dapo``)."""

    clip_low: float = Field(0.2, ge=0.0, lt=1.0)
    """ε_low: the ratio is clipped below at ``1 − clip_low``."""
    clip_high: float = Field(0.2, ge=0.0)
    """ε_high: the ratio is clipped above at ``1 + clip_high`` (DAPO's clip-higher uses 0.28)."""
    length_norm: bool = False
    """Divide each sequence's token sum by its loss-token count (GRPO's per-sequence mean, up to B/N)."""
    scale: float = Field(1.0, gt=0.0)
    """Multiplier of the reduced loss."""


class DapoKwargs(ClipKwargs):
    """``[trainer.loss.kwargs]`` of ``dapo``: clip-higher by default."""

    clip_high: float = Field(0.28, ge=0.0)
    """ε_high: the ratio is clipped above at ``1 + clip_high`` (the paper's 0.28)."""


class DrGRPOKwargs(LossKwargs):
    """``[trainer.loss.kwargs]`` of ``dr_grpo`` (never length-normalised)."""

    clip_low: float = Field(0.2, ge=0.0, lt=1.0)
    """ε_low: the ratio is clipped below at ``1 − clip_low``."""
    clip_high: float = Field(0.2, ge=0.0)
    """ε_high: the ratio is clipped above at ``1 + clip_high``."""
    scale: float = Field(1.0, gt=0.0)
    """Multiplier of the summed loss (``N/(B·L_max)`` recovers the paper's magnitude)."""


class GSPOKwargs(LossKwargs):
    """``[trainer.loss.kwargs]`` of ``gspo``."""

    clip_low: float = Field(3e-4, ge=0.0, lt=1.0)
    """ε_low of the sequence ratio (paper §5.1: 3e-4)."""
    clip_high: float = Field(4e-4, ge=0.0)
    """ε_high of the sequence ratio (paper §5.1: 4e-4)."""
    variant: Literal["sequence", "token"] = "sequence"
    """``sequence``: one clipped surrogate per sequence; ``token``: GSPO-token, per-token advantages and gradients."""
    length_norm: bool = True
    """Per-sequence mean (the paper's, up to B/N); False weights sequences by length."""
    scale: float = Field(1.0, gt=0.0)
    """Multiplier of the reduced loss."""


class CISPOKwargs(LossKwargs):
    """``[trainer.loss.kwargs]`` of ``cispo``."""

    ratio_max: float = Field(5.0, gt=0.0)
    """Upper bound of the detached importance weight (1 + ε_high; ScaleRL / TRL use 5.0)."""
    ratio_min: float | None = Field(None, ge=0.0)
    """Lower bound of the weight; unset = none, as in the paper."""
    length_norm: bool = False
    """Divide each sequence's token sum by its loss-token count."""
    scale: float = Field(1.0, gt=0.0)
    """Multiplier of the reduced loss."""

    @model_validator(mode="after")
    def _ordered(self) -> CISPOKwargs:
        if self.ratio_min is not None and self.ratio_min > self.ratio_max:
            raise ValueError(f"ratio_min ({self.ratio_min}) must be <= ratio_max ({self.ratio_max})")
        return self


def token_mass(inputs: LossInputs) -> Tensor:
    """``Σ_t m_t·w_t``: how many (weighted) loss tokens the sequence has, in the logprobs' dtype."""
    weights = loss_weights_of(inputs)
    if weights is None:
        return inputs.loss_mask.sum().to(inputs.trainer_logprobs.dtype)
    return torch.where(inputs.loss_mask, weights.detach(), 0.0).sum()


def _token_ratio(inputs: LossInputs) -> tuple[Tensor, Tensor]:
    log_ratio = inputs.trainer_logprobs - inputs.inference_logprobs.detach()
    return log_ratio, torch.exp(log_ratio)


def _mask_count(inputs: LossInputs) -> Tensor:
    return inputs.loss_mask.sum().clamp_min(1).to(inputs.trainer_logprobs.dtype)


def _clipped_surrogate(
    ratio: Tensor, advantages: Tensor, clip_low: float, clip_high: float
) -> tuple[Tensor, Tensor, Tensor]:
    """PPO's pessimistic surrogate ``−min(r·A, clip(r, 1−ε_low, 1+ε_high)·A)`` and where each clip bound is active.

    The min takes the clipped branch exactly where a bound is active (r > 1+ε_high with A > 0, r < 1−ε_low with
    A < 0), and there that branch is constant in θ. So ``where(active, sg[clip(r)], r)·(−A)`` is the same value and
    the same gradient with two autograd nodes instead of five (``minimum`` and ``clamp`` backward are costly); it
    also keeps the exact gradient where r·A and clip(r)·A round to one float (``minimum`` would halve it there).
    """
    clipped = torch.clamp(ratio.detach(), 1.0 - clip_low, 1.0 + clip_high)
    active_high = (ratio > clipped) & (advantages > 0)  # r > clip(r) ⇔ r > 1+ε_high, in r's dtype
    active_low = (ratio < clipped) & (advantages < 0)
    per_token = torch.where(active_low | active_high, clipped, ratio) * -advantages
    return per_token, active_low, active_high


@torch.no_grad()
def _ratio_rows(
    name: str, active_low: Tensor, active_high: Tensor, ratio: Tensor, log_ratio: Tensor
) -> dict[str, Tensor]:
    """``<name>/clip_frac_low|clip_frac_high|ratio|mismatch_kl`` rows (mismatch_kl = r − log r − 1, prime-rl's k3)."""
    rows = {"clip_frac_low": active_low, "clip_frac_high": active_high, "ratio": ratio}
    rows["mismatch_kl"] = ratio - log_ratio - 1
    return {f"{name}/{key}": row for key, row in rows.items()}


def _clip_terms(
    name: str, inputs: LossInputs, clip_low: float, clip_high: float, length_norm: bool, scale: float
) -> PolicyTerms:
    log_ratio, ratio = _token_ratio(inputs)
    per_token, active_low, active_high = _clipped_surrogate(ratio, inputs.advantages.detach(), clip_low, clip_high)
    rows = _ratio_rows(name, active_low, active_high, ratio, log_ratio)
    return PolicyTerms(per_token, ratio, _mask_count(inputs), length_norm, scale, rows)


@objective(ClipKwargs)
def ppo_clip(inputs: LossInputs, clip_low: float, clip_high: float, length_norm: bool, scale: float) -> PolicyTerms:
    """PPO-clip / GRPO surrogate (Schulman et al. 2017, arXiv:1707.06347; Shao et al. 2024, arXiv:2402.03300).

    ``ℓ_t = −min(r_t·A_t, clip(r_t, 1−clip_low, 1+clip_high)·A_t)``. Token-sum by default (global token mean under
    prime-rl); ``length_norm=True`` gives GRPO's per-sequence mean (up to the per-step factor B/N).
    Metrics: ``ppo_clip/clip_frac_low|clip_frac_high|ratio|mismatch_kl``.
    """
    return _clip_terms("ppo_clip", inputs, clip_low, clip_high, length_norm, scale)


@objective(DrGRPOKwargs)
def dr_grpo(inputs: LossInputs, clip_low: float, clip_high: float, scale: float) -> PolicyTerms:
    """Dr.GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training", arXiv:2503.20783).

    The clipped surrogate summed over tokens with NO length normalisation. The paper divides by the constant
    ``B·L_max``; prime-rl divides by the step's token count N, also one constant for every token of the step, so
    there is no length bias either way: the gradient direction is the paper's and the magnitude differs by
    ``B·L_max/N`` (``scale = N/(B·L_max)`` recovers it when that ratio is known). The other half of Dr.GRPO, no std
    scaling of advantages, is prime-rl's ``grpo`` default (reward minus group mean).
    Metrics: ``dr_grpo/clip_frac_low|clip_frac_high|ratio|mismatch_kl``.
    """
    return _clip_terms("dr_grpo", inputs, clip_low, clip_high, False, scale)


@objective(DapoKwargs)
def dapo(inputs: LossInputs, clip_low: float, clip_high: float, length_norm: bool, scale: float) -> PolicyTerms:
    """DAPO (Yu et al. 2025, arXiv:2503.14476): clip-higher ε_low = 0.2, ε_high = 0.28, token-level loss.

    The paper's global token mean ``Σ_{i,t} ℓ / Σ_i |o_i|`` is exactly what prime-rl computes from this sum.
    Dynamic sampling and overlong shaping are orchestrator/environment features, not part of the loss.
    Metrics: ``dapo/clip_frac_low|clip_frac_high|ratio|mismatch_kl``.
    """
    return _clip_terms("dapo", inputs, clip_low, clip_high, length_norm, scale)


@objective(GSPOKwargs)
def gspo(
    inputs: LossInputs, clip_low: float, clip_high: float, variant: str, length_norm: bool, scale: float
) -> PolicyTerms:
    """GSPO (Zheng et al. 2025, arXiv:2507.18071): sequence-level importance ratio, ε = 3e-4 / 4e-4 (paper §5.1).

    ``s = exp(mean_t log r_t)`` over the masked tokens, ``A`` = the masked mean of the advantages (the sequence's
    advantage, broadcast per token by prime-rl). ``variant="sequence"``: ``ℓ = −min(s·A, clip(s)·A)`` on every
    token. ``variant="token"`` (GSPO-token): ``s_t = sg[s]·π_θ(y_t)/sg[π_θ(y_t)]`` with per-token advantages,
    equal in value to ``s`` but with each token's own gradient path. ``length_norm=True`` (default) gives the
    paper's per-sequence mean up to the per-step factor B/N; ``False`` weights sequences by length.
    Metrics: ``gspo/clip_frac_low|clip_frac_high|seq_ratio|mismatch_kl``.
    """
    mask = inputs.loss_mask
    log_ratio, ratio = _token_ratio(inputs)
    count = _mask_count(inputs)
    if variant == "token":
        with torch.no_grad():  # GSPO-token only uses sg[s]
            seq_ratio = torch.exp(torch.where(mask, log_ratio, 0.0).sum() / count)
        lp = inputs.trainer_logprobs
        s = seq_ratio * torch.exp(lp - lp.detach())
        per_token, active_low, active_high = _clipped_surrogate(s, inputs.advantages.detach(), clip_low, clip_high)
        rows = {"gspo/clip_frac_low": active_low, "gspo/clip_frac_high": active_high}
        metrics = {}
    else:  # one scalar surrogate per sequence, counted once per (weighted) token by reduce_loss
        seq_ratio = torch.exp(torch.where(mask, log_ratio, 0.0).sum() / count)
        advantage = torch.where(mask, inputs.advantages.detach(), 0.0).sum() / count
        per_token, active_low, active_high = _clipped_surrogate(seq_ratio, advantage, clip_low, clip_high)
        rows = {}  # the clip is one decision per sequence
        metrics = {
            "gspo/clip_frac_low": active_low.to(torch.float32),
            "gspo/clip_frac_high": active_high.to(torch.float32),
        }
    with torch.no_grad():
        rows["gspo/mismatch_kl"] = ratio - log_ratio - 1
        metrics["gspo/seq_ratio"] = seq_ratio.detach().to(torch.float32)
    return PolicyTerms(per_token, ratio, count, length_norm, scale, rows, metrics)


@objective(CISPOKwargs)
def cispo(
    inputs: LossInputs, ratio_max: float, ratio_min: float | None, length_norm: bool, scale: float
) -> PolicyTerms:
    """CISPO (MiniMax-M1, arXiv:2506.13585): ``ℓ_t = −sg[clip(r_t, ratio_min, ratio_max)]·A_t·logπ_θ(y_t)``.

    REINFORCE with a clipped, detached importance weight: no token leaves the gradient. ``ratio_max`` is the
    upper bound of the ratio itself (1 + ε_high; ScaleRL / TRL use 5.0); ``ratio_min=None`` means no lower bound,
    as in the paper. Token-level global mean, which prime-rl's division gives exactly.
    Metrics: ``cispo/clip_frac_low|clip_frac_high|ratio|mismatch_kl``.
    """
    log_ratio, ratio = _token_ratio(inputs)
    weight = torch.clamp(ratio.detach(), min=ratio_min, max=ratio_max)
    per_token = -weight * inputs.advantages.detach() * inputs.trainer_logprobs
    with torch.no_grad():
        low = ratio < ratio_min if ratio_min is not None else torch.zeros_like(inputs.loss_mask)
        rows = _ratio_rows("cispo", low, ratio > ratio_max, ratio, log_ratio)
    return PolicyTerms(per_token, ratio, _mask_count(inputs), length_norm, scale, rows)


OBJECTIVES: dict[str, Objective] = {
    "ppo_clip": ppo_clip,
    "dr_grpo": dr_grpo,
    "dapo": dapo,
    "gspo": gspo,
    "cispo": cispo,
}
"""Objective name → function, for :func:`loss_fns.composer.composer_loss` (``fn.terms`` builds its terms)."""
