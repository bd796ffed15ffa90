"""Chunked fused-linear machinery: a per-token loss on ``hidden @ weight.T`` logits without a ``[tokens, vocab]`` tensor.

Liger-Kernel's chunked-loss design (``liger_kernel/chunked_loss/fused_linear_distillation.py``) in plain PyTorch:
tokens are processed in chunks of ``C`` rows; for each chunk the student (and teacher) logits ``[C, V]`` are
computed from hidden states and the lm_head weight, the per-token formula is differentiated with respect to those
logits, and the gradients for the hidden states and the weight (``dh = dz·W``, ``dW += dzᵀ·h``) are accumulated
during the forward pass. The backward only scales them by the incoming gradient, so the loss must be the last
operation before ``backward()`` or be scaled linearly.

Formulas plug in as ``per_token_fn(student_logits [C, V], teacher_logits [C, V] | None, rows [C]) -> [C]`` (the loss
of each token, summed over its categories; ``rows`` are the token positions, for per-token extras such as labels).
A formula may also carry an analytic ``value_and_grad(student_logits, teacher_logits, rows, coeffs) -> (u [C], dz
[C, V])`` attribute (``dz = Σ_t coeffs_t·∂u_t/∂z``); the linear pass then uses it instead of autograd, which
halves the elementwise work (Liger's JSD kernel does the same). Two reductions over the ``[N]`` values ``u``:

- linear, ``Σ_t coeffs_t · u_t`` (JSD, top-k, TAID: coefficients = mask / valid-token count): one pass;
- any ``reduce_fn(u)`` (DPO's sigmoid of per-sequence sums): a no-grad pass for ``u``, autograd on the ``[N]``
  vector for ``∂L/∂u``, then a second pass that recomputes each chunk's logits for the gradients.

The teacher side is always detached (stop-gradient), as in OPSD, SDPO, GKD and TAID.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

PerTokenFn = Callable[[Tensor, Tensor | None, Tensor], Tensor]
ValueAndGradFn = Callable[[Tensor, Tensor | None, Tensor, Tensor], tuple[Tensor, Tensor]]
ReduceFn = Callable[[Tensor], Tensor]

LOGIT_BUDGET_ELEMENTS = 1 << 23
"""Default chunk rows are chosen so one ``[C, V]`` fp32 tensor stays near 32 MiB."""


def default_chunk_size(vocab_size: int) -> int:
    """Largest power of two ``C`` in [16, 1024] with ``C·V <= 2^23``."""
    rows = max(1, LOGIT_BUDGET_ELEMENTS // max(1, vocab_size))
    return int(min(1024, max(16, 1 << (rows.bit_length() - 1))))


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


def mean_over_tokens(
    student: Tensor, teacher: Tensor, mask: Tensor | None, num_items: int | float | None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``[..., X]`` student/teacher inputs → ``[N, X]`` rows, the ``[N]`` bool mask (all valid when None) and the
    linear reduction's coefficients ``mask / num_items`` (global token count) or ``mask / mask.sum()``."""
    s, t = student.reshape(-1, student.shape[-1]), teacher.reshape(-1, teacher.shape[-1])
    m = torch.ones(s.shape[0], dtype=torch.bool, device=s.device) if mask is None else mask.reshape(-1).bool()
    denom = float(num_items) if num_items is not None else float(max(int(m.sum()), 1))
    return s, t, m, m.to(_compute_dtype(s.dtype)) / denom


def reference_loss(
    per_token_fn: PerTokenFn,
    student_logits: Tensor,
    teacher_logits: Tensor | None,
    mask: Tensor,
    coeffs: Tensor | None = None,
    reduce_fn: ReduceFn | None = None,
) -> Tensor:
    """Unchunked evaluation on materialised ``[N, V]`` logits, differentiated by plain autograd (the naive form)."""
    _check_reduction(coeffs, reduce_fn)
    dtype = _compute_dtype(student_logits.dtype)
    rows = torch.arange(student_logits.shape[0], device=student_logits.device)
    teacher = teacher_logits.detach().to(dtype) if teacher_logits is not None else None
    u = per_token_fn(student_logits.to(dtype), teacher, rows)
    u = torch.where(mask, u, torch.zeros_like(u))
    return (coeffs.to(dtype) * u).sum() if coeffs is not None else reduce_fn(u)


def fused_linear_loss(
    per_token_fn: PerTokenFn,
    student_hidden: Tensor,
    student_weight: Tensor,
    teacher_hidden: Tensor | None = None,
    teacher_weight: Tensor | None = None,
    mask: Tensor | None = None,
    coeffs: Tensor | None = None,
    reduce_fn: ReduceFn | None = None,
    chunk_size: int | None = None,
) -> Tensor:
    """Chunked ``Σ_t coeffs_t·u_t`` or ``reduce_fn(u)`` with ``u_t = per_token_fn(h_t·Wᵀ, h^T_t·W_Tᵀ)``.

    Shapes: ``student_hidden [N, H]``, ``student_weight [V, H]``, ``teacher_hidden [N, H_T]``, ``teacher_weight
    [V, H_T]``, ``mask``/``coeffs`` ``[N]``. Gradients flow to ``student_hidden`` and ``student_weight`` only.
    Peak extra memory: a few ``[C, V]`` chunk tensors plus ``[N, H]`` and ``[V, H]`` gradient buffers.
    """
    _check_reduction(coeffs, reduce_fn)
    if student_hidden.dim() != 2 or student_weight.dim() != 2:
        raise ValueError("student_hidden must be [N, H] and student_weight [V, H]")
    if (teacher_hidden is None) != (teacher_weight is None):
        raise ValueError("teacher_hidden and teacher_weight go together")
    if teacher_weight is not None and teacher_weight.shape[0] != student_weight.shape[0]:
        raise ValueError(f"vocab mismatch: student {student_weight.shape[0]} vs teacher {teacher_weight.shape[0]}")
    n = student_hidden.shape[0]
    if mask is None:
        mask = torch.ones(n, dtype=torch.bool, device=student_hidden.device)
    chunk = chunk_size or default_chunk_size(student_weight.shape[0])
    return _FusedLinearLoss.apply(
        student_hidden, student_weight, teacher_hidden, teacher_weight, mask, coeffs, per_token_fn, reduce_fn, chunk
    )


def _check_reduction(coeffs: Tensor | None, reduce_fn: ReduceFn | None) -> None:
    if (coeffs is None) == (reduce_fn is None):
        raise ValueError("give exactly one of coeffs (linear reduction) or reduce_fn")


def _accumulate(
    dz: Tensor, rows: Tensor, h_c: Tensor, w: Tensor, grad_h: Tensor | None, grad_w: Tensor | None, dtype: torch.dtype
) -> None:
    """``grad_h[rows] = dz·W`` and ``grad_W += dzᵀ·h`` for one chunk."""
    dz = dz.to(w.dtype)
    if grad_h is not None:
        grad_h.index_copy_(0, rows, (dz @ w).to(dtype))
    if grad_w is not None:
        grad_w.addmm_(dz.T.to(dtype), h_c.to(dtype))


class _FusedLinearLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w, h_t, w_t, mask, coeffs, per_token_fn, reduce_fn, chunk):  # type: ignore[override]
        dtype = _compute_dtype(h.dtype)
        rows_all = mask.nonzero().squeeze(1)
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]

        def chunks():
            for start in range(0, rows_all.numel(), chunk):
                rows = rows_all[start : start + chunk]
                h_c = h.index_select(0, rows)
                z = (h_c @ w.T).to(dtype)
                z_t = (h_t.index_select(0, rows) @ w_t.T).to(dtype) if h_t is not None else None
                yield rows, h_c, z, z_t

        if reduce_fn is not None:  # pass 1: per-token values, then ∂L/∂u on the [N] vector
            u = torch.zeros(h.shape[0], dtype=dtype, device=h.device)
            with torch.no_grad():
                for rows, _, z, z_t in chunks():
                    u.index_copy_(0, rows, per_token_fn(z, z_t, rows).to(dtype))
            with torch.enable_grad():
                u_leaf = u.requires_grad_()
                total = reduce_fn(u_leaf)
                (coeffs,) = torch.autograd.grad(total, u_leaf)
            loss = total.detach()
        else:
            coeffs = coeffs.detach().to(dtype)
            loss = torch.zeros((), dtype=dtype, device=h.device)

        grad_h = torch.zeros(h.shape, dtype=dtype, device=h.device) if need_h else None
        grad_w = torch.zeros(w.shape, dtype=dtype, device=w.device) if need_w else None
        analytic = getattr(per_token_fn, "value_and_grad", None) if reduce_fn is None else None
        for rows, h_c, z, z_t in chunks():
            c = coeffs.index_select(0, rows)
            if analytic is not None:
                u_c, dz = analytic(z, z_t, rows, c)
                loss += (c * u_c).sum()
                _accumulate(dz, rows, h_c, w, grad_h, grad_w, dtype)
                continue
            with torch.enable_grad():
                z.requires_grad_()
                u_c = per_token_fn(z, z_t, rows)
                if reduce_fn is None:
                    loss += (c * u_c.detach()).sum()
                if not (need_h or need_w):
                    continue
                (dz,) = torch.autograd.grad(u_c, z, grad_outputs=c.to(u_c.dtype))
            _accumulate(dz, rows, h_c, w, grad_h, grad_w, dtype)
        ctx.save_for_backward(
            grad_h.to(h.dtype) if need_h else torch.empty(0), grad_w.to(w.dtype) if need_w else torch.empty(0)
        )
        return loss

    @staticmethod
    def backward(ctx, grad_output):  # type: ignore[override]
        grad_h, grad_w = ctx.saved_tensors
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if not bool(grad_output == 1.0):  # loss.backward() passes 1: skip a [V, H] copy (Liger does the same)
            grad_h, grad_w = grad_h * grad_output, grad_w * grad_output
        return (
            grad_h if need_h else None,
            grad_w if need_w else None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
        )
