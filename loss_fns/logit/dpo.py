"""DPO sigmoid loss on summed sequence logprobs (Rafailov et al. 2023, arXiv:2305.18290; TRL ``dpo_trainer.py``).

``L = mean_pairs −log σ(β·[(logπ_θ(y_w) − logπ_ref(y_w)) − (logπ_θ(y_l) − logπ_ref(y_l))])`` with token-summed
completion logprobs and a detached reference (β = 0.1 as TRL). The fused form takes the policy's hidden states and
lm_head weight for the chosen and rejected completions and computes per-token label logprobs chunk by chunk; the
loss is not linear in them, so the chunk machinery runs a value pass and a gradient pass.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from loss_fns.logit.chunked import PerTokenFn, ReduceFn, fused_linear_loss, reference_loss


def dpo_sigmoid_loss(
    chosen_logps: Tensor,
    rejected_logps: Tensor,
    ref_chosen_logps: Tensor,
    ref_rejected_logps: Tensor,
    beta: float = 0.1,
) -> Tensor:
    """``[P]`` summed logprobs of P pairs → scalar mean DPO sigmoid loss; the reference side is detached."""
    margin = (chosen_logps - ref_chosen_logps.detach()) - (rejected_logps - ref_rejected_logps.detach())
    return -F.logsigmoid(beta * margin).mean()


def label_logprob_per_token(labels: Tensor, temperature: float = 1.0) -> PerTokenFn:
    """Per-token ``log softmax(z/τ)[label]`` for the flattened ``labels [N]``."""

    def fn(student_logits: Tensor, teacher_logits: Tensor | None, rows: Tensor) -> Tensor:
        z = student_logits / temperature
        picked = z.gather(-1, labels.index_select(0, rows).unsqueeze(-1)).squeeze(-1)
        return picked - torch.logsumexp(z, dim=-1)

    return fn


def _pair_reducer(seq_ids: Tensor, num_pairs: int, ref_chosen: Tensor, ref_rejected: Tensor, beta: float) -> ReduceFn:
    def reduce(u: Tensor) -> Tensor:
        sums = torch.zeros(2 * num_pairs, dtype=u.dtype, device=u.device).index_add(0, seq_ids, u)
        return dpo_sigmoid_loss(sums[:num_pairs], sums[num_pairs:], ref_chosen, ref_rejected, beta)

    return reduce


def _layout(labels: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor, int]:
    """``[2P, L]`` labels/mask (chosen rows first, then rejected, TRL's concatenation) → flat rows and sequence ids."""
    if labels.dim() != 2 or labels.shape[0] % 2:
        raise ValueError(f"labels must be [2·pairs, L] (chosen then rejected), got {tuple(labels.shape)}")
    num_seqs, length = labels.shape
    seq_ids = torch.arange(num_seqs, device=labels.device).repeat_interleave(length)
    return labels.reshape(-1), mask.reshape(-1).bool(), seq_ids, num_seqs // 2


def dpo_loss_from_logits(
    logits: Tensor,
    labels: Tensor,
    mask: Tensor,
    ref_logps: Tensor,
    beta: float = 0.1,
    temperature: float = 1.0,
) -> Tensor:
    """Naive DPO from materialised logits ``[2P, L, V]``, labels/mask ``[2P, L]``, reference sums ``[2P]``."""
    flat_labels, flat_mask, seq_ids, pairs = _layout(labels, mask)
    reduce = _pair_reducer(seq_ids, pairs, ref_logps[:pairs], ref_logps[pairs:], beta)
    z = logits.reshape(-1, logits.shape[-1])
    return reference_loss(label_logprob_per_token(flat_labels, temperature), z, None, flat_mask, reduce_fn=reduce)


def fused_linear_dpo(
    hidden: Tensor,
    weight: Tensor,
    labels: Tensor,
    mask: Tensor,
    ref_logps: Tensor,
    beta: float = 0.1,
    temperature: float = 1.0,
    chunk_size: int | None = None,
) -> Tensor:
    """Chunked DPO from hidden states ``[2P, L, H]`` and the lm_head weight ``[V, H]``; never ``[2P·L, V]``."""
    flat_labels, flat_mask, seq_ids, pairs = _layout(labels, mask)
    reduce = _pair_reducer(seq_ids, pairs, ref_logps[:pairs], ref_logps[pairs:], beta)
    h = hidden.reshape(-1, hidden.shape[-1])
    fn = label_logprob_per_token(flat_labels, temperature)
    return fused_linear_loss(fn, h, weight, mask=flat_mask, reduce_fn=reduce, chunk_size=chunk_size)
