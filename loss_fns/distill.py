"""Token-level self-distillation through prime-rl's loss hook (channel 2's math on sampled tokens).

Per token: ``ℓ_t = sg[logπ_θ(y_t) − logπ_ref(y_t)] · logπ_θ(y_t)``, the sampled-token reverse-KL REINFORCE estimator
(Thinking Machines "On-Policy Distillation", 2025; SDPO token-level mode, Hübotter et al. 2026, arXiv:2601.20802;
TRL ``compute_sampled_token_self_distillation_loss``). Its gradient, in expectation over y_t ~ π_θ, is that of
``KL(π_θ(·|y_<t) ‖ π_ref(·|y_<t))``. Tokens are sampled by the inference engine, so an optional importance weight
``sg[min(π_θ/π_inference, is_clip)]`` corrects the trainer/inference gap (SDPO / TRL clip at 2).

Where it has effect: ``ref_logprobs`` must reach the rl loss. In prime-rl at HEAD the stock algorithms never do that
(``opd``/``opsd`` route their tokens to the built-in ``ref_kl`` loss), and mixed batches zero-fill ``ref_logprobs``
for samples without a reference; an all-zero or missing reference is treated as absent (zero loss, still
backpropagates). In prime-rl, channel 2 therefore runs through ``[orchestrator.algo] type = "opsd"``.
"""

from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor

from loss_fns.kwargs import LossKwargs, typed_kwargs
from loss_fns.types import LossInputs, LossOutputs, make_outputs, masked_means, masked_sum, ref_logprobs_of


def reference_of(inputs: LossInputs) -> Tensor | None:
    """The reference logprobs, or None when absent, zero-filled on every loss token (mixed batches), or unmasked."""
    ref = ref_logprobs_of(inputs)
    if ref is None:
        return None
    if not bool(torch.logical_and(ref, inputs.loss_mask).any()):  # any nonzero reference on a loss token
        return None
    return ref.detach()


def self_distill_coefficient(
    inputs: LossInputs, ref: Tensor, is_clip: float | None, ratio: Tensor | None = None
) -> tuple[Tensor, dict[str, Tensor]]:
    """The detached per-token coefficient ``c_t = sg[w_t·(logπ_θ − logπ_ref)]`` (``ℓ_t = c_t·logπ_θ``, ``[seq]``).

    Also returns the metric rows ``distill/reverse_kl|is_clip_frac`` (``[seq]``, reduced as masked means by the
    caller). ``ratio`` is ``π_θ/π_inference`` when the caller already has it (composer_loss shares the objective's).
    """
    lp = inputs.trainer_logprobs.detach()
    log_gap = lp - ref
    rows = {"distill/reverse_kl": log_gap}
    if is_clip is None:
        return log_gap, rows
    ratio = torch.exp(lp - inputs.inference_logprobs.detach()) if ratio is None else ratio.detach()
    rows["distill/is_clip_frac"] = ratio > is_clip
    return log_gap * torch.clamp(ratio, max=is_clip), rows


def has_ref_metric(inputs: LossInputs) -> Tensor:
    """``distill/has_ref`` of a sequence with a reference: 1, in the metrics' float32."""
    return torch.ones((), device=inputs.trainer_logprobs.device)


def absent_metrics(is_clip: float | None, device: torch.device) -> dict[str, Tensor]:
    """Metrics of a sequence without a reference: same keys, shapes and device as with one (prime-rl stacks them)."""
    keys = ["distill/reverse_kl", "distill/has_ref"] + (["distill/is_clip_frac"] if is_clip is not None else [])
    return {key: torch.zeros((), device=device) for key in keys}


class SelfDistillKwargs(LossKwargs):
    """``[trainer.loss.kwargs]`` of ``self_distill``."""

    is_clip: float | None = Field(2.0, gt=0.0)
    """Cap of the importance weight π_θ/π_inference (SDPO / TRL: 2); unset = no importance correction."""
    scale: float = Field(1.0, gt=0.0)
    """Multiplier of the summed loss."""


@typed_kwargs(SelfDistillKwargs)
def self_distill(inputs: LossInputs, is_clip: float | None, scale: float) -> LossOutputs:
    """Sampled-token reverse-KL self-distillation toward ``ref_logprobs`` (or the older ``teacher_logprobs``).

    Returns the masked, weighted SUM; a zero loss anchored on ``trainer_logprobs`` when the reference is absent.
    ``is_clip=None`` disables the importance correction (fully on-policy trainers).
    """
    ref = reference_of(inputs)
    if ref is None:
        anchor = inputs.trainer_logprobs.sum() * 0.0
        return make_outputs(anchor, absent_metrics(is_clip, inputs.trainer_logprobs.device))
    coefficient, rows = self_distill_coefficient(inputs, ref, is_clip)
    loss = masked_sum(coefficient * inputs.trainer_logprobs, inputs)
    metrics = {**masked_means(inputs.loss_mask, rows), "distill/has_ref": has_ref_metric(inputs)}
    return make_outputs(loss * scale if scale != 1.0 else loss, metrics)
