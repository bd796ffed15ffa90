"""Full-vocabulary kernels for trainers that have logits or hidden states (prime-rl's loss hook exposes neither).

Each loss has a naive form on materialised logits and a chunked fused-linear form on hidden states and the lm_head
weight that never allocates ``[tokens, vocab]`` (shared machinery in :mod:`loss_fns.logit.chunked`).
"""

from loss_fns.logit.chunked import default_chunk_size, fused_linear_loss, reference_loss
from loss_fns.logit.divergence import (
    fused_linear_jsd,
    fused_linear_topk_tail,
    generalized_jsd,
    jsd_loss,
    topk_tail_loss,
)
from loss_fns.logit.dpo import dpo_loss_from_logits, dpo_sigmoid_loss, fused_linear_dpo
from loss_fns.logit.taid import TAIDSchedule, fused_linear_taid, taid_loss

__all__ = [
    "TAIDSchedule",
    "default_chunk_size",
    "dpo_loss_from_logits",
    "dpo_sigmoid_loss",
    "fused_linear_dpo",
    "fused_linear_jsd",
    "fused_linear_loss",
    "fused_linear_taid",
    "fused_linear_topk_tail",
    "generalized_jsd",
    "jsd_loss",
    "reference_loss",
    "taid_loss",
    "topk_tail_loss",
]
