"""Closed-form checks of the policy objectives on hand-computable sequences (float64)."""

from __future__ import annotations

import math

import pytest
import torch

from loss_fns import policy
from loss_fns.types import SequenceInputs

LN2 = math.log(2.0)


def make_inputs(ratios, advantages, mask=None, weights=None, trainer=None, ref=None):
    """Trainer logprobs = inference + log(ratio); trainer logprobs are a grad-requiring leaf."""
    n = len(ratios)
    inference = torch.full((n,), -1.0, dtype=torch.float64) if trainer is None else None
    if trainer is None:
        trainer = (inference + torch.log(torch.tensor(ratios, dtype=torch.float64))).detach()
    else:
        trainer = torch.tensor(trainer, dtype=torch.float64)
        inference = trainer - torch.log(torch.tensor(ratios, dtype=torch.float64))
    return SequenceInputs(
        trainer_logprobs=trainer.clone().requires_grad_(),
        inference_logprobs=inference,
        ref_logprobs=None if ref is None else torch.tensor(ref, dtype=torch.float64),
        advantages=torch.tensor(advantages, dtype=torch.float64),
        loss_mask=torch.ones(n, dtype=torch.bool) if mask is None else torch.tensor(mask),
        loss_weights=None if weights is None else torch.tensor(weights, dtype=torch.float64),
    )


def loss_and_grad(fn, inputs, **kwargs):
    out = fn(inputs, **kwargs)
    (grad,) = torch.autograd.grad(out.loss, inputs.trainer_logprobs)
    return out, grad


# r = [1.5, 0.5, 1.1, 1.5], A = [1, -1, 2, -1]
RATIOS, ADVS = [1.5, 0.5, 1.1, 1.5], [1.0, -1.0, 2.0, -1.0]


def test_ppo_clip_closed_form() -> None:
    out, grad = loss_and_grad(policy.ppo_clip, make_inputs(RATIOS, ADVS))
    # tokens: clipped at 1.2 -> -1.2; clipped at 0.8 -> +0.8; unclipped -2.2; unclipped (pessimistic side) +1.5
    assert out.loss.item() == pytest.approx(-1.2 + 0.8 - 2.2 + 1.5, abs=1e-12)
    # d/dlogπ of -r·A is -r·A where unclipped; 0 where the clipped branch is active
    torch.testing.assert_close(grad, torch.tensor([0.0, 0.0, -2.2, 1.5], dtype=torch.float64))
    assert out.metrics["ppo_clip/clip_frac_high"].item() == pytest.approx(0.25)
    assert out.metrics["ppo_clip/clip_frac_low"].item() == pytest.approx(0.25)
    assert out.metrics["ppo_clip/ratio"].item() == pytest.approx(sum(RATIOS) / 4)


def test_dapo_clip_higher() -> None:
    out, grad = loss_and_grad(policy.dapo, make_inputs(RATIOS, ADVS))
    assert out.loss.item() == pytest.approx(-1.28 + 0.8 - 2.2 + 1.5, abs=1e-12)
    torch.testing.assert_close(grad, torch.tensor([0.0, 0.0, -2.2, 1.5], dtype=torch.float64))
    # r = 1.25 is inside DAPO's [0.8, 1.28] but outside PPO's [0.8, 1.2]
    out_d, grad_d = loss_and_grad(policy.dapo, make_inputs([1.25], [1.0]))
    out_p, grad_p = loss_and_grad(policy.ppo_clip, make_inputs([1.25], [1.0]))
    assert out_d.loss.item() == pytest.approx(-1.25) and grad_d.item() == pytest.approx(-1.25)
    assert out_p.loss.item() == pytest.approx(-1.2) and grad_p.item() == 0.0
    assert out_d.metrics["dapo/clip_frac_high"].item() == 0.0
    assert out_p.metrics["ppo_clip/clip_frac_high"].item() == 1.0


def test_dr_grpo_is_token_sum_and_scale() -> None:
    out, grad = loss_and_grad(policy.dr_grpo, make_inputs(RATIOS, ADVS))
    assert out.loss.item() == pytest.approx(-1.1, abs=1e-12)
    scaled, scaled_grad = loss_and_grad(policy.dr_grpo, make_inputs(RATIOS, ADVS), scale=0.5)
    assert scaled.loss.item() == pytest.approx(-0.55, abs=1e-12)
    torch.testing.assert_close(scaled_grad, grad * 0.5)
    assert set(out.metrics) == {f"dr_grpo/{k}" for k in ("clip_frac_low", "clip_frac_high", "ratio", "mismatch_kl")}


def test_mask_and_weights() -> None:
    masked, grad = loss_and_grad(policy.ppo_clip, make_inputs(RATIOS, ADVS, mask=[True, True, True, False]))
    assert masked.loss.item() == pytest.approx(-1.2 + 0.8 - 2.2, abs=1e-12)
    assert grad[3].item() == 0.0
    weighted, wgrad = loss_and_grad(policy.ppo_clip, make_inputs(RATIOS, ADVS, weights=[1.0, 2.0, 0.5, 1.0]))
    assert weighted.loss.item() == pytest.approx(-1.2 + 1.6 - 1.1 + 1.5, abs=1e-12)
    torch.testing.assert_close(wgrad, torch.tensor([0.0, 0.0, -1.1, 1.5], dtype=torch.float64))
    normed = policy.ppo_clip(make_inputs(RATIOS, ADVS, mask=[True, True, True, False]), length_norm=True)
    assert normed.loss.item() == pytest.approx((-1.2 + 0.8 - 2.2) / 3, abs=1e-12)


def test_gspo_sequence_ratio_closed_form() -> None:
    # log-ratios cancel: s = 1, inside the clip range; per-sequence mean of -s·A = -2
    inputs = make_inputs([math.exp(0.1), math.exp(-0.1), math.exp(0.2), math.exp(-0.2)], [2.0] * 4)
    out, grad = loss_and_grad(policy.gspo, inputs)
    assert out.loss.item() == pytest.approx(-2.0, abs=1e-12)
    # ∂(-s·A)/∂logπ_t = -A·s/|o|
    torch.testing.assert_close(grad, torch.full((4,), -0.5, dtype=torch.float64))
    assert out.metrics["gspo/seq_ratio"].item() == pytest.approx(1.0)
    # s = e^0.01 > 1 + 4e-4: clipped for A > 0 (no gradient), pessimistic unclipped branch for A < 0
    pos, pgrad = loss_and_grad(policy.gspo, make_inputs([math.exp(0.01)] * 4, [1.0] * 4))
    assert pos.loss.item() == pytest.approx(-1.0004, abs=1e-12)
    assert torch.count_nonzero(pgrad) == 0 and pos.metrics["gspo/clip_frac_high"].item() == 1.0
    neg, ngrad = loss_and_grad(policy.gspo, make_inputs([math.exp(0.01)] * 4, [-1.0] * 4))
    assert neg.loss.item() == pytest.approx(math.exp(0.01), abs=1e-12)
    torch.testing.assert_close(ngrad, torch.full((4,), math.exp(0.01) / 4, dtype=torch.float64))
    # without length_norm the sequence loss counts once per token
    summed = policy.gspo(inputs, length_norm=False)
    assert summed.loss.item() == pytest.approx(-8.0, abs=1e-12)
    # weights scale the per-token copies of the sequence loss: Σ_t w_t·ℓ / |o|; masked tokens leave the mean
    ratios = [math.exp(0.1), math.exp(-0.1), math.exp(0.2), math.exp(-0.2)]
    weighted = policy.gspo(make_inputs(ratios, [2.0] * 4, weights=[3.0, 3.0, 1.0, 1.0]))
    assert weighted.loss.item() == pytest.approx(-2.0 * 8 / 4, abs=1e-12)
    masked = policy.gspo(make_inputs(ratios, [2.0] * 4, mask=[True, True, False, False]), length_norm=False)
    assert masked.loss.item() == pytest.approx(-2.0 * 2, abs=1e-12)


def test_gspo_token_variant_uses_per_token_advantages() -> None:
    ratios = [math.exp(0.1), math.exp(-0.1), math.exp(0.2), math.exp(-0.2)]
    seq, seq_grad = loss_and_grad(policy.gspo, make_inputs(ratios, [1.0, 2.0, 3.0, 2.0]))
    tok, tok_grad = loss_and_grad(policy.gspo, make_inputs(ratios, [1.0, 2.0, 3.0, 2.0]), variant="token")
    assert seq.loss.item() == pytest.approx(-2.0, abs=1e-12)
    assert tok.loss.item() == pytest.approx(-2.0, abs=1e-12)  # same value: s_t == s
    torch.testing.assert_close(seq_grad, torch.full((4,), -0.5, dtype=torch.float64))
    torch.testing.assert_close(tok_grad, torch.tensor([-0.25, -0.5, -0.75, -0.5], dtype=torch.float64))
    with pytest.raises(ValueError, match="variant"):
        policy.gspo(make_inputs(ratios, [1.0] * 4), variant="bogus")


def test_cispo_closed_form() -> None:
    # logπ = [log .5, log .25], r = [2, 8] -> IS weights [2, 5 (clipped)]
    inputs = make_inputs([2.0, 8.0], [1.0, 1.0], trainer=[-LN2, -2 * LN2])
    out, grad = loss_and_grad(policy.cispo, inputs)
    assert out.loss.item() == pytest.approx(2 * LN2 + 10 * LN2, abs=1e-12)
    torch.testing.assert_close(grad, torch.tensor([-2.0, -5.0], dtype=torch.float64))
    assert out.metrics["cispo/clip_frac_high"].item() == 0.5
    low, low_grad = loss_and_grad(policy.cispo, make_inputs([0.5], [1.0], trainer=[-LN2]), ratio_min=0.8)
    assert low.loss.item() == pytest.approx(0.8 * LN2) and low_grad.item() == pytest.approx(-0.8)
    with pytest.raises(ValueError, match="ratio_max"):
        policy.cispo(inputs, ratio_max=1.0, ratio_min=2.0)


@pytest.mark.parametrize("name", sorted(policy.OBJECTIVES))
def test_empty_mask_gives_zero_loss_that_backpropagates(name: str) -> None:
    inputs = make_inputs(RATIOS, ADVS, mask=[False] * 4)
    out = policy.OBJECTIVES[name](inputs)
    assert out.loss.item() == 0.0 and out.loss.requires_grad
    out.loss.backward()
    assert torch.equal(inputs.trainer_logprobs.grad, torch.zeros(4, dtype=torch.float64))
    assert all(torch.isfinite(v).all() for v in out.metrics.values())
    assert all(k.startswith(f"{name}/") for k in out.metrics)


@pytest.mark.parametrize("name", sorted(policy.OBJECTIVES))
def test_gradient_reaches_policy_logprobs_only(name: str) -> None:
    inputs = make_inputs(RATIOS, ADVS, weights=[1.0, 0.5, 2.0, 1.0])
    for other in (inputs.inference_logprobs, inputs.advantages, inputs.loss_weights):
        other.requires_grad_()
    policy.OBJECTIVES[name](inputs).loss.backward()
    assert inputs.trainer_logprobs.grad is not None
    assert inputs.inference_logprobs.grad is None
    assert inputs.advantages.grad is None
    assert inputs.loss_weights.grad is None


def test_bad_clip_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"trainer\.loss\.kwargs\.clip_low"):
        policy.ppo_clip(make_inputs(RATIOS, ADVS), clip_low=1.5)


@pytest.mark.parametrize("advantage", [-1.7, 1.7])
def test_clip_decision_is_exact_when_float32_products_round_to_a_tie(advantage: float) -> None:
    # float32 r = 0.79999995 is one step below 1 - ε_low = 0.8f, but r·A and clip(r)·A round to the same float32.
    # The exact gradient of −min(r·A, clip(r)·A) is 0 for A < 0 (clipped branch) and −A·r for A > 0 (r branch);
    # a `torch.minimum` implementation splits such a rounding tie and returns half of −A·r in both cases.
    inference = torch.tensor([-1.0], dtype=torch.float32)
    trainer = inference + torch.log(torch.tensor([0.8], dtype=torch.float32))
    ratio = torch.exp(trainer - inference)
    clipped = torch.clamp(ratio, 0.8, 1.2)
    adv = torch.tensor([advantage], dtype=torch.float32)
    assert ratio.item() < clipped.item() and torch.equal(ratio * adv, clipped * adv)  # the premise: a rounding tie
    inputs = SequenceInputs(trainer.clone().requires_grad_(), inference, None, adv, torch.tensor([True]))
    out, grad = loss_and_grad(policy.ppo_clip, inputs)
    expected = 0.0 if advantage < 0 else -(advantage * ratio.item())
    assert grad.item() == pytest.approx(expected, rel=1e-6, abs=0.0)
    assert out.metrics["ppo_clip/clip_frac_low"].item() == (1.0 if advantage < 0 else 0.0)
