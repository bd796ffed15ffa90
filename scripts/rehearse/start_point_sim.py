"""Out-of-loop check of a learning arm's start point: can RL move this model's echo reward in a few steps?

A single process stands in for the whole loop so that a start point, learning rate, group size and temperature can
be swept in minutes instead of a rehearsal run each: per step it samples ``tasks`` echo strings × ``group`` rollouts
at ``temperature`` (scripts/rehearse/sampling.py), scores them with the taskset's reward, and takes one AdamW step of
REINFORCE with a group-mean baseline (importance ratio against the sampling logprobs, token-sum / total tokens), with
one step of lag (batch N sampled by the weights before update N-1), as prime-rl's async level 1 does. It is not
prime-rl's loss; the rehearsal (rehearse.py --arms learn-a0) is the claim, this only picks its settings.

    ~/.cache/crf-prime/rehearsal-venv/bin/python scripts/rehearse/start_point_sim.py MODEL_DIR --lr 1e-3 --steps 15 \
        --tasks 16 --group 4 --temperature 2.5

Prints the mean reward of each step's rollouts.
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "tasksets")]

from crf_echo import echo_strings  # noqa: E402 -- the taskset lives beside the rehearsal, not installed
from crf_echo.taskset import similarity  # noqa: E402
from sampling import sample  # noqa: E402
from tiny_model import echo_examples  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--tasks", type=int, default=16, help="strings per step")
    parser.add_argument("--group", type=int, default=4, help="rollouts per string")
    parser.add_argument("--temperature", type=float, default=2.5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    sampler = copy.deepcopy(model).eval()
    answers = echo_strings(100, 2, 0)  # learn.toml's train strings
    examples = echo_examples(tok, answers)
    end = tok.convert_tokens_to_ids("<|im_end|>")
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    rng, gen = random.Random(args.seed), torch.Generator().manual_seed(args.seed)
    pending, curve, t = None, [], args.temperature
    for _ in range(args.steps):
        batch, rewards = [], []
        for i in rng.sample(range(len(answers)), args.tasks):
            prompt = examples[i][0]
            drawn = [
                sample(sampler, prompt, max_tokens=8, temperature=t, top_p=1.0, stop_ids={end}, generator=gen)
                for _ in range(args.group)
            ]
            rs = [similarity(tok.decode([x for x in d.token_ids if x != end]), answers[i]) for d in drawn]
            base = sum(rs) / len(rs)
            batch += [(prompt, d, r - base) for d, r in zip(drawn, rs, strict=True)]
            rewards += rs
        curve.append(round(sum(rewards) / len(rewards), 3))
        total = sum(len(d.token_ids) for _, d, _ in batch)
        for prompt, d, adv in batch:
            if adv == 0:
                continue
            ids = torch.tensor([prompt + d.token_ids])
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1] / t
            lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(d.token_ids)[:, None])[:, 0]
            (-(torch.exp(lp - torch.tensor(d.logprobs)) * adv).sum() / total).backward()
        optimizer.step()
        optimizer.zero_grad()
        if pending is not None:  # one step of lag
            sampler.load_state_dict(pending)
        pending = copy.deepcopy(model.state_dict())
    print(vars(args) | {"model": str(args.model)}, curve)


if __name__ == "__main__":
    main()
