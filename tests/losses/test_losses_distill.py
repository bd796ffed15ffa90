"""Token self-distillation and composer_loss."""

from __future__ import annotations

import math

import pytest
import torch

from loss_fns import composer, distill, policy
from loss_fns.types import LossInputs, LossOutputs, SequenceInputs

LN2 = math.log(2.0)


def make_inputs(trainer, inference, ref, advantages=None, mask=None, weights=None):
    n = len(trainer)
    as64 = lambda xs: None if xs is None else torch.tensor(xs, dtype=torch.float64)  # noqa: E731
    return SequenceInputs(
        trainer_logprobs=as64(trainer).requires_grad_(),
        inference_logprobs=as64(inference),
        ref_logprobs=as64(ref),
        advantages=as64(advantages if advantages is not None else [1.0] * n),
        loss_mask=torch.ones(n, dtype=torch.bool) if mask is None else torch.tensor(mask),
        loss_weights=as64(weights),
    )


def grad_of(out, inputs):
    (grad,) = torch.autograd.grad(out.loss, inputs.trainer_logprobs)
    return grad


def test_sampled_token_reverse_kl_closed_form() -> None:
    # logπ = [log .5, log .25], logπ_ref = [log .25, log .5]: gap = [ln2, -ln2]
    inputs = make_inputs([-LN2, -2 * LN2], [-LN2, -2 * LN2], [-2 * LN2, -LN2])
    out = distill.self_distill(inputs, is_clip=None)
    assert out.loss.item() == pytest.approx(LN2 * -LN2 + -LN2 * -2 * LN2, abs=1e-12)
    # gradient = sg[logπ − logπ_ref]: pushes down where the policy is above the reference
    torch.testing.assert_close(grad_of(out, inputs), torch.tensor([LN2, -LN2], dtype=torch.float64))
    assert out.metrics["distill/reverse_kl"].item() == pytest.approx(0.0, abs=1e-12)
    assert out.metrics["distill/has_ref"].item() == 1.0


def test_importance_correction_is_clipped() -> None:
    # trainer/inference ratios [1, 4] -> weights [1, min(4, 2) = 2]
    inputs = make_inputs([-LN2, -2 * LN2], [-LN2, -4 * LN2], [-2 * LN2, -LN2])
    out = distill.self_distill(inputs, is_clip=2.0)
    torch.testing.assert_close(grad_of(out, inputs), torch.tensor([LN2, -2 * LN2], dtype=torch.float64))
    assert out.metrics["distill/is_clip_frac"].item() == 0.5


def test_mask_weights_and_gradient_only_to_policy() -> None:
    inputs = make_inputs([-LN2, -2 * LN2], [-LN2, -2 * LN2], [-2 * LN2, -LN2], mask=[True, False], weights=[3.0, 1.0])
    inputs.ref_logprobs.requires_grad_()
    inputs.inference_logprobs.requires_grad_()
    out = distill.self_distill(inputs)
    assert out.loss.item() == pytest.approx(3.0 * LN2 * -LN2, abs=1e-12)
    out.loss.backward()
    torch.testing.assert_close(inputs.trainer_logprobs.grad, torch.tensor([3 * LN2, 0.0], dtype=torch.float64))
    assert inputs.ref_logprobs.grad is None and inputs.inference_logprobs.grad is None


@pytest.mark.parametrize("ref", [None, [0.0, 0.0]], ids=["none", "zero-filled"])
def test_absent_reference_gives_anchored_zero(ref) -> None:
    inputs = make_inputs([-LN2, -2 * LN2], [-LN2, -2 * LN2], ref)
    out = distill.self_distill(inputs)
    assert out.loss.item() == 0.0
    assert torch.equal(grad_of(out, inputs), torch.zeros(2, dtype=torch.float64))
    assert out.metrics["distill/has_ref"].item() == 0.0
    present = distill.self_distill(make_inputs([-LN2, -2 * LN2], [-LN2, -2 * LN2], [-1.0, -1.0]))
    assert set(out.metrics) == set(present.metrics)  # prime-rl stacks metrics across sequences


def test_empty_mask_with_reference() -> None:
    inputs = make_inputs([-LN2, -2 * LN2], [-LN2, -2 * LN2], [-1.0, -1.0], mask=[False, False])
    out = distill.self_distill(inputs)
    assert out.loss.item() == 0.0
    out.loss.backward()
    assert torch.equal(inputs.trainer_logprobs.grad, torch.zeros(2, dtype=torch.float64))


@pytest.mark.parametrize("objective", sorted(policy.OBJECTIVES))
def test_composer_zero_weight_is_bitwise_base(objective: str) -> None:
    args = ([-0.3, -1.2, -0.7], [-0.35, -1.0, -0.9], [-0.5, -0.8, -0.6], [1.5, -0.5, 0.7])
    base_in, comp_in = make_inputs(*args), make_inputs(*args)
    base = policy.OBJECTIVES[objective](base_in)
    comp = composer.composer_loss(comp_in, objective=objective, alpha_sdpo=0.0)
    assert torch.equal(comp.loss, base.loss)
    assert torch.equal(grad_of(comp, comp_in), grad_of(base, base_in))
    assert comp.metrics.keys() == base.metrics.keys()


def test_composer_adds_alpha_times_distillation() -> None:
    args = ([-LN2, -2 * LN2], [-LN2, -2 * LN2], [-2 * LN2, -LN2], [1.0, 1.0])
    inputs = make_inputs(*args)
    out = composer.composer_loss(inputs, objective="dapo", alpha_sdpo=0.5, is_clip=None)
    base = policy.dapo(make_inputs(*args))
    sd = distill.self_distill(make_inputs(*args), is_clip=None)
    assert out.loss.item() == pytest.approx(base.loss.item() + 0.5 * sd.loss.item(), abs=1e-12)
    # ratio 1: base gradient -A·r = -1 per token; plus 0.5·[ln2, -ln2]
    expected = torch.tensor([-1.0 + 0.5 * LN2, -1.0 - 0.5 * LN2], dtype=torch.float64)
    torch.testing.assert_close(grad_of(out, inputs), expected)
    assert "dapo/clip_frac_high" in out.metrics and "distill/reverse_kl" in out.metrics


def test_composer_objective_kwargs_and_errors() -> None:
    args = ([-0.1], [-0.1 - math.log(1.25)], None, [1.0])
    out = composer.composer_loss(make_inputs(*args), objective="ppo_clip", objective_kwargs={"clip_high": 0.28})
    assert out.loss.item() == pytest.approx(-1.25)
    with pytest.raises(ValueError, match=r"trainer\.loss\.kwargs\.objective"):
        composer.composer_loss(make_inputs(*args), objective="grpo_typo")
    # alpha > 0 without a reference: the base loss, plus distill metrics at zero
    no_ref = composer.composer_loss(make_inputs(*args), objective="ppo_clip", alpha_sdpo=1.0)
    assert no_ref.loss.item() == pytest.approx(-1.2) and no_ref.metrics["distill/has_ref"].item() == 0.0


def test_outputs_are_loss_outputs() -> None:
    out = policy.dr_grpo(make_inputs([-0.1], [-0.1], None))
    assert isinstance(out, LossOutputs)
    assert isinstance(make_inputs([-0.1], [-0.1], None), LossInputs)


@pytest.mark.parametrize(
    ("objective", "objective_kwargs"),
    [
        ("dr_grpo", {}),
        ("ppo_clip", {"length_norm": True, "scale": 3.0}),
        ("dapo", {"scale": 0.5}),
        ("gspo", {}),
        ("gspo", {"length_norm": False}),
        ("gspo", {"variant": "token"}),
        ("cispo", {"ratio_min": 0.9, "length_norm": True}),
    ],
)
@pytest.mark.parametrize("is_clip", [2.0, 1.05, None])
def test_composer_fused_pass_equals_base_plus_alpha_distill(objective, objective_kwargs, is_clip) -> None:
    # composer_loss shares the ratio, the masked sum and the metric reduction; the result must still be
    # base + α·self_distill in loss, gradient and metrics, whatever the objective's length_norm / scale.
    g = torch.Generator().manual_seed(7)
    inference = -torch.rand(9, generator=g, dtype=torch.float64) * 3
    args = (
        (inference + torch.randn(9, generator=g, dtype=torch.float64) * 0.2).tolist(),
        inference.tolist(),
        (inference + torch.randn(9, generator=g, dtype=torch.float64) * 0.5).tolist(),
        torch.randn(9, generator=g, dtype=torch.float64).tolist(),
        [True, True, False, True, True, True, False, True, True],
        (torch.rand(9, generator=g, dtype=torch.float64) + 0.5).tolist(),
    )
    fused_in = make_inputs(*args)
    fused = composer.composer_loss(
        fused_in, objective=objective, alpha_sdpo=0.3, is_clip=is_clip, objective_kwargs=objective_kwargs
    )
    base_in, sd_in = make_inputs(*args), make_inputs(*args)
    base = policy.OBJECTIVES[objective](base_in, **objective_kwargs)
    sd = distill.self_distill(sd_in, is_clip=is_clip)
    expected_loss = base.loss + 0.3 * sd.loss
    torch.testing.assert_close(fused.loss, expected_loss, rtol=1e-12, atol=1e-12)
    base_grad, sd_grad = torch.autograd.grad(expected_loss, [base_in.trainer_logprobs, sd_in.trainer_logprobs])
    torch.testing.assert_close(grad_of(fused, fused_in), base_grad + sd_grad, rtol=1e-12, atol=1e-12)
    assert fused.metrics.keys() == {**base.metrics, **sd.metrics}.keys()
    for key, value in {**base.metrics, **sd.metrics}.items():
        torch.testing.assert_close(fused.metrics[key], value, rtol=1e-6, atol=1e-7, msg=key)
