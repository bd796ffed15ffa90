"""The inference stand-in's sampler: ancestral sampling from the tiny model with temperature and top-p, returning
the logprob of every sampled token under the temperature-scaled distribution (what prime-rl's trainer recomputes:
it divides its logits by the sample's temperature; top-p only narrows what can be drawn, as in vLLM)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Sample:
    token_ids: list[int]
    logprobs: list[float]
    """log softmax(logits / temperature) of each sampled token (top-p does not renormalise it)."""
    finish_reason: str
    """``stop`` (a stop token was drawn; it is the last token) or ``length`` (max_tokens reached)."""


def _top_p_filter(logprobs: torch.Tensor, top_p: float) -> torch.Tensor:
    """``logprobs`` with every token outside the smallest set of mass >= top_p set to -inf (the top token stays)."""
    if top_p >= 1.0:
        return logprobs
    sorted_lp, order = torch.sort(logprobs, descending=True)
    before = torch.cumsum(sorted_lp.exp(), dim=-1) - sorted_lp.exp()  # mass strictly before each token
    drop = before >= top_p
    drop[0] = False
    filtered = torch.full_like(logprobs, float("-inf"))
    keep = order[~drop]
    filtered[keep] = logprobs[keep]
    return filtered


@torch.no_grad()
def sample(
    model,
    prompt_ids: list[int],
    *,
    max_tokens: int,
    temperature: float,
    top_p: float,
    stop_ids: set[int],
    generator: torch.Generator,
) -> Sample:
    """Draw up to ``max_tokens`` tokens after ``prompt_ids`` with a KV cache; temperature 0 is greedy."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    out_ids: list[int] = []
    out_lps: list[float] = []
    past = None
    x = torch.tensor([prompt_ids])
    for _ in range(max_tokens):
        result = model(input_ids=x, past_key_values=past, use_cache=True)
        past = result.past_key_values
        logits = result.logits[0, -1].float()
        if temperature <= 0:
            lp = torch.log_softmax(logits, dim=-1)
            token = int(torch.argmax(lp))
        else:
            lp = torch.log_softmax(logits / temperature, dim=-1)
            probs = _top_p_filter(lp, top_p).exp()
            token = int(torch.multinomial(probs / probs.sum(), 1, generator=generator))
        out_ids.append(token)
        out_lps.append(float(lp[token]))
        if token in stop_ids:
            return Sample(out_ids, out_lps, "stop")
        x = torch.tensor([[token]])
    return Sample(out_ids, out_lps, "length")
