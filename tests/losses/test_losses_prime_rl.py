"""Opt-in: our losses through the real prime-rl ``setup_rl_loss_fn`` + ``compute_loss`` on CPU.

Enable with ``CRF_PRIME_RL_SRC=/path/to/prime-rl`` (a source checkout) and the ``prime-rl`` extra installed.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from prime_rl_support import prime_rl_on_path, prime_rl_paths

from loss_fns import composer, distill, policy, types

pytestmark = pytest.mark.prime_rl


@pytest.fixture(scope="module")
def prime():
    with prime_rl_on_path():
        from prime_rl.configs.trainer import CustomLossConfig
        from prime_rl.trainer.rl import loss as prime_loss

        yield CustomLossConfig, prime_loss


# Two packed sequences (lengths 3 and 4), ratios chosen for hand-computable clipping.
LENGTHS = [3, 4]
RATIOS = [1.5, 0.5, 1.1, 1.0, 1.25, 0.7, 2.0]
ADVANTAGES = [1.0, 1.0, 1.0, -0.5, -0.5, -0.5, -0.5]
MASK = [True, True, True, True, True, False, True]


def packed_batch():
    inference = torch.linspace(-2.0, -0.5, 7, dtype=torch.float64)
    trainer = (inference + torch.log(torch.tensor(RATIOS, dtype=torch.float64))).detach().requires_grad_()
    split = lambda t: list(t.split(LENGTHS))  # noqa: E731  (train.py splits by sequence_lengths)
    return trainer, {
        "trainer_logprobs": split(trainer),
        "inference_logprobs": split(inference),
        "advantages": split(torch.tensor(ADVANTAGES, dtype=torch.float64)),
        "loss_mask": split(torch.tensor(MASK)),
    }


def run(prime, import_path, kwargs, rl_scale, rl_weights=None, ref_logprobs=None):
    config_cls, prime_loss = prime
    rl_fn = prime_loss.setup_rl_loss_fn(config_cls(import_path=import_path, kwargs=kwargs))
    trainer, batch = packed_batch()
    loss, metrics = prime_loss.compute_loss(
        **batch,
        ref_logprobs=ref_logprobs,
        rl_weights=rl_weights,
        ce_weights=None,
        ref_kl_weights=None,
        rl_loss_fn=rl_fn,
        rl_scale=rl_scale,
        ce_scale=1,
        ref_kl_scale=1,
    )
    loss.backward()
    return loss, trainer.grad, metrics


def test_dr_grpo_through_compute_loss(prime) -> None:
    loss, grad, metrics = run(prime, "loss_fns.policy.dr_grpo", {"clip_high": 0.28}, rl_scale=6)
    # seq 1 (A = 1): r 1.5 clipped at 1.28; r 0.5 and 1.1 unclipped (−r·A). seq 2 (A = −0.5): −min(r·A, clip(r)·A)
    per_token = [-1.28, -0.5, -1.1, 0.5, 0.625, 0.0, 1.0]
    assert loss.item() == pytest.approx(sum(per_token) / 6, abs=1e-12)
    expected_grad = torch.tensor([0.0, -0.5, -1.1, 0.5, 0.625, 0.0, 1.0], dtype=torch.float64) / 6
    torch.testing.assert_close(grad, expected_grad)
    torch.testing.assert_close(metrics["dr_grpo/clip_frac_high"], torch.tensor([1 / 3, 0.0]))


def test_rl_weights_stream(prime) -> None:
    weights = [torch.tensor([1.0, 0.0, 2.0], dtype=torch.float64), torch.full((4,), 0.5, dtype=torch.float64)]
    loss, grad, _ = run(prime, "loss_fns.policy.dr_grpo", {"clip_high": 0.28}, rl_scale=5, rl_weights=weights)
    assert loss.item() == pytest.approx((-1.28 - 2.2 + 0.5 * (0.5 + 0.625 + 1.0)) / 5, abs=1e-12)
    expected_grad = torch.tensor([0.0, 0.0, -2.2, 0.25, 0.3125, 0.0, 0.5], dtype=torch.float64) / 5
    torch.testing.assert_close(grad, expected_grad)


def test_composer_with_mixed_batch_reference(prime) -> None:
    # seq 1 has a reference, seq 2 is zero-filled (prime-rl's mixed-batch packing): only seq 1 is distilled
    ref = [torch.tensor([-1.0, -1.5, -0.2], dtype=torch.float64), torch.zeros(4, dtype=torch.float64)]
    kwargs = {"objective": "dapo", "alpha_sdpo": 0.5, "is_clip": None}
    loss, grad, metrics = run(prime, "loss_fns.composer.composer_loss", kwargs, rl_scale=6, ref_logprobs=ref)
    trainer, batch = packed_batch()
    expected_loss, expected_grad = 0.0, []
    for i in range(2):
        inputs = types.SequenceInputs(
            trainer_logprobs=batch["trainer_logprobs"][i],
            inference_logprobs=batch["inference_logprobs"][i],
            ref_logprobs=ref[i],
            advantages=batch["advantages"][i],
            loss_mask=batch["loss_mask"][i],
        )
        base = policy.dapo(inputs).loss
        sd = distill.self_distill(inputs, is_clip=None).loss
        expected_loss = expected_loss + base + 0.5 * sd
    expected_loss = expected_loss / 6
    (expected_grad,) = torch.autograd.grad(expected_loss, trainer)
    assert loss.item() == pytest.approx(expected_loss.item(), abs=1e-12)
    torch.testing.assert_close(grad, expected_grad)
    # hand check of seq 1's distillation gradient share: 0.5·(logπ − ref)/6 on top of dapo's
    lp = batch["trainer_logprobs"][0].detach()
    dapo_grad = torch.tensor([0.0, -0.5, -1.1], dtype=torch.float64)  # r 1.5 clipped at 1.28
    torch.testing.assert_close(grad[:3], (dapo_grad + 0.5 * (lp - ref[0])) / 6)
    torch.testing.assert_close(metrics["distill/has_ref"], torch.tensor([1.0, 0.0]))


def test_empty_mask_keeps_backward_valid(prime) -> None:
    config_cls, prime_loss = prime
    rl_fn = prime_loss.setup_rl_loss_fn(config_cls(import_path="loss_fns.policy.gspo"))
    trainer = torch.tensor([-0.5, -0.7], dtype=torch.float64, requires_grad=True)
    loss, _ = prime_loss.compute_loss(
        trainer_logprobs=[trainer],
        inference_logprobs=[trainer.detach()],
        ref_logprobs=None,
        advantages=[torch.ones(2, dtype=torch.float64)],
        loss_mask=[torch.zeros(2, dtype=torch.bool)],
        rl_weights=None,
        ce_weights=None,
        ref_kl_weights=None,
        rl_loss_fn=rl_fn,
        rl_scale=1,
        ce_scale=1,
        ref_kl_scale=1,
    )
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(trainer.grad, torch.zeros(2, dtype=torch.float64))


def test_types_interoperate(prime) -> None:
    _, prime_loss = prime
    x = torch.zeros(2)
    prime_inputs = prime_loss.LossInputs(x, x, None, x, torch.ones(2, dtype=torch.bool))
    assert isinstance(prime_inputs, types.LossInputs)
    out = composer.composer_loss(prime_inputs)
    assert isinstance(out, prime_loss.LossOutputs)  # prime-rl's class once its loss module is loaded
    config_cls, _ = prime
    rl_fn = prime_loss.setup_rl_loss_fn(config_cls(import_path="loss_fns.policy.cispo", kwargs={"ratio_max": 3.0}))
    assert isinstance(rl_fn(prime_inputs), prime_loss.LossOutputs)  # through prime-rl's own setup


def test_prime_classes_used_when_imported_after_loss_fns() -> None:
    code = (
        "import torch; import loss_fns.types as t; from prime_rl.trainer.rl import loss as p; x = torch.zeros(1); "
        "assert isinstance(p.LossInputs(x, x, None, x, x.bool()), t.LossInputs); "
        "assert type(t.make_outputs(x.sum(), {})) is p.LossOutputs; print('ok')"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*prime_rl_paths(), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
