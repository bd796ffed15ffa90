"""Stand-in for prime-rl's trainer (``prime_rl.trainer.rl.train``), on CPU with the tiny model.

What is prime-rl's own: the config (``TrainerConfig`` from the launcher's ``trainer.json``, parsed by prime-rl's
``cli``), the batch (``prime_rl.trainer.rl.data.DataLoader`` over the configured rollout transport: the exact reader
the trainer uses), the per-component token scales (as train.py computes them), and the loss (``setup_rl_loss_fn`` +
``compute_loss`` from ``prime_rl/trainer/rl/loss.py``, with the arm's custom loss). What stands in: FSDP2/torchrun and
the CUDA forward (train.py calls ``torch.cuda.reset_peak_memory_stats()`` at the top of every step and moves every
tensor ``.to("cuda")``), replaced by a plain per-sample forward of a Hugging Face model; the filesystem broadcast
writes the HF checkpoint with ``save_pretrained`` and then ``STABLE`` into ``broadcasts/step_N`` as
``FileSystemWeightBroadcast`` does, so the orchestrator's watcher advances.

Writes ``<output_dir>/rehearsal/trainer_step_<N>.json`` per step: loss, loss metrics, the off-policy figures (mismatch
KL ``r − log r − 1`` of the trainer's against the sampling logprobs, ratio range, clip and masked fractions), the loss
every policy objective gives the same batch (``--compare-objectives``), samples per source, and the distillation
analysis (issue 12) against the inference stand-in's completion log.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

import torch


def _load_completions(path: Path) -> dict[tuple[int, ...], str | None]:
    """completion token ids -> error kind (None: not an error turn), from the inference stand-in's log."""
    table: dict[tuple[int, ...], str | None] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if "completion_ids" in rec:  # scoring calls are logged too
                table[tuple(rec["completion_ids"])] = rec["error"]
    return table


def _spans(mask: list[bool]) -> list[tuple[int, int]]:
    """Contiguous True runs of ``mask`` as (start, end)."""
    spans, start = [], None
    for i, m in enumerate([*mask, False]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


def _publish(model, output_dir: Path, step: int) -> None:
    """HF checkpoint + STABLE in broadcasts/step_<step>, the layout FileSystemWeightBroadcast writes."""
    from prime_rl.utils.pathing import get_broadcast_dir, get_step_path

    save_dir = get_step_path(get_broadcast_dir(output_dir), step)
    save_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(save_dir, safe_serialization=True)
    (save_dir / "STABLE").touch()


COMPARED = ("default", "ppo_clip", "dr_grpo", "dapo", "gspo", "cispo")
"""Objectives whose loss on each step's batch is recorded beside the arm's own: prime-rl's default loss and every
objective of loss_fns.policy (with its default kwargs)."""


def _comparison_fns() -> dict[str, object]:
    """Name → prime-rl rl loss fn (``setup_rl_loss_fn``) for each objective in COMPARED."""
    from prime_rl.configs.trainer import CustomLossConfig, DefaultLossConfig
    from prime_rl.trainer.rl.loss import setup_rl_loss_fn

    configs = {name: CustomLossConfig(import_path=f"loss_fns.policy.{name}") for name in COMPARED[1:]}
    return {name: setup_rl_loss_fn(cfg) for name, cfg in {"default": DefaultLossConfig(), **configs}.items()}


def off_policy_figures(metrics: dict[str, list[float]], log_ratios: list[float]) -> dict[str, float]:
    """Mismatch KL (k3 = r − log r − 1, mean over the step's loss tokens), ratio range, and the clip and masked
    fractions the arm's loss reported (clip: the ``*/clip_frac_low|high`` metrics summed; masked: prime-rl's
    ``is_masked``), as means over the step's sequences."""
    lr = torch.tensor(log_ratios, dtype=torch.float64)
    ratio = lr.exp()

    def mean_of(pred) -> float:
        vals = [sum(v) / len(v) for k, v in metrics.items() if pred(k) and v]
        return float(sum(vals)) if vals else 0.0

    return {
        "mismatch_kl": float((ratio - lr - 1).mean()) if len(lr) else 0.0,
        "ratio_min": float(ratio.min()) if len(lr) else 1.0,
        "ratio_max": float(ratio.max()) if len(lr) else 1.0,
        "clip_frac": mean_of(lambda k: k.endswith(("clip_frac_low", "clip_frac_high"))),
        "masked_frac": mean_of(lambda k: k == "is_masked"),
    }


def component_scales(micro_batches: list[dict]) -> tuple[int, int, int]:
    """The rl, ce and ref_kl token counts that normalise each loss component, as prime-rl's train.py computes them
    (train.py:307-323 at 559b447) on one rank, where its all-reduce is the identity.
    tests/rehearsal/test_trainer_scales.py checks this against train.py's own lines."""
    rl_scale = ce_scale = ref_kl_scale = 0
    for mb in micro_batches:
        mask, rl_w = mb["loss_mask"], mb["rl_weights"]
        rl_scale += int((mask & (rl_w != 0)).sum()) if rl_w is not None else int(mask.sum())
        if mb["ce_weights"] is not None:
            ce_scale += int((mb["ce_weights"] != 0).sum())
        if mb["ref_kl_weights"] is not None:
            ref_kl_scale += int((mb["ref_kl_weights"] != 0).sum())
    return max(rl_scale, 1), max(ce_scale, 1), max(ref_kl_scale, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("config", help="trainer.json written by `rl --dry-run`")
    parser.add_argument("--completions", required=True, help="the inference stand-in's completion log")
    parser.add_argument("--hint-sources", nargs="*", default=[], help="train sources whose algorithm is opsd")
    parser.add_argument(
        "--compare-objectives", action="store_true", help="also record every objective's loss on each step's batch"
    )
    args = parser.parse_args()

    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("LOCAL_WORLD_SIZE", "1")
    torch.set_num_threads(int(os.environ.get("CRF_REHEARSAL_THREADS", "1")))

    from prime_rl.configs.trainer import TrainerConfig
    from prime_rl.trainer.rl.data import DataLoader
    from prime_rl.trainer.rl.loss import compute_loss, setup_rl_loss_fn
    from prime_rl.utils.config import cli
    from transformers import AutoModelForCausalLM

    config = cli(TrainerConfig, args=["@", args.config])
    output_dir = Path(config.output_dir)
    report_dir = output_dir / "rehearsal"
    report_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(config.model.name, dtype=torch.float32)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay)
    rl_loss_fn = setup_rl_loss_fn(config.loss)
    compared = _comparison_fns() if args.compare_objectives else {}
    vocab_size = model.config.vocab_size

    step = 1
    _publish(model, output_dir, step - 1)  # the startup broadcast (v0), as train.py does before its first batch
    dataloader = DataLoader(output_dir, step, 1, config.rollout_transport)
    while config.max_steps is None or step <= config.max_steps:
        dataloader.wait_for_batch()
        micro_batches = dataloader.get_batch()
        completions = _load_completions(Path(args.completions))

        rl_scale, ce_scale, ref_kl_scale = component_scales(micro_batches)

        losses: list[float] = []
        metrics: dict[str, list[float]] = {}
        samples: dict[str, int] = {}
        mismatch: list[float] = []
        objective_losses = dict.fromkeys(compared, 0.0)
        distill = {"samples": 0, "tokens": 0, "tokens_in_error_turns": 0, "tokens_unattributed": 0, "turns": 0}
        distill["hint_distances"] = []
        distill["ref_differs_from_inference"] = 0
        for mb in micro_batches:
            lengths = list(mb["sequence_lengths"])
            ids = mb["input_ids"][0]
            temps = mb["temperatures"][0]
            # one forward per packed sample (no varlen attention on CPU): positions restart per sample
            parts = []
            for s_ids, s_pos, s_temp in zip(
                ids.split(lengths), mb["position_ids"][0].split(lengths), temps.split(lengths), strict=True
            ):
                logits = model(input_ids=s_ids[None], position_ids=s_pos[None]).logits[0].float()
                logits = logits / s_temp[:, None]
                labels = torch.roll(s_ids, -1)
                lp = torch.log_softmax(logits, dim=-1).gather(-1, labels[:, None])[:, 0]
                # train.py shifts right with log(1/vocab) as the pad of the first position
                lp = torch.cat([torch.full((1,), math.log(1.0 / vocab_size)), lp[:-1]])
                parts.append(lp)
            trainer_lp = torch.cat(parts)
            batch = {
                "inference_logprobs": _split(lengths, mb["inference_logprobs"]),
                "ref_logprobs": _split(lengths, mb["ref_logprobs"]),
                "advantages": _split(lengths, mb["advantages"]),
                "loss_mask": _split(lengths, mb["loss_mask"]),
                "rl_weights": _split(lengths, mb["rl_weights"]),
                "ce_weights": _split(lengths, mb["ce_weights"]),
                "ref_kl_weights": _split(lengths, mb["ref_kl_weights"]),
                "rl_scale": rl_scale,
                "ce_scale": ce_scale,
                "ref_kl_scale": ref_kl_scale,
            }
            loss, tensors = compute_loss(trainer_logprobs=trainer_lp.split(lengths), rl_loss_fn=rl_loss_fn, **batch)
            with torch.no_grad():
                detached = trainer_lp.detach().split(lengths)
                for name, fn in compared.items():
                    objective_losses[name] += float(compute_loss(trainer_logprobs=detached, rl_loss_fn=fn, **batch)[0])
            loss.backward()
            losses.append(float(loss.detach()))
            for key, value in tensors.items():
                metrics.setdefault(key, []).extend(torch.as_tensor(value, dtype=torch.float).flatten().tolist())
            mask_all = mb["loss_mask"][0]
            inf_all = mb["inference_logprobs"][0]
            mismatch.extend((inf_all - trainer_lp.detach())[mask_all].tolist())
            offset = 0
            env_names = mb["env_names"]
            for n in lengths:
                env = env_names[offset]  # one name per token (trainer/batch.py)
                samples[env] = samples.get(env, 0) + 1
                if env in args.hint_sources:
                    _distillation(mb, offset, n, completions, distill)
                offset += n
        optimizer.step()
        optimizer.zero_grad()
        _publish(model, output_dir, step)
        finite = all(math.isfinite(x) for x in losses) and all(
            math.isfinite(v) for vals in metrics.values() for v in vals
        )
        record = {
            "step": step,
            "loss": sum(losses),
            "finite": finite,
            "micro_batches": len(micro_batches),
            "samples_per_source": samples,
            "mismatch_abs_max": max((abs(x) for x in mismatch), default=0.0),
            "off_policy": off_policy_figures(metrics, [-x for x in mismatch]),
            "objective_losses": objective_losses,
            "metrics_mean": {k: (sum(v) / len(v) if v else 0.0) for k, v in metrics.items()},
            "distill": distill,
            "scales": {"rl": rl_scale, "ce": ce_scale, "ref_kl": ref_kl_scale},
        }
        (report_dir / f"trainer_step_{step}.json").write_text(json.dumps(record, indent=1))
        print(json.dumps(record), flush=True)
        step += 1


def _split(lengths: list[int], t: torch.Tensor | None) -> tuple[torch.Tensor, ...] | None:
    """A [1, total] micro-batch tensor as per-sample 1-D pieces (None stays None)."""
    return t[0].split(lengths) if t is not None else None


def _distillation(mb, offset: int, n: int, completions: dict, acc: dict) -> None:
    """Where the ref_kl (distillation) tokens of one hint-source sample lie: inside error turns or not."""
    mask = mb["loss_mask"][0][offset : offset + n].tolist()
    ids = mb["input_ids"][0][offset : offset + n].tolist()
    ref = mb["ref_logprobs"][0][offset : offset + n] if mb["ref_logprobs"] is not None else None
    inf = mb["inference_logprobs"][0][offset : offset + n]
    ref_w = mb["ref_kl_weights"][0][offset : offset + n] if mb["ref_kl_weights"] is not None else None
    distilled = [m and (ref_w is None or float(ref_w[i]) != 0) for i, m in enumerate(mask)]
    if not any(distilled):
        return
    acc["samples"] += 1
    if ref is not None:
        sel = torch.tensor(distilled)
        acc["ref_differs_from_inference"] += int(((ref - inf).abs() > 1e-4)[sel].sum())
    for start, end in _spans(distilled):
        # opsd's hint is a leading system message: this many of the sample's tokens lie between it and the turn
        acc["turns"] += 1
        acc["hint_distances"].append(start)
        span = tuple(ids[start:end])
        kind = completions.get(span, "unattributed")
        if kind == "unattributed":
            # a completion truncated or extended by the renderer: match the longest logged completion it starts with
            for comp, k in completions.items():
                if span[: len(comp)] == comp or comp[: len(span)] == span:
                    kind = k
                    break
        width = end - start
        acc["tokens"] += width
        if kind == "unattributed":
            acc["tokens_unattributed"] += width
        elif kind is not None:
            acc["tokens_in_error_turns"] += width


if __name__ == "__main__":
    main()
