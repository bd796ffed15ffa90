"""Tiered action equivalence: do two actions propose the same next step?

Tiers, strongest first (cheapest deterministic matchers only: no model call decides whether two steps agree):

1. ``exact``: equal canonical calls (same canonical tools, same normalised arguments, same order) — or, for
   text-only actions, equal normalised text.
2. ``key_args``: same intent and same key arguments per call: ``bash`` by its command with a leading ``cd X &&``
   and ``python -m`` dropped (and ``cat/head/tail/sed -n FILE`` read as ``read FILE``, ``grep/rg/find`` as a search),
   ``read`` by path (line ranges ignored), ``edit`` by path + old text, ``write`` by path, ``search`` by
   pattern, ``finish`` always equal. Calls are compared as a multiset (parallel calls in any order).
3. ``text``: text-only actions whose normalised texts have a ``difflib`` ratio >= the threshold (default 0.8).

A tool call never matches a text-only answer. :func:`match_tier` returns the strongest tier that holds.

``key_args`` and ``text`` ignore what an edit, a write or a finish says: fine for counting agreement among teachers,
not for paying a policy (junk written into the right file would agree). The ``content`` tier
(:mod:`crf_prime.pairs.content`) compares the change itself and is, with ``exact``, the only tier a reward may use
(:data:`REWARD_TIERS`). It sits beside the ladder rather than on it: two edits of one region with other
``old_str`` extents can agree on content and not on key arguments.
"""

from __future__ import annotations

import difflib
import json
from enum import IntEnum
from typing import Literal

from crf_prime.pairs.content import calls_similarity, word_overlap
from crf_prime.pairs.normalize import (
    CanonicalAction,
    CanonicalCall,
    canonical_action,
    collapse,
    command_argv,
    normalise_path,
)
from crf_prime.records.models import Action


class Tier(IntEnum):
    NONE = 0
    TEXT = 1
    KEY_ARGS = 2
    EXACT = 3


TierName = Literal["exact", "content", "key_args", "text"]
TIER_BY_NAME: dict[str, Tier] = {"exact": Tier.EXACT, "key_args": Tier.KEY_ARGS, "text": Tier.TEXT}
"""The ladder tiers (``content`` is compared by :func:`similarity`, not by :func:`match_tier`)."""
REWARD_TIERS: frozenset[str] = frozenset({"exact", "content"})
"""Tiers that look at what an edit, write, command or finish says: the only ones a reward may use."""

_READERS = {"cat", "head", "tail", "less", "more", "nl"}
_SEARCHERS = {"grep", "rg", "ag", "find", "ls"}
_TEXT_CAP = 4000  # characters compared by the text tier (SequenceMatcher is quadratic)


def _bash_key(command: str) -> tuple[str, str]:
    cmd, argv = command_argv(command)
    if argv is None:
        return ("bash", cmd)
    if not argv:
        return ("bash", "")
    prog = argv[0].rsplit("/", 1)[-1]
    if prog in _READERS and "|" not in argv and ">" not in argv:
        files = [a for a in argv[1:] if not a.startswith("-") and not a.lstrip("+").isdigit()]
        if len(files) == 1:
            return ("read", normalise_path(files[0]))
    if prog == "sed" and len(argv) >= 4 and argv[1] == "-n" and "|" not in argv:
        return ("read", normalise_path(argv[-1]))
    if prog in _SEARCHERS and "|" not in argv:
        return ("search", " ".join([prog, *(a for a in argv[1:] if not a.startswith("-"))]))
    return ("bash", " ".join([prog, *argv[1:]]))


def key_of(call: CanonicalCall) -> tuple[str, str]:
    """(intent, key arguments) of one canonical call."""
    args = call.arguments()
    name = call.name
    if name == "bash":
        return _bash_key(str(args.get("command", args.get("cmd", ""))))
    path = next((str(args[k]) for k in ("file_path", "path", "filepath", "filename", "file") if k in args), "")
    if name == "read":
        return ("read", path)
    if name == "write":
        return ("write", path)
    if name == "edit":
        old = args.get("old_string", args.get("old_str", ""))
        if "edits" in args and isinstance(args["edits"], list) and args["edits"]:
            old = args["edits"][0].get("old_string", "") if isinstance(args["edits"][0], dict) else ""
        return ("edit", json.dumps([path, collapse(str(old))]))
    if name == "search":
        return ("search", str(args.get("pattern", args.get("query", args.get("search_term", path)))))
    if name == "finish":
        return ("finish", "")
    if name == "python":
        return ("python", collapse(str(args.get("code", ""))))
    return (name, call.args)


def _text_ratio(a: str, b: str) -> float:
    a, b = a[:_TEXT_CAP], b[:_TEXT_CAP]
    if not a and not b:
        return 1.0
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    if matcher.real_quick_ratio() < 0.5:
        return matcher.real_quick_ratio()
    return matcher.ratio()


def match_canonical(a: CanonicalAction, b: CanonicalAction, *, text_similarity: float = 0.8) -> Tier:
    if a.calls or b.calls:
        if not (a.calls and b.calls):
            return Tier.NONE
        if a.calls == b.calls:
            return Tier.EXACT
        if sorted(map(key_of, a.calls)) == sorted(map(key_of, b.calls)):
            return Tier.KEY_ARGS
        return Tier.NONE
    if a.text == b.text:
        return Tier.EXACT
    return Tier.TEXT if _text_ratio(a.text, b.text) >= text_similarity else Tier.NONE


def match_tier(a: Action, b: Action, *, text_similarity: float = 0.8) -> Tier:
    """The strongest tier at which ``a`` and ``b`` are the same step (``Tier.NONE`` when they differ)."""
    return match_canonical(canonical_action(a), canonical_action(b), text_similarity=text_similarity)


def similarity(a: CanonicalAction, b: CanonicalAction) -> float:
    """Content-aware similarity in [0, 1]: calls by :func:`crf_prime.pairs.content.calls_similarity`, text-only
    actions by their :func:`~crf_prime.pairs.content.word_overlap`; a call against a text-only answer is 0."""
    if a.calls or b.calls:
        return calls_similarity(a.calls, b.calls) if a.calls and b.calls else 0.0
    return word_overlap(a.text, b.text)


def same_step(
    a: CanonicalAction,
    b: CanonicalAction,
    *,
    tier: TierName,
    text_similarity: float = 0.8,
    content_similarity: float = 0.8,
) -> bool:
    """True when ``a`` and ``b`` are the same step at ``tier`` (``content``: :func:`similarity` at
    ``content_similarity``; the others: :func:`match_canonical` at that tier or stronger)."""
    if tier == "content":
        return similarity(a, b) >= content_similarity
    return match_canonical(a, b, text_similarity=text_similarity) >= TIER_BY_NAME[tier]


def same_action(
    a: Action,
    b: Action,
    *,
    min_tier: Tier | TierName = Tier.KEY_ARGS,
    text_similarity: float = 0.8,
    content_similarity: float = 0.8,
) -> bool:
    """True when ``a`` and ``b`` match at ``min_tier`` or stronger (default: same tool and key arguments)."""
    if isinstance(min_tier, str) and min_tier == "content":
        return same_step(
            canonical_action(a),
            canonical_action(b),
            tier="content",
            text_similarity=text_similarity,
            content_similarity=content_similarity,
        )
    tier = TIER_BY_NAME[min_tier] if isinstance(min_tier, str) else min_tier
    return match_tier(a, b, text_similarity=text_similarity) >= tier
