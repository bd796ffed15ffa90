"""Loss benchmarks (CPU): prints ratio tables against baselines measured in the same run. Not a test.

1. Chunked fused-linear generalized JSD vs the naive form (materialised ``[T, V]`` logits) at T ∈ {1024, 4096},
   V = 32768, H = 512, fp32, forward + backward. Each case runs in its own subprocess: peak memory is the resident
   set high-water mark (``VmHWM``, reset through ``/proc/self/clear_refs`` once the inputs exist) minus the resident
   set at that moment (one call per process). Time comes from one more process per T that alternates naive and
   chunked calls (after a warm-up round) and reports medians of wall clock and of process CPU time (the CPU time
   is steadier on a shared machine).
   Targets: chunked peak ≤ 20 % of naive and time ≤ 1.0× at T = 4096.
2. Each ``loss_fns`` objective vs a plain-torch re-statement of prime-rl's default loss (DPPO-Binary-TV + squared
   log-ratio KL, ``default_loss_fn`` in prime-rl's ``trainer/rl/loss.py``) on the same packed batch, called once
   per sequence as ``compute_loss`` does, forward + backward. Target ≤ 1.3×.
3. The cost of typed kwargs: ``dapo(inputs, clip_high="0.28")`` (CLI strings, validated through ``DapoKwargs`` and
   cached by value) vs the same terms built from already-validated kwargs, per sequence, forward only.

Usage: ``python benchmarks/losses.py [--tokens 1024 4096] [--repeats 3] [--objective-repeats 21] [--skip-jsd]
[--skip-objectives] [--skip-kwargs]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

VOCAB, HIDDEN = 32768, 512


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def _hwm_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _jsd_inputs(tokens: int):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(tokens, HIDDEN, generator=g).requires_grad_()
    w = (torch.randn(VOCAB, HIDDEN, generator=g) * 0.02).requires_grad_()
    h_t, w_t = torch.randn(tokens, HIDDEN, generator=g), torch.randn(VOCAB, HIDDEN, generator=g) * 0.02
    h.grad, w.grad = torch.zeros_like(h), torch.zeros_like(w)  # gradient buffers exist before any measurement
    return h, w, h_t, w_t, torch.ones(tokens, dtype=torch.bool)


def _jsd_step(impl: str, h, w, h_t, w_t, mask) -> None:
    from loss_fns.logit import fused_linear_jsd, jsd_loss

    if impl == "naive":
        loss = jsd_loss(h @ w.T, h_t @ w_t.T, mask, beta=0.5, temperature=1.1)
    else:
        loss = fused_linear_jsd(h, w, h_t, w_t, mask, beta=0.5, temperature=1.1)
    loss.backward()


def _jsd_memory_case(impl: str, tokens: int) -> dict[str, float]:
    """Peak resident-set growth of one fwd+bwd call, in a fresh process (called as a subprocess)."""
    inputs = _jsd_inputs(tokens)
    with contextlib.suppress(OSError):  # without the reset, VmHWM still bounds the peak from above
        Path("/proc/self/clear_refs").write_text("5")
    base = _rss_kib()
    _jsd_step(impl, *inputs)
    return {"peak_mib": (_hwm_kib() - base) / 1024}


def _jsd_time_case(tokens: int, repeats: int) -> dict[str, dict[str, float]]:
    """Median wall and CPU seconds of naive and chunked, alternating so machine load hits both alike."""
    inputs = _jsd_inputs(tokens)
    samples: dict[str, dict[str, list[float]]] = {impl: {"wall": [], "cpu": []} for impl in ("naive", "chunked")}
    for rep in range(repeats + 1):
        for impl in ("naive", "chunked"):
            start, cpu = time.perf_counter(), time.process_time()
            _jsd_step(impl, *inputs)
            if rep:  # the first round warms up
                samples[impl]["wall"].append(time.perf_counter() - start)
                samples[impl]["cpu"].append(time.process_time() - cpu)
    return {
        impl: {"seconds": statistics.median(s["wall"]), "cpu_seconds": statistics.median(s["cpu"])}
        for impl, s in samples.items()
    }


def _subprocess_json(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_jsd(token_counts: list[int], repeats: int) -> list[tuple[int, dict, dict]]:
    rows = []
    for tokens in token_counts:
        results = _subprocess_json("--_time", "--tokens", str(tokens), "--repeats", str(repeats))
        for impl in ("naive", "chunked"):
            results[impl].update(_subprocess_json("--_memory", impl, "--tokens", str(tokens)))
        rows.append((tokens, results["naive"], results["chunked"]))
    return rows


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
    from loss_fns.types import LossInputs

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
            LossInputs(t, i, r, a, m)
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
    from loss_fns.types import LossInputs, make_outputs

    g = torch.Generator().manual_seed(2)
    seqs = [
        LossInputs(
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
    parser.add_argument("--tokens", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--num-seqs", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--objective-repeats", type=int, default=21)
    parser.add_argument("--skip-jsd", action="store_true")
    parser.add_argument("--skip-objectives", action="store_true")
    parser.add_argument("--skip-kwargs", action="store_true")
    parser.add_argument("--_memory", choices=["naive", "chunked"], help=argparse.SUPPRESS)
    parser.add_argument("--_time", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._memory:
        print(json.dumps(_jsd_memory_case(args._memory, args.tokens[0])))
        return 0
    if args._time:
        print(json.dumps(_jsd_time_case(args.tokens[0], args.repeats)))
        return 0
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    if not args.skip_jsd:
        print(f"\n## Generalized JSD (β=0.5, τ=1.1), V={VOCAB}, H={HIDDEN}, fp32, fwd+bwd, median of {args.repeats}")
        print(
            "| T | naive peak MiB | chunked peak MiB | peak ratio | naive s (cpu) | chunked s (cpu) | wall ratio | cpu ratio |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for tokens, naive, chunked in run_jsd(args.tokens, args.repeats):
            print(
                f"| {tokens} | {naive['peak_mib']:.0f} | {chunked['peak_mib']:.0f} | "
                f"{chunked['peak_mib'] / naive['peak_mib']:.1%} | {naive['seconds']:.2f} ({naive['cpu_seconds']:.2f}) | "
                f"{chunked['seconds']:.2f} ({chunked['cpu_seconds']:.2f}) | "
                f"{chunked['seconds'] / naive['seconds']:.2f}x | {chunked['cpu_seconds'] / naive['cpu_seconds']:.2f}x |"
            )
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
