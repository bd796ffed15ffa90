"""Channel 2's target turns: the assistant turns that produced the episode's error sites.

Composer's channel 2 puts its distillation loss on the target message, not on the whole trajectory. prime-rl's
``opsd`` puts the reverse-KL loss on every trainable token of a trace (``stamp_loss_routing`` routes the sample's
``mask`` into ``ref_kl_weights``; ``iter_trainable_branches`` builds that mask from each node's ``mask``), so the
environment, which owns the trace until it is returned, clears the trainable mask of every other sampled turn.
A trace left with no trainable token is skipped by prime-rl (``iter_trainable_traces``): no opsd scoring call, no
sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from crf_prime.hints.detect import Msg, episode_messages
from crf_prime.hints.models import ErrorSite

EDIT_TOOLS = ("edit", "write", "write_file", "create", "str_replace", "str_replace_editor", "apply_patch")
"""Tool names whose successful call changes the workspace; failing tests are attributed to those turns."""


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def _producer(index: int, nodes: Sequence[Any], messages: Sequence[Msg]) -> int | None:
    """The assistant turn behind message ``index``: itself, else its nearest assistant ancestor (a tool result's
    ancestors lead back to the turn that made the call; tool-call ids alone are not unique across turns)."""
    current: int | None = index
    while current is not None and current >= 0:
        if messages[current].role == "assistant":
            return current
        current = _get(nodes[current], "parent") if current < len(nodes) else current - 1
    return None


def error_turns(trace: Any, sites: Iterable[ErrorSite], *, edit_tools: Sequence[str] = EDIT_TOOLS) -> list[int]:
    """Node indices of the sampled assistant turns that produced ``sites``, ascending.

    A tool-call site is the turn that made the call. Failing tests (no message of their own) are the turns whose
    ``edit_tools`` call succeeded, as the final code came from them; without such a turn, the other error turns, and
    without those the last sampled turn (the one that gave up).
    """
    nodes = _get(trace, "nodes") or []
    messages = episode_messages(trace)
    sampled = [i for i, node in enumerate(nodes) if any(_get(node, "mask") or ())]
    sites = list(sites)
    turns: set[int] = set()
    failed_calls: set[tuple[int, str]] = set()  # (turn, tool_call_id) of calls whose result is an error site
    for site in sites:
        if site.index < 0 or (turn := _producer(site.index, nodes, messages)) is None:
            continue
        turns.add(turn)
        if messages[site.index].role == "tool":
            failed_calls.add((turn, messages[site.index].tool_call_id or ""))
    if any(site.kind == "failing_test" for site in sites):
        edits = {
            i
            for i, m in enumerate(messages)
            if m.role == "assistant"
            and any(name in edit_tools and (i, call_id) not in failed_calls for call_id, name, _ in m.tool_calls)
        }
        turns |= edits or turns or set(sampled[-1:])
    return sorted(turns & set(sampled))


def keep_turns(trace: Any, turns: Iterable[int]) -> int:
    """Clear the trainable mask of every sampled node not in ``turns``; returns the tokens taken out of training.

    The node's sampling logprobs (one per trainable token) go with it, as do its kept-token sampling masks.
    """
    keep = set(turns)
    cleared = 0
    for i, node in enumerate(_get(trace, "nodes") or []):
        mask = _get(node, "mask") or []
        if i in keep or not any(mask):
            continue
        cleared += sum(map(bool, mask))
        update: dict[str, Any] = {"mask": [False] * len(mask), "logprobs": []}
        if _get(node, "kept_tokens") is not None:
            update["kept_tokens"] = None
        for key, value in update.items():
            if isinstance(node, dict):
                node[key] = value
            else:
                setattr(node, key, value)
    return cleared
