"""Generalized JSD (OPSD / TRL-GKD semantics) on the full vocabulary and on the student's top-k with a tail bucket.

Conventions (Agarwal et al. 2023, arXiv:2306.13649, Eq. 1; TRL ``GKDTrainer.generalized_jsd_loss``; OPSD
``generalized_jsd_loss``, Zhao et al. 2026, arXiv:2601.18734): temperature τ divides both logits; S = log p_S,
T = log p_T; β = 0 → KL(p_T‖p_S) (forward), β = 1 → KL(p_S‖p_T) (reverse), otherwise M = (1−β)·p_S + β·p_T and
``β·KL(p_T‖M) + (1−β)·KL(p_S‖M)``. The endpoints are special-cased as upstream: the mixture form vanishes there.
Reduction: sum over the categories, mean over valid tokens (or ``/ num_items``, the global count under gradient
accumulation). The teacher is detached; gradient reaches the student through S and through M.

Top-k + tail (SDPO, Hübotter et al. 2026, arXiv:2601.20802, ``compute_self_distillation_loss``): the support is
the student's top-k tokens; both sides use full-softmax log-probs gathered there, plus a (k+1)-th bucket
``log(1 − Σ_k p)``, so the divergence is exact between the (k+1)-category coarsenings of p_S and p_T.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from loss_fns.logit.chunked import PerTokenFn, fused_linear_loss, mean_over_tokens, reference_loss


def kl_terms(log_p: Tensor, log_q: Tensor) -> Tensor:
    """KL(p‖q) summed over the last dim from log-probs: ``Σ p·(log p − log q)``."""
    return (log_p.exp() * (log_p - log_q)).sum(-1)


def generalized_jsd(student_logprobs: Tensor, teacher_logprobs: Tensor, beta: float) -> Tensor:
    """Per-row generalized JSD ``[..., K] → [...]`` between log-prob tensors (see module docstring)."""
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must be in [0, 1], got {beta}")
    s, t = student_logprobs, teacher_logprobs
    if beta == 0.0:
        return kl_terms(t, s)
    if beta == 1.0:
        return kl_terms(s, t)
    log_m = torch.logaddexp(s + math.log1p(-beta), t + math.log(beta))
    return beta * kl_terms(t, log_m) + (1.0 - beta) * kl_terms(s, log_m)


def jsd_per_token(beta: float = 0.5, temperature: float = 1.0) -> PerTokenFn:
    """Per-token full-vocabulary generalized JSD on tempered logits."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")

    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must be in [0, 1], got {beta}")

    def fn(student_logits: Tensor, teacher_logits: Tensor | None, rows: Tensor) -> Tensor:
        s = torch.log_softmax(student_logits / temperature, dim=-1)
        t = torch.log_softmax(teacher_logits / temperature, dim=-1)
        return generalized_jsd(s, t, beta)

    def value_and_grad(
        student_logits: Tensor, teacher_logits: Tensor | None, rows: Tensor, coeffs: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Analytic form (Liger ``ops/jsd.py``): ∂L/∂S = −p_T (β=0), p_S(S−T) (β=1), (1−β)p_S(S−log M) (mixed),
        then the log-softmax Jacobian ``dz = (dX − p_S·Σ_v dX)/τ``."""
        s = torch.log_softmax(student_logits / temperature, dim=-1)
        t = torch.log_softmax(teacher_logits / temperature, dim=-1)
        p_s = s.exp()
        if beta == 0.0:
            p_t = t.exp()
            u = (p_t * (t - s)).sum(-1)
            dx = p_t.neg_()
        elif beta == 1.0:
            dx = (s - t).mul_(p_s)
            u = dx.sum(-1)
        else:
            log_m = torch.logaddexp(s + math.log1p(-beta), t + math.log(beta))
            p_t = t.exp()
            u = beta * (p_t * (t - log_m)).sum(-1)
            dx = (s - log_m).mul_(p_s)
            u = u + (1.0 - beta) * dx.sum(-1)
            dx.mul_(1.0 - beta)
        row = dx.sum(-1, keepdim=True)
        dz = dx.sub_(p_s.mul_(row)).mul_((coeffs / temperature).unsqueeze(-1).to(dx.dtype))
        return u, dz

    fn.value_and_grad = value_and_grad  # type: ignore[attr-defined]
    return fn


def with_tail(topk_logprobs: Tensor) -> Tensor:
    """Append the tail bucket ``log(1 − Σ_k p)`` (clamped below 0 as SDPO does) to ``[..., k]`` log-probs."""
    lse = torch.logsumexp(topk_logprobs, dim=-1, keepdim=True).clamp(max=-1e-7)
    return torch.cat([topk_logprobs, torch.log(-torch.expm1(lse))], dim=-1)


def topk_tail_per_token(k: int = 100, beta: float = 0.5, temperature: float = 1.0, add_tail: bool = True) -> PerTokenFn:
    """Per-token generalized JSD on the student's top-k support (+ tail bucket, or renormalised without it)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")

    def fn(student_logits: Tensor, teacher_logits: Tensor | None, rows: Tensor) -> Tensor:
        s = torch.log_softmax(student_logits / temperature, dim=-1)
        t = torch.log_softmax(teacher_logits / temperature, dim=-1)
        idx = torch.topk(s.detach(), min(k, s.shape[-1]), dim=-1).indices
        s_k, t_k = s.gather(-1, idx), t.gather(-1, idx)
        if add_tail:
            s_k, t_k = with_tail(s_k), with_tail(t_k)
        else:
            s_k = s_k - torch.logsumexp(s_k, dim=-1, keepdim=True)
            t_k = t_k - torch.logsumexp(t_k, dim=-1, keepdim=True)
        return generalized_jsd(s_k, t_k, beta)

    return fn


def jsd_loss(
    student_logits: Tensor,
    teacher_logits: Tensor,
    mask: Tensor | None = None,
    beta: float = 0.5,
    temperature: float = 1.0,
    num_items: int | None = None,
) -> Tensor:
    """Naive generalized JSD on materialised logits ``[..., V]``; ``mask [...]``; scalar mean over valid tokens."""
    s, t, m, coeffs = mean_over_tokens(student_logits, teacher_logits, mask, num_items)
    return reference_loss(jsd_per_token(beta, temperature), s, t, m, coeffs=coeffs)


def fused_linear_jsd(
    student_hidden: Tensor,
    student_weight: Tensor,
    teacher_hidden: Tensor,
    teacher_weight: Tensor,
    mask: Tensor | None = None,
    beta: float = 0.5,
    temperature: float = 1.0,
    num_items: int | None = None,
    chunk_size: int | None = None,
) -> Tensor:
    """Chunked generalized JSD from hidden states ``[..., H]`` and lm_head weights ``[V, H]``; never ``[N, V]``.

    Self-distillation (OPSD/SDPO) passes the same weight for both sides: the teacher side is still detached.
    """
    h, h_t, m, coeffs = mean_over_tokens(student_hidden, teacher_hidden, mask, num_items)
    return fused_linear_loss(
        jsd_per_token(beta, temperature), h, student_weight, h_t, teacher_weight, m, coeffs, chunk_size=chunk_size
    )


def topk_tail_loss(
    student_logits: Tensor,
    teacher_logits: Tensor,
    mask: Tensor | None = None,
    k: int = 100,
    beta: float = 0.5,
    temperature: float = 1.0,
    add_tail: bool = True,
    num_items: int | None = None,
) -> Tensor:
    """Naive SDPO top-k(+tail) generalized JSD on materialised logits ``[..., V]``."""
    s, t, m, coeffs = mean_over_tokens(student_logits, teacher_logits, mask, num_items)
    return reference_loss(topk_tail_per_token(k, beta, temperature, add_tail), s, t, m, coeffs=coeffs)


def fused_linear_topk_tail(
    student_hidden: Tensor,
    student_weight: Tensor,
    teacher_hidden: Tensor,
    teacher_weight: Tensor,
    mask: Tensor | None = None,
    k: int = 100,
    beta: float = 0.5,
    temperature: float = 1.0,
    add_tail: bool = True,
    num_items: int | None = None,
    chunk_size: int | None = None,
) -> Tensor:
    """Chunked SDPO top-k(+tail) generalized JSD from hidden states and lm_head weights."""
    h, h_t, m, coeffs = mean_over_tokens(student_hidden, teacher_hidden, mask, num_items)
    fn = topk_tail_per_token(k, beta, temperature, add_tail)
    return fused_linear_loss(fn, h, student_weight, h_t, teacher_weight, m, coeffs, chunk_size=chunk_size)
