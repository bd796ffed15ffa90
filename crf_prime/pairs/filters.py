"""The normalisation pass over built pairs: empty actions, identical sides, length limits, chat-template validity,
duplicates; every drop is counted by reason.

The template check is structural by default (roles, tool results answering an earlier call id, tool-call arguments
that are JSON objects), which is what every tool-calling chat template needs; pass ``render`` (for example a
tokenizer's ``apply_chat_template``) to also require that the real template renders prompt + each side.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from crf_prime.pairs.build import PreferencePair
from crf_prime.pairs.equivalence import Tier, match_tier
from crf_prime.pairs.normalize import canonical_action
from crf_prime.traces.chat import action_from_openai

_ROLES = {"system", "user", "assistant", "tool"}


class FilterConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_prompt_chars: int | None = Field(400_000, ge=1)
    """Drop pairs whose prompt (all message text + tool-call arguments) is longer; None = no limit."""
    max_action_chars: int | None = Field(40_000, ge=1)
    """Drop pairs whose chosen or rejected message is longer; None = no limit."""


def _chars(messages: Iterable[dict[str, Any]]) -> int:
    n = 0
    for m in messages:
        n += len(m.get("content") or "") if isinstance(m.get("content"), str) else len(json.dumps(m.get("content")))
        for c in m.get("tool_calls") or ():
            n += len(c.get("function", {}).get("arguments") or "")
    return n


def template_problem(messages: list[dict[str, Any]]) -> str:
    """Why ``messages`` cannot be rendered by a tool-calling chat template ("" when fine)."""
    if not messages or messages[-1].get("role") != "assistant":
        return "conversation must end with the assistant turn"
    open_calls: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in _ROLES:
            return f"message {i}: unknown role {role!r}"
        if role == "system" and i != 0:
            return f"message {i}: system message not first"
        if role == "assistant":
            for c in m.get("tool_calls") or ():
                fn = c.get("function") or {}
                if not fn.get("name"):
                    return f"message {i}: tool call without a name"
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except json.JSONDecodeError:
                    return f"message {i}: tool-call arguments are not JSON"
                if not isinstance(args, dict):
                    return f"message {i}: tool-call arguments are not a JSON object"
                if c.get("id"):
                    open_calls.add(c["id"])
        if role == "tool" and m.get("tool_call_id") and m["tool_call_id"] not in open_calls:
            return f"message {i}: tool result for unknown call {m['tool_call_id']!r}"
    return ""


def _key(p: PreferencePair) -> str:
    chosen = canonical_action(action_from_openai(p.chosen[0]))
    rejected = canonical_action(action_from_openai(p.rejected[0]))
    blob = json.dumps([p.prompt, repr(chosen), repr(rejected)], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def normalise_pairs(
    pairs: Iterable[PreferencePair],
    config: FilterConfig = FilterConfig(),
    counts: Counter[str] | None = None,
    *,
    render: Callable[[list[dict[str, Any]], list[dict[str, Any]]], Any] | None = None,
) -> Iterator[PreferencePair]:
    """Yield the pairs that survive; ``counts`` gets ``kept`` and one key per drop reason."""
    counts = counts if counts is not None else Counter()
    seen: set[str] = set()
    for p in pairs:
        chosen, rejected = action_from_openai(p.chosen[0]), action_from_openai(p.rejected[0])
        if chosen.is_empty() or rejected.is_empty():
            counts["empty_action"] += 1
            continue
        if match_tier(chosen, rejected) == Tier.EXACT:
            counts["identical"] += 1
            continue
        if config.max_prompt_chars is not None and _chars(p.prompt) > config.max_prompt_chars:
            counts["prompt_too_long"] += 1
            continue
        if config.max_action_chars is not None and max(_chars(p.chosen), _chars(p.rejected)) > config.max_action_chars:
            counts["action_too_long"] += 1
            continue
        problem = template_problem(p.prompt + p.chosen) or template_problem(p.prompt + p.rejected)
        if not problem and render is not None:
            try:
                render(p.prompt + p.chosen, p.tools)
                render(p.prompt + p.rejected, p.tools)
            except Exception as e:  # any template failure drops the pair; it is counted, not fatal
                problem = f"render: {e}"
        if problem:
            counts["invalid_template"] += 1
            continue
        key = _key(p)
        if key in seen:
            counts["duplicate"] += 1
            continue
        seen.add(key)
        counts["kept"] += 1
        yield p
