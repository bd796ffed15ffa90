"""TAID: Temporally Adaptive Interpolated Distillation (Shing et al., ICLR 2025, arXiv:2501.16937).

Target ``p_t = softmax((1−t)·sg[z_S] + t·z_T)`` (logit-space interpolation with a detached student anchor);
criterion = cross-entropy ``−Σ_v p_t,v · log_softmax(z_S)_v`` (the entropy of p_t is omitted; p_t carries no
gradient, so the gradient equals that of KL(p_t‖p_S)); mean over valid tokens. ``t`` follows SakanaAI/TAID
``src/distil_losses/taid.py::update_t``: a monotone schedule driven by a momentum of the relative loss decrease,
floored by a linear ramp from ``t_start`` to ``t_end``. ``t`` is global trainer state: all-reduce the loss before
:meth:`TAIDSchedule.update` in a distributed run and checkpoint :meth:`TAIDSchedule.state_dict`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from loss_fns.logit.chunked import PerTokenFn, fused_linear_loss, mean_over_tokens, reference_loss


def taid_per_token(t: float) -> PerTokenFn:
    """Per-token TAID cross-entropy to the interpolated target at interpolation ``t`` ∈ [0, 1]."""
    if not 0.0 <= t <= 1.0:
        raise ValueError(f"TAID t must be in [0, 1], got {t}")

    def fn(student_logits: Tensor, teacher_logits: Tensor | None, rows: Tensor) -> Tensor:
        target = torch.softmax((1.0 - t) * student_logits.detach() + t * teacher_logits, dim=-1)
        return -(target * torch.log_softmax(student_logits, dim=-1)).sum(-1)

    def value_and_grad(
        student_logits: Tensor, teacher_logits: Tensor | None, rows: Tensor, coeffs: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Cross-entropy to a detached target: ``∂u/∂z = softmax(z_S) − p_t``."""
        target = torch.softmax((1.0 - t) * student_logits + t * teacher_logits, dim=-1)
        log_q = torch.log_softmax(student_logits, dim=-1)
        u = -(target * log_q).sum(-1)
        dz = log_q.exp_().sub_(target).mul_(coeffs.unsqueeze(-1).to(log_q.dtype))
        return u, dz

    fn.value_and_grad = value_and_grad  # type: ignore[attr-defined]
    return fn


def taid_loss(
    student_logits: Tensor, teacher_logits: Tensor, t: float, mask: Tensor | None = None, num_items: int | None = None
) -> Tensor:
    """Naive TAID loss on materialised logits ``[..., V]``: scalar mean over valid tokens."""
    s, z_t, m, coeffs = mean_over_tokens(student_logits, teacher_logits, mask, num_items)
    return reference_loss(taid_per_token(t), s, z_t, m, coeffs=coeffs)


def fused_linear_taid(
    student_hidden: Tensor,
    student_weight: Tensor,
    teacher_hidden: Tensor,
    teacher_weight: Tensor,
    t: float,
    mask: Tensor | None = None,
    num_items: int | None = None,
    chunk_size: int | None = None,
) -> Tensor:
    """Chunked TAID loss from hidden states ``[..., H]`` and lm_head weights ``[V, H]``."""
    h, h_t, m, coeffs = mean_over_tokens(student_hidden, teacher_hidden, mask, num_items)
    return fused_linear_loss(
        taid_per_token(t), h, student_weight, h_t, teacher_weight, m, coeffs, chunk_size=chunk_size
    )


class TAIDSchedule:
    """Adaptive, monotone interpolation coefficient ``t`` (SakanaAI/TAID defaults: α = 5e-4, β = 0.99).

    ``update(loss, global_step)``: on the first call only remember the loss; afterwards
    ``rel = (prev − loss)/(prev + 1e-15)``, ``momentum ← β·momentum + (1−β)·rel``,
    ``Δ = α·sigmoid(momentum)·(1 − t)``, ``t ← min(t_end, max(t_linear(step), t + Δ))``.
    With ``adaptive=False``, ``t = t_linear(step)``.
    """

    def __init__(
        self,
        num_train_steps: int,
        t_start: float = 0.4,
        t_end: float = 1.0,
        alpha: float = 5e-4,
        beta: float = 0.99,
        adaptive: bool = True,
    ) -> None:
        if num_train_steps < 1:
            raise ValueError(f"num_train_steps must be >= 1, got {num_train_steps}")
        if not 0.0 <= t_start <= t_end <= 1.0:
            raise ValueError(f"need 0 <= t_start <= t_end <= 1, got t_start={t_start}, t_end={t_end}")
        self.num_train_steps, self.t_start, self.t_end = num_train_steps, t_start, t_end
        self.alpha, self.beta, self.adaptive = alpha, beta, adaptive
        self.t = t_start
        self.momentum = 0.0
        self.prev_loss: float | None = None

    def linear_target(self, global_step: int) -> float:
        """The floor ``t_start + (t_end − t_start)·step/num_train_steps``."""
        return self.t_start + (self.t_end - self.t_start) * global_step / self.num_train_steps

    def update(self, loss: float | Tensor, global_step: int) -> float:
        """Advance ``t`` from this step's (detached, all-reduced) loss; returns the new ``t``."""
        value = float(loss.detach()) if isinstance(loss, Tensor) else float(loss)
        floor = self.linear_target(global_step)
        if not self.adaptive:
            self.t = min(self.t_end, floor)
            return self.t
        if self.prev_loss is None:
            self.prev_loss = value
            return self.t
        rel = (self.prev_loss - value) / (self.prev_loss + 1e-15)
        self.momentum = self.beta * self.momentum + (1.0 - self.beta) * rel
        delta = self.alpha * float(torch.sigmoid(torch.tensor(self.momentum, dtype=torch.float64))) * (1.0 - self.t)
        self.t = min(self.t_end, max(floor, self.t + delta))
        self.prev_loss = value
        return self.t

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: schedule settings and the running state."""
        return {
            "num_train_steps": self.num_train_steps,
            "t_start": self.t_start,
            "t_end": self.t_end,
            "alpha": self.alpha,
            "beta": self.beta,
            "adaptive": self.adaptive,
            "t": self.t,
            "momentum": self.momentum,
            "prev_loss": self.prev_loss,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict` (unknown keys are an error, so a stale checkpoint is noticed)."""
        unknown = set(state) - set(self.state_dict())
        if unknown:
            raise KeyError(f"unknown TAIDSchedule state keys: {sorted(unknown)}")
        for key, value in state.items():
            setattr(self, key, value)
