"""Adapter for the 2026-05/06 prime-rl loss API (``setup_loss_fns`` era, commits eaf95997f..0be5ac452).

Then, prime-rl built ``setup_loss_fns(loss_config) -> dict[str, LossFn]`` keyed by training mode ("rl", "opd",
"sft") and picked one per micro-batch; ``LossInputs`` carried ``teacher_logprobs`` and no ``loss_weights``. Every
loss in ``loss_fns`` already reads both shapes (:func:`loss_fns.types.ref_logprobs_of`); this module adds the
era's input dataclass, a converter to the current shape, and a ``setup_loss_fns`` that maps a custom-loss config
onto the three modes for trainers pinned to that API.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from torch import Tensor

from loss_fns.distill import self_distill
from loss_fns.types import LossInputs, loss_weights_of, make_outputs, masked_mean, masked_sum, ref_logprobs_of

LossFn = Callable[..., Any]


@dataclass
class LegacyLossInputs:
    """``LossInputs`` as of 2026-05-19..06-27: 1-D ``[seq]`` tensors of one sequence."""

    trainer_logprobs: Tensor
    inference_logprobs: Tensor
    teacher_logprobs: Tensor | None
    advantages: Tensor
    loss_mask: Tensor


def to_current(inputs: Any) -> Any:
    """Convert inputs of either era to the current ``LossInputs`` (``teacher_logprobs`` → ``ref_logprobs``)."""
    return LossInputs(
        trainer_logprobs=inputs.trainer_logprobs,
        inference_logprobs=inputs.inference_logprobs,
        ref_logprobs=ref_logprobs_of(inputs),
        advantages=inputs.advantages,
        loss_mask=inputs.loss_mask,
        loss_weights=loss_weights_of(inputs),
    )


def sft_nll(inputs: Any) -> Any:
    """Masked negative log-likelihood of the sampled tokens (the era's "sft" mode); metric ``sft/nll``."""
    nll = -inputs.trainer_logprobs
    return make_outputs(masked_sum(nll, inputs), {"sft/nll": masked_mean(nll, inputs.loss_mask)})


def import_object(import_path: str) -> Any:
    """``"package.module.attr"`` → the object; errors name the config field."""
    module_name, _, attr = import_path.rpartition(".")
    if not module_name:
        raise ValueError(f"trainer.loss.import_path must be 'module.function', got {import_path!r}")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"trainer.loss.import_path {import_path!r} cannot be imported: {exc}") from exc


def setup_loss_fns(loss_config: Any, opd_is_clip: float | None = 2.0) -> dict[str, LossFn]:
    """Era-style ``{"rl", "opd", "sft"}`` table from a custom-loss config.

    ``loss_config`` is prime-rl's ``CustomLossConfig`` or a mapping with ``import_path`` and optional ``kwargs``.
    "rl" is the named function bound to its kwargs, "opd" the sampled-token reverse KL toward
    ``teacher_logprobs`` (:func:`loss_fns.distill.self_distill`), "sft" the masked NLL.
    """
    if isinstance(loss_config, Mapping):
        import_path, kwargs = loss_config.get("import_path"), dict(loss_config.get("kwargs") or {})
    else:
        import_path, kwargs = getattr(loss_config, "import_path", None), dict(getattr(loss_config, "kwargs", {}))
    if not isinstance(import_path, str):
        raise ValueError("trainer.loss.import_path is required for a custom loss")
    rl_fn = import_object(import_path)
    return {"rl": partial(rl_fn, **kwargs), "opd": partial(self_distill, is_clip=opd_is_clip), "sft": sft_nll}
