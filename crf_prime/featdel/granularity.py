"""What a task deletes: the candidates of each granularity and the deletion that turns one into a snapshot.

- ``function``: one public function's body; ``feature``: a public class's covered methods, or a public function with
  the private helpers only it calls (both found in generate.py);
- ``block``: the body of one ``if``/``for``/``while``/``with``/``try`` inside a function — the rest of the
  function stays as context;
- ``tail``: a function's statements after its first ones (the first third, at least one, stay);
  both in public and private functions (not dunders): a small library keeps most of its code in private helpers
  (xmltodict's ``_DictSAXHandler``), and its tasks run out with them left out;
- ``class``: every method of a public class that a test executes, private and dunder ones included (a method no
  test executes stays in the snapshot: nothing could check its re-implementation).

Each candidate carries the tests that execute the deleted lines; every granularity is validated the same way (gold
passes, the snapshot fails a target test, the suite still collects, gold obeys the code policy, call replay).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import get_args

from crf_prime.featdel.deletion import (
    FunctionInfo,
    delete_block,
    delete_bodies,
    delete_tail,
    function_nodes,
    inner_blocks,
    line_span,
    statement_count,
)
from crf_prime.featdel.models import Granularity

GRANULARITIES: tuple[Granularity, ...] = get_args(Granularity)
BLOCKS_PER_FUNCTION = 2
"""The largest blocks of a function become candidates (more would be near-copies of one task)."""
CLASS_MAX_METHODS = 8


@dataclass(frozen=True)
class Candidate:
    """A function, group, block or tail that may become a task."""

    key: str
    granularity: Granularity
    functions: tuple[FunctionInfo, ...]
    tests: tuple[str, ...]
    block_line: int = 0
    """``block``: line of the compound statement whose body is deleted."""
    keep: int = 0
    """``tail``: statements kept at the start of the body."""


TestsOf = Callable[[str, frozenset[int]], set[str]]
"""(path, lines) -> node ids of the tests that execute any of those lines."""


def is_dunder(qualname: str) -> bool:
    """Whether the function's own name is a dunder (``__init__``): never a candidate on its own."""
    name = qualname.rsplit(".", 1)[-1]
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def granularity_of(key: str) -> Granularity:
    """The granularity named by a candidate key or task id (``block:...`` / ``..__block__...``; plain = function)."""
    for g in GRANULARITIES[1:]:
        if key.startswith(f"{g}:") or f"__{g}__" in key:
            return g
    return "function"


def statement_candidates(
    sources: dict[str, str],
    functions: list[FunctionInfo],
    tests_of: TestsOf,
    limit: int,
    min_statements: int,
    key: Callable[[str, list[str]], str],
) -> list[Candidate]:
    """``block`` and ``tail`` candidates of the functions in ``sources`` (path -> text), public and private (dunders
    aside, as for function candidates)."""
    out: list[Candidate] = []
    for path in sorted(sources):
        nodes = function_nodes(sources[path])
        for f in functions:
            fn = nodes.get(f.qualname) if f.path == path and not is_dunder(f.qualname) else None
            if fn is None:
                continue
            blocks = [b for b in inner_blocks(fn) if statement_count(b.body) >= max(2, min_statements)]
            blocks.sort(key=lambda b: (-statement_count(b.body), b.lineno))
            for b in blocks[:BLOCKS_PER_FUNCTION]:
                tests = tests_of(path, line_span(b.body))
                if tests and len(tests) <= limit:
                    name = f"block:{key(path, [f.qualname])}.L{b.lineno}"
                    out.append(Candidate(name, "block", (f,), tuple(sorted(tests)), block_line=b.lineno))
            body = fn.body[1:] if _has_docstring(fn) else fn.body
            if len(body) >= 3:
                keep = max(1, len(body) // 3)
                tail = body[keep:]
                tests = tests_of(path, line_span(tail))
                if statement_count(tail) >= max(2, min_statements) and tests and len(tests) <= limit:
                    out.append(
                        Candidate(f"tail:{key(path, [f.qualname])}", "tail", (f,), tuple(sorted(tests)), keep=keep)
                    )
    return out


def class_candidates(
    functions: list[FunctionInfo],
    tests_of: TestsOf,
    limit: int,
    min_statements: int,
    features: set[tuple[str, ...]],
    key: Callable[[str, list[str]], str],
) -> list[Candidate]:
    """``class`` candidates: the covered methods of a public class (skipped when a ``feature`` already deletes that
    set); uncovered methods are not deleted."""
    by_class: dict[tuple[str, str], list[FunctionInfo]] = defaultdict(list)
    for f in functions:
        cls = f.qualname.rsplit(".", 1)[0]
        if f.class_name and "<locals>" not in f.qualname and not any(p.startswith("_") for p in cls.split(".")):
            by_class[(f.path, cls)].append(f)
    out: list[Candidate] = []
    for (path, cls), methods in sorted(by_class.items()):
        own = {m.qualname: tests_of(path, m.body_lines) for m in methods}
        methods = sorted((m for m in methods if own[m.qualname]), key=lambda m: m.lineno)[:CLASS_MAX_METHODS]
        names = tuple(m.qualname for m in methods)
        if len(methods) < 2 or names in features:
            continue
        if sum(m.statements for m in methods) < min_statements:
            continue
        tests = set().union(*(own[m.qualname] for m in methods))
        if len(tests) <= limit:
            out.append(Candidate(f"class:{key(path, [cls])}", "class", tuple(methods), tuple(sorted(tests))))
    return out


def _has_docstring(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    first = fn.body[0]
    return isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)


def delete(originals: dict[str, str], cand: Candidate) -> dict[str, str]:
    """The snapshot's versions of the files ``cand`` touches."""
    by_path: dict[str, list[str]] = defaultdict(list)
    for f in cand.functions:
        by_path[f.path].append(f.qualname)
    if cand.granularity == "block":
        ((path, (qualname,)),) = by_path.items()
        return {path: delete_block(originals[path], qualname, cand.block_line)}
    if cand.granularity == "tail":
        ((path, (qualname,)),) = by_path.items()
        return {path: delete_tail(originals[path], qualname, cand.keep)}
    return {p: delete_bodies(originals[p], q) for p, q in sorted(by_path.items())}


__all__ = [
    "GRANULARITIES",
    "Candidate",
    "class_candidates",
    "delete",
    "granularity_of",
    "statement_candidates",
]
