"""Loss benchmarks (CPU): prints ratio tables against baselines measured in the same run. Not a test.

1. Each ``loss_fns`` objective vs a plain-torch re-statement of prime-rl's default loss (DPPO-Binary-TV + squared
   log-ratio KL, ``default_loss_fn`` in prime-rl's ``trainer/rl/loss.py``) on the same packed batch, called once
   per sequence as ``compute_loss`` does, forward + backward. Target ≤ 1.3×.
2. The cost of typed kwargs: ``dapo(inputs, clip_high="0.28")`` (CLI strings, validated through ``DapoKwargs`` and
   cached by value) vs the same terms built from already-validated kwargs, per sequence, forward only.

Usage: ``python benchmarks/losses.py [--objective-repeats 21] [--skip-objectives] [--skip-kwargs]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch


def default_loss_restated(inputs, mask_low: float = 0.2, mask_high: float = 0.2, kl_tau: float = 1e-3):
    """prime-rl's default rl loss re-stated in plain torch: keep-mask on the probability difference, ratio·A, KL."""
    log_ratio = inputs.trainer_logprobs - inputs.inference_logprobs
    ratio = torch.exp(log_ratio)
    diff = torch.exp(inputs.trainer_logprobs) - torch.exp(inputs.inference_logprobs)
    positive = inputs.advantages > 0
    invalid = torch.where(positive, diff > mask_high, diff < -mask_low)
    keep = inputs.loss_mask & ~invalid
    per_token = -(keep * inputs.advantages * ratio) + kl_tau * (inputs.loss_mask * log_ratio**2)
    mismatch = ratio - log_ratio - 1
    metrics = {
        "is_masked": invalid[inputs.loss_mask].float().mean(),
        "unmasked_mismatch_kl": mismatch[keep].sum() / keep.sum().clamp_min(1),
        "masked_mismatch_kl": mismatch[inputs.loss_mask & invalid].sum()
        / (inputs.loss_mask & invalid).sum().clamp_min(1),
    }
    return per_token.sum(), metrics


def run_objectives(num_seqs: int, seq_len: int, repeats: int) -> list[tuple[str, float, float, float]]:
    from loss_fns import composer, distill, policy
    from loss_fns.types import SequenceInputs

    g = torch.Generator().manual_seed(1)
    n = num_seqs * seq_len
    inference = -torch.rand(n, generator=g) * 3
    trainer_base = inference + torch.randn(n, generator=g) * 0.05
    ref = inference + torch.randn(n, generator=g) * 0.3
    adv = torch.randn(num_seqs, generator=g).repeat_interleave(seq_len)
    mask = torch.rand(n, generator=g) > 0.2
    lengths = [seq_len] * num_seqs

    def packed(trainer):
        return [
            SequenceInputs(t, i, r, a, m)
            for t, i, r, a, m in zip(
                trainer.split(lengths),
                inference.split(lengths),
                ref.split(lengths),
                adv.split(lengths),
                mask.split(lengths),
                strict=True,
            )
        ]

    def once(fn) -> float:
        trainer = trainer_base.clone().requires_grad_()
        start = time.perf_counter()
        total = trainer.sum() * 0.0
        for inputs in packed(trainer):
            total = total + fn(inputs)
        (total / int(mask.sum())).backward()
        return time.perf_counter() - start

    def timed(fn) -> tuple[float, float, float]:
        """Medians of ``fn``, of the baseline and of their per-pair ratio; interleaved so load hits both alike."""
        once(fn), once(baseline)
        pairs = [(once(fn), once(baseline)) for _ in range(repeats)]
        return (
            statistics.median(p[0] for p in pairs),
            statistics.median(p[1] for p in pairs),
            statistics.median(p[0] / p[1] for p in pairs),
        )

    cases = {
        "ppo_clip": lambda x: policy.ppo_clip(x).loss,
        "dr_grpo": lambda x: policy.dr_grpo(x).loss,
        "dapo": lambda x: policy.dapo(x).loss,
        "gspo (sequence)": lambda x: policy.gspo(x).loss,
        "gspo (token)": lambda x: policy.gspo(x, variant="token").loss,
        "cispo": lambda x: policy.cispo(x).loss,
        "self_distill": lambda x: distill.self_distill(x).loss,
        "composer (dr_grpo + 0.1 sdpo)": lambda x: composer.composer_loss(x, alpha_sdpo=0.1).loss,
    }

    def baseline(x):
        return default_loss_restated(x)[0]

    return [(name, *timed(fn)) for name, fn in cases.items()]


def run_kwargs_overhead(num_seqs: int, seq_len: int, repeats: int) -> tuple[float, float, float]:
    """Median seconds per packed batch of the validated call, of the pre-validated one, and their paired ratio."""
    from loss_fns import policy
    from loss_fns.kwargs import resolve
    from loss_fns.types import SequenceInputs, make_outputs

    g = torch.Generator().manual_seed(2)
    seqs = [
        SequenceInputs(
            -torch.rand(seq_len, generator=g),
            -torch.rand(seq_len, generator=g),
            None,
            torch.randn(seq_len, generator=g),
            torch.rand(seq_len, generator=g) > 0.2,
        )
        for _ in range(num_seqs)
    ]
    cli_kwargs = {"clip_low": "0.2", "clip_high": "0.28"}  # as prime-pydantic-config passes --trainer.loss.kwargs.*
    params = resolve(policy.DapoKwargs, cli_kwargs)

    def validated() -> None:
        for x in seqs:
            policy.dapo(x, **cli_kwargs)

    def prevalidated() -> None:
        for x in seqs:
            terms = policy.dapo.terms(x, **params)
            make_outputs(policy.reduce_loss(terms, x), policy.reduce_metrics(terms, x.loss_mask))

    def once(fn) -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    once(validated), once(prevalidated)
    pairs = [(once(validated), once(prevalidated)) for _ in range(repeats)]
    return (
        statistics.median(p[0] for p in pairs),
        statistics.median(p[1] for p in pairs),
        statistics.median(p[0] / p[1] for p in pairs),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-seqs", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--objective-repeats", type=int, default=21)
    parser.add_argument("--skip-objectives", action="store_true")
    parser.add_argument("--skip-kwargs", action="store_true")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    if not args.skip_objectives:
        print(f"\n## Objectives vs prime-rl default loss (re-stated), {args.num_seqs}x{args.seq_len} packed tokens")
        print("| objective | seconds | baseline s | ratio (median of paired ratios) |")
        print("|---|---|---|---|")
        for name, seconds, baseline, ratio in run_objectives(args.num_seqs, args.seq_len, args.objective_repeats):
            print(f"| {name} | {seconds:.4f} | {baseline:.4f} | {ratio:.2f}x |")
    if not args.skip_kwargs:
        validated, prevalidated, ratio = run_kwargs_overhead(args.num_seqs, args.seq_len, args.objective_repeats)
        print(f"\n## Typed kwargs: dapo with CLI-string kwargs vs pre-validated, {args.num_seqs}x{args.seq_len}, fwd")
        print("| validated s | pre-validated s | ratio (median of paired ratios) |")
        print("|---|---|---|")
        print(f"| {validated:.4f} | {prevalidated:.4f} | {ratio:.3f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
