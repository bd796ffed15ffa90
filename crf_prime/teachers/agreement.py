"""Do two actions propose the same next step? Used by tiered querying to decide whether to escalate a state.

The pair builder (``crf_prime.pairs``) owns the full, tiered action-equivalence function; when it is importable we
use it. Otherwise the fallback is the first tier of that function: equal normalised tool calls (tool name lower-
cased, arguments parsed as JSON and compared as data, strings whitespace-collapsed) or, for text-only actions,
equal whitespace-collapsed text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from crf_prime.traces.models import Action


def _norm_value(v: Any) -> Any:
    if isinstance(v, str):
        return " ".join(v.split())
    if isinstance(v, dict):
        return {k: _norm_value(x) for k, x in sorted(v.items())}
    if isinstance(v, list):
        return [_norm_value(x) for x in v]
    return v


def _norm_args(arguments: str) -> Any:
    try:
        return _norm_value(json.loads(arguments or "{}"))
    except json.JSONDecodeError:
        return " ".join(arguments.split())


def normalised(action: Action) -> tuple:
    if action.tool_calls:
        return (
            "tools",
            tuple((c.name.strip().lower(), json.dumps(_norm_args(c.arguments))) for c in action.tool_calls),
        )
    return ("text", " ".join(action.text.split()).lower())


def fallback_same_action(a: Action, b: Action) -> bool:
    return normalised(a) == normalised(b)


def _resolve() -> tuple[Callable[[Action, Action], bool], str]:
    try:
        from crf_prime.pairs import same_action  # type: ignore[attr-defined]
    except ImportError:
        return fallback_same_action, "crf_prime.teachers.agreement.fallback_same_action"
    return same_action, "crf_prime.pairs.same_action"


same_action, SAME_ACTION_SOURCE = _resolve()


def all_agree(actions: Sequence[Action], student: Action | None) -> bool:
    """True when every action (and the student's, if given) is the same step as the first one."""
    pool = list(actions) + ([student] if student is not None else [])
    return all(same_action(pool[0], other) for other in pool[1:])
