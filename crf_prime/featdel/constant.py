"""A task that asks for nothing: every replayed call of each target gave gold's one and the same result.

textdistance's ``MongeElkan.maximum`` returns 2 for every call with two sequences, and every call its tests make (so
every recorded and generated call) has two: ``return 2`` reproduces gold on the whole replay, without the work. The
mutation rate cannot tell (such a body is equivalent to gold on every input generated from the tests'), so the
task is tested for it directly: gold's file with each target's body replaced by that one result (``return VALUE``,
or ``raise Exception(...)`` where every call raised: the replay judges a raise only as raised) is graded like a
mutant (crf_prime/featdel/strength.py); where the grader accepts it the task is not written (``constant-outcome``).
Only results a literal can write are tried (None, bools, numbers, strings, bytes): an object or a callable result
takes work to build.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

from crf_prime.featdel.models import FeatdelTask
from crf_prime.featdel.mutants import Mutant

RAISE = "raise Exception('constant')"


def literal(outcome: object) -> str | None:
    """The statement that gives ``outcome`` (gold's canonical outcome of one call, crf_prime/featdel/replay_box.py),
    or None where no literal can: ``return VALUE`` for a primitive result, :data:`RAISE` for a raise."""
    if not isinstance(outcome, Mapping):
        return None
    if "raised" in outcome:
        return RAISE
    value = outcome.get("returned")
    if not isinstance(value, list) or len(value) != 2:
        return None
    tag, payload = value
    if tag == "NoneType":
        return "return None"
    if tag in ("bool", "int", "str") and type(payload).__name__ == tag:
        return f"return {payload!r}"
    if tag == "float" and isinstance(payload, str):
        return f"return float({payload!r})"
    if tag == "bytes" and isinstance(payload, str):
        return f"return bytes.fromhex({payload!r})"
    return None


def constant_statements(task: FeatdelTask, calls: list[dict], expected: Mapping[str, object]) -> list[str] | None:
    """Per target, the one statement that gives every replayed call of it gold's result; None where some target
    has no such statement (two results, a result no literal writes, or no replayed call)."""
    found: list[set[str | None]] = [set() for _ in task.targets]
    for call in calls:
        i = call.get("target")
        if isinstance(i, int) and 0 <= i < len(found):
            found[i].add(literal(expected.get(call["id"])))
    if any(len(s) != 1 or None in s for s in found):
        return None
    return [next(iter(s)) for s in found]  # type: ignore[misc]  # None was ruled out above


def _function(tree: ast.Module, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    scope: list[ast.stmt] = tree.body
    node: ast.AST | None = None
    for name in qualname.split("."):
        node = next(
            (
                n
                for n in scope
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n.name == name
            ),
            None,
        )
        if node is None:
            return None
        scope = node.body
    return node if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else None


def constant_body(
    task: FeatdelTask, original: Mapping[str, str], calls: list[dict], expected: Mapping[str, object]
) -> tuple[Mutant, str] | None:
    """Gold's file with every target's body replaced by its one statement (:func:`constant_statements`), as a
    :class:`Mutant` graded like the others, and what it says; None where some target has none, the targets are in
    more than one file, a body shares its ``def`` line, or a target is a generator."""
    statements = constant_statements(task, calls, expected)
    paths = {t.path for t in task.targets}
    if statements is None or len(paths) != 1:
        return None
    [path] = paths
    lines = original[path].splitlines()
    tree = ast.parse(original[path])
    edits: list[tuple[int, int, str]] = []
    for target, statement in zip(task.targets, statements, strict=True):
        fn = _function(tree, target.qualname)
        if (
            fn is None
            or fn.body[0].lineno == fn.lineno
            or any(isinstance(n, ast.Yield | ast.YieldFrom) for n in ast.walk(fn))
        ):
            return None
        edits.append((fn.body[0].lineno - 1, fn.end_lineno or fn.lineno, " " * fn.body[0].col_offset + statement))
    for start, end, text in sorted(edits, reverse=True):
        lines[start:end] = [text]
    said = "; ".join(f"{t.qualname}: {s}" for t, s in zip(task.targets, statements, strict=True))
    mutant = Mutant(path=path, line=task.targets[0].lineno, operator="return", text="\n".join(lines) + "\n")
    return mutant, said


__all__ = ["RAISE", "constant_body", "constant_statements", "literal"]
