"""A tiny Qwen2 policy on disk for the CPU rehearsal: byte-level BPE (~300 merges) + a 2-layer Qwen2ForCausalLM.

The tokenizer carries the special tokens prime-rl's ``qwen3`` renderer looks up (``<|im_start|>``, ``<tool_call>``,
...), so the orchestrator and the env server render, bridge and parse tool calls exactly as for a Qwen3 model. No hub
download: trained in-process from a small corpus of chat, code and tool-call text.

``sft_echo`` then fine-tunes it a little on the rehearsal's echo task (scripts/rehearse/tasksets/crf_echo), on the
exact tokens prime-rl's qwen3 renderer sends, so that RL starts near the task and can move its reward in a few dozen
CPU steps (scripts/rehearse/learn.py).
"""

from __future__ import annotations

import json
from pathlib import Path

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]

# ChatML, as the Qwen family writes it; the qwen3 renderer does not read it, transformers' apply_chat_template does.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_CORPUS = [
    "def camelize(string, uppercase_first_letter=True):\n    return string\n",
    "import re\n\nfor name in names:\n    if name.startswith('_'):\n        continue\n",
    '{"name": "edit", "arguments": {"path": "inflection/__init__.py", "old_str": "", "new_str": "x"}}',
    '{"name": "bash", "arguments": {"command": "python -m pytest -q"}}',
    '{"name": "submit", "arguments": {"summary": "done"}}',
    "Re-implement the deleted feature so that the tests pass. error: unknown tool; invalid JSON",
    'Traceback (most recent call last):\n  File "<string>", line 1, in <module>\nModuleNotFoundError\n',
    "The quick brown fox jumps over the lazy dog. You are a helpful assistant.",
]


def build_tiny_model(out: Path, *, vocab_size: int = 320, seed: int = 0) -> Path:
    """Write tokenizer + config + random weights to ``out`` (a directory usable as ``model.name``)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(fast),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=fast.convert_tokens_to_ids("<|endoftext|>"),
    )
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(out)
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": config.eos_token_id}))
    return out


def echo_examples(tokenizer, answers: list[str]) -> list[tuple[list[int], list[int]]]:
    """(prompt ids as prime-rl's qwen3 renderer renders the echo task, completion ids = answer + <|im_end|>)."""
    from crf_echo import echo_prompt
    from crf_echo.taskset import SYSTEM
    from renderers import Qwen3RendererConfig
    from renderers.base import create_renderer

    renderer = create_renderer(tokenizer, Qwen3RendererConfig())
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    out = []
    for answer in answers:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": echo_prompt(answer)}]
        prompt = list(renderer.render_ids(messages, add_generation_prompt=True))
        out.append((prompt, [*tokenizer.encode(answer, add_special_tokens=False), end]))
    return out


def sampled_echo_reward(model, tokenizer, examples, answers: list[str], seed: int = 0) -> float:
    """Mean echo reward of one temperature-1 sample per example (what RL's first batch would score)."""
    import torch
    from crf_echo.taskset import similarity
    from sampling import sample

    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    gen = torch.Generator().manual_seed(seed)
    total = 0.0
    for (prompt, _), answer in zip(examples, answers, strict=True):
        drawn = sample(model, prompt, max_tokens=8, temperature=1.0, top_p=1.0, stop_ids={end}, generator=gen)
        total += similarity(tokenizer.decode([t for t in drawn.token_ids if t != end]), answer)
    return total / len(examples)


def sft_echo(
    model_dir: Path,
    *,
    target_reward: float = 0.4,
    max_steps: int = 300,
    check_every: int = 10,
    lr: float = 1e-2,
    length: int = 2,
    batch: int = 32,
    seed: int = 7,
) -> dict:
    """Supervised steps on echo examples of ``length`` digits (drawn with ``seed``), in place, until one
    temperature-1 sample per probe string scores ``target_reward`` on average (checked every ``check_every`` steps).

    Deliberately short: the policy should echo some strings, not all, so RL has reward left to gain. When copying
    sets in depends on the seed (a sharp transition), so the stop is measured rather than a fixed step count.
    Returns the steps taken, the last batch loss and the probe reward.
    """
    import torch
    from crf_echo import echo_strings
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    examples = echo_examples(tokenizer, echo_strings(min(512, 10**length), length, seed))
    probe_answers = echo_strings(32, length, seed + 1)
    probe = echo_examples(tokenizer, probe_answers)
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    loss_value, reward, step = float("nan"), 0.0, 0
    while step < max_steps:
        model.train()
        idx = torch.randint(len(examples), (batch,)).tolist()
        rows = [examples[i] for i in idx]
        width = max(len(p) + len(c) for p, c in rows)
        ids = torch.full((batch, width), tokenizer.pad_token_id)
        labels = torch.full((batch, width), -100)
        for r, (p, c) in enumerate(rows):
            ids[r, : len(p) + len(c)] = torch.tensor(p + c)
            labels[r, len(p) : len(p) + len(c)] = torch.tensor(c)
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        loss_value, step = float(loss.detach()), step + 1
        if step % check_every == 0:
            model.eval()
            reward = sampled_echo_reward(model, tokenizer, probe, probe_answers)
            if reward >= target_reward:
                break
    model.save_pretrained(model_dir)
    return {"steps": step, "loss": round(loss_value, 4), "probe_reward": round(reward, 4)}


def flatten_logits(model_dir: Path, factor: float) -> None:
    """Scale the final RMSNorm's weight by ``factor`` in place: every logit scales by ``factor`` (the head is linear
    after that norm), so sampling at temperature T then draws what the unscaled model draws at T / ``factor``.

    Why: prime-rl caps the sampling temperature at 2, and the learnable start point of the rehearsal is the echo-tuned
    model at temperature 2.5 (reward ~0.37, rising as RL sharpens it)."""
    import torch
    from transformers import AutoModelForCausalLM

    if not 0 < factor <= 1:
        raise ValueError(f"factor must be in (0, 1], got {factor}")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        model.model.norm.weight.mul_(factor)
    model.save_pretrained(model_dir)


if __name__ == "__main__":
    import sys

    print(build_tiny_model(Path(sys.argv[1])))
