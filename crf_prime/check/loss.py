"""``[trainer.loss]``: the custom loss imports and its kwargs pass the loss's own typed model."""

from __future__ import annotations

import importlib
from typing import Any

from crf_prime.check.models import Problem

KEY = "trainer.loss"


def check_loss(config: dict[str, Any]) -> tuple[list[Problem], list[str]]:
    """Problems and notes for ``trainer.loss`` of a composed run config."""
    loss = config.get("trainer", {}).get("loss", {})
    if loss.get("type", "default") != "custom":
        return [], [f"{KEY}: prime-rl's built-in loss ({loss.get('type', 'default')}); nothing of crf-prime to check"]
    import_path = loss.get("import_path")
    if not isinstance(import_path, str) or "." not in import_path:
        return [Problem(key=f"{KEY}.import_path", message=f"must be 'module.function', got {import_path!r}")], []
    module_name, _, attr = import_path.rpartition(".")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        return [Problem(key=f"{KEY}.import_path", message=f"{import_path!r} cannot be imported: {e}")], []
    model = getattr(fn, "kwargs_model", None)
    if model is None:
        return [], [f"{KEY}.kwargs: {import_path} declares no typed kwargs model; its kwargs are not checked"]
    from loss_fns.kwargs import LossKwargsError, resolve  # start-up: loss_fns imports torch

    given = loss.get("kwargs") or {}
    try:
        resolved = resolve(model, given)
    except LossKwargsError as e:
        return [_problem(line) for line in str(e).splitlines()], []
    return [], coercions(f"{KEY}.kwargs", given, resolved)


def coercions(key: str, given: dict[str, Any], resolved: dict[str, Any]) -> list[str]:
    """Notes for string values (from ``--trainer.loss.kwargs.*`` flags) that validation turned into another type."""
    notes = []
    for name, value in given.items():
        typed = resolved.get(name)
        if isinstance(value, dict) and isinstance(typed, dict):
            notes += coercions(f"{key}.{name}", value, typed)
        elif isinstance(value, str) and not isinstance(typed, str):
            notes.append(f"{key}.{name}: the string {value!r} (a command-line value) is coerced to {typed!r}")
    return notes


def _problem(line: str) -> Problem:
    key, _, message = line.partition(": ")
    return Problem(key=key, message=message)
