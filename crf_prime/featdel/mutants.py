"""Standard mutation operators on gold's deleted code: the mutants that measure a task's grader.

Mutation testing scores a test suite by the share of small, behaviour-changing edits of the code it rejects
(DeMillo, Lipton & Sayward 1978; the operator set is mutmut's / cosmic-ray's core). Here the "suite" is a task's
grader and the code is gold: only the lines the gold patch puts back are mutated, so every mutant is an answer an
agent could have written. Operators:

- ``compare``: ``<``/``<=``, ``>``/``>=``, ``==``/``!=``, ``is``/``is not``, ``in``/``not in`` swapped;
- ``boolean``: ``and``/``or`` swapped, a ``not`` removed;
- ``arithmetic``: ``+``/``-``, ``*``/``/``, ``//``/``/``, ``%``/``*``, ``**``/``*``, ``<<``/``>>``, ``&``/``|``,
  ``^``/``&`` swapped (also in augmented assignments);
- ``constant``: a number ``n`` -> ``n + 1``, ``True``/``False`` swapped, a string -> ``"XX" + s + "XX"``;
- ``statement``: a simple statement replaced by ``pass``;
- ``branch``: an ``if`` test replaced by ``False`` (its body removed) or, when it has an ``else``, by ``True``;
- ``return``: a returned value replaced by ``None``.

Docstrings, f-strings, annotations and patterns are not mutated, nor what a failure says (the exception a ``raise``
builds, an ``assert``'s message): the replay judges a raise only as raised. Each mutant is the whole file with one
expression or statement replaced in place (byte positions from ``ast``), so the
rest of the file is gold's exact text. Mutants that do not parse, or parse to gold's own tree, are left out; the
sample is deterministic for a seed (round-robin over operators, each operator's sites shuffled).
"""

from __future__ import annotations

import ast
import difflib
import functools
import random
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from crf_prime.featdel.syntax import SHARED_TREES, shared

Operator = Literal["compare", "boolean", "arithmetic", "constant", "statement", "branch", "return"]
OPERATORS: tuple[Operator, ...] = ("compare", "boolean", "arithmetic", "constant", "statement", "branch", "return")

_COMPARE: dict[type, type] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_ARITHMETIC: dict[type, type] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.Mult,
    ast.Pow: ast.Mult,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.BitXor: ast.BitAnd,
}
_SIMPLE_STATEMENTS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Delete, ast.Raise, ast.Assert)


@dataclass(frozen=True)
class Mutant:
    """One mutated copy of a gold file."""

    path: str
    """Source file, relative to the repository root."""
    line: int
    """1-based line of the mutated expression or statement."""
    operator: Operator
    text: str
    """The whole mutated file."""
    reach: frozenset[int] | None = None
    """Lines a call must run for the mutated code to run in it: the edited node's and its statement's first line.
    None: code that runs when the module is imported (outside every function body), so in every call."""

    @property
    def label(self) -> str:
        return f"{self.path}:{self.line}:{self.operator}"


@dataclass(frozen=True)
class _Edit:
    node: ast.AST
    operator: Operator
    replacement: str


def restored_lines(broken: str, original: str) -> frozenset[int]:
    """1-based lines of ``original`` that the gold patch puts back (absent from the snapshot ``broken``)."""
    a, b = broken.splitlines(), original.splitlines()
    out: set[int] = set()
    for tag, _i1, _i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("insert", "replace"):
            out.update(range(j1 + 1, j2 + 1))
    return frozenset(out)


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring expressions of ``tree``'s modules, classes and functions."""
    out: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body:
            first = body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                out.add(id(first))
                out.add(id(first.value))
    return out


def _unmutable(tree: ast.AST) -> set[int]:
    """ids of nodes no operator touches: docstrings, everything inside f-strings, annotations and patterns, and what
    a failure says: the exception a ``raise`` builds (and its cause) and an ``assert``'s message. The replay judges a
    raise only as raised, so a mutant that changes only those is not a behaviour the grader scores; it would pass the
    replay and cost a test run and the held-out calls to be counted equivalent."""
    out = _docstrings(tree)
    for node in ast.walk(tree):
        inner: list[ast.AST] = []
        if isinstance(node, ast.JoinedStr | ast.match_case):
            inner = [node]
        elif isinstance(node, ast.Raise):
            inner = [n for n in (node.exc, node.cause) if n is not None]
        elif isinstance(node, ast.Assert) and node.msg is not None:
            inner = [node.msg]
        elif isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
            inner = [node.annotation]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
            inner = [node.returns]
        for sub in inner:
            out.update(id(n) for n in ast.walk(sub))
    return out


def _copy(node: ast.AST) -> ast.AST:
    return (
        ast.parse(ast.unparse(node), mode="eval").body
        if isinstance(node, ast.expr)
        else ast.parse(ast.unparse(node)).body[0]
    )


def _edits(node: ast.AST) -> Iterator[_Edit]:
    """Every operator's edits of one node (its replacement text in place of the node's span)."""
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            if type(op) in _COMPARE:
                new = _copy(node)
                new.ops[i] = _COMPARE[type(op)]()  # type: ignore[attr-defined]  # the node is a copy of the ast.Compare/BinOp/UnaryOp/BoolOp matched above (ast.AST statically)
                yield _Edit(node, "compare", f"({ast.unparse(new)})")
    elif isinstance(node, ast.BoolOp):
        new = _copy(node)
        new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()  # type: ignore[attr-defined]  # the node is a copy of the ast.Compare/BinOp/UnaryOp/BoolOp matched above (ast.AST statically)
        yield _Edit(node, "boolean", f"({ast.unparse(new)})")
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield _Edit(node, "boolean", f"({ast.unparse(node.operand)})")
    elif isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in _ARITHMETIC:
        new = _copy(node)
        new.op = _ARITHMETIC[type(node.op)]()  # type: ignore[attr-defined]  # the node is a copy of the ast.Compare/BinOp/UnaryOp/BoolOp matched above (ast.AST statically)
        text = ast.unparse(new)
        yield _Edit(node, "arithmetic", f"({text})" if isinstance(node, ast.BinOp) else text)
    elif isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, bool):
            yield _Edit(node, "constant", repr(not v))
        elif isinstance(v, int | float) and not isinstance(v, bool):
            yield _Edit(node, "constant", f"({v + 1!r})")
        elif isinstance(v, str):
            yield _Edit(node, "constant", repr("XX" + v + "XX"))
    if isinstance(node, _SIMPLE_STATEMENTS):
        yield _Edit(node, "statement", "pass")
    elif isinstance(node, ast.If):
        yield _Edit(node.test, "branch", "False")
        if node.orelse:
            yield _Edit(node.test, "branch", "True")
    elif isinstance(node, ast.Return) and node.value is not None and not _is_none(node.value):
        yield _Edit(node, "return", "return None")


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _apply(lines: list[bytes], node: ast.AST, replacement: str) -> str:
    """The file with ``node``'s span (UTF-8 byte columns, as ``ast`` gives them) replaced by ``replacement``."""
    start, end = node.lineno - 1, node.end_lineno - 1  # type: ignore[attr-defined]  # positioned nodes only (expr/stmt); typeshed declares positions on those subclasses, not on ast.AST
    head = lines[start][: node.col_offset]  # type: ignore[attr-defined]  # positioned nodes only (expr/stmt); typeshed declares positions on those subclasses, not on ast.AST
    tail = lines[end][node.end_col_offset :]  # type: ignore[attr-defined]  # positioned nodes only (expr/stmt); typeshed declares positions on those subclasses, not on ast.AST
    new = [*lines[:start], head + replacement.encode() + tail, *lines[end + 1 :]]
    return b"".join(new).decode()


def _statement_spans(tree: ast.Module) -> list[tuple[int, int]]:
    """1-based (first, last) lines of each top-level statement, decorators included."""
    spans = []
    for stmt in tree.body:
        first = min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", ()))])
        spans.append((first, stmt.end_lineno or stmt.lineno))
    return spans


def _mutated_statement(text: str, span: tuple[int, int], edit: _Edit) -> str:
    """The lines of the mutated ``text`` that hold the top-level statement spanning ``span`` in the original."""
    shift = edit.replacement.count("\n") - (edit.node.end_lineno - edit.node.lineno)  # type: ignore[attr-defined]  # positioned nodes only (expr/stmt)
    return "".join(text.splitlines(keepends=True)[span[0] - 1 : span[1] + shift])


def _reach(node: ast.AST, parents: dict[int, ast.AST]) -> frozenset[int] | None:
    """:attr:`Mutant.reach` of an edit of ``node``: its lines and its innermost statement's first line (a line event
    fires for one of them whenever its code runs), or None outside every function body."""
    statement = node if isinstance(node, ast.stmt) else None
    child, up = node, parents.get(id(node))
    in_body = False
    while up is not None:
        if statement is None and isinstance(up, ast.stmt):
            statement = up
        if isinstance(up, ast.FunctionDef | ast.AsyncFunctionDef) and any(child is s for s in up.body):
            in_body = True
        if isinstance(up, ast.Lambda) and child is up.body:
            in_body = True
        child, up = up, parents.get(id(up))
    if not in_body or statement is None:
        return None
    return frozenset({statement.lineno, *range(node.lineno, node.end_lineno + 1)})  # type: ignore[attr-defined]  # positioned nodes only (expr/stmt)


@dataclass(frozen=True)
class _Gold:
    """What every task deleting code from one module's text shares: its tree (:func:`syntax.shared`), the positioned
    nodes an operator may touch in :func:`file_mutants`' order, each node's parent, the top-level statements' spans
    and (filled on first use) the dump of each span's statements as parsed alone."""

    tree: ast.Module
    nodes: tuple[ast.AST, ...]
    parents: dict[int, ast.AST]
    spans: tuple[tuple[int, int], ...]
    dumps: dict[tuple[int, int], str | None]


@functools.lru_cache(maxsize=SHARED_TREES)
def _gold(source: str) -> _Gold:
    tree = shared(source)
    skip = _unmutable(tree)
    nodes = sorted(
        (n for n in ast.walk(tree) if hasattr(n, "lineno") and id(n) not in skip),
        key=lambda n: (n.lineno, n.col_offset, -n.end_lineno, -n.end_col_offset),  # type: ignore[attr-defined]  # positioned nodes only (expr/stmt); typeshed declares positions on those subclasses, not on ast.AST
    )
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    return _Gold(tree, tuple(nodes), parents, tuple(_statement_spans(tree)), {})


def _gold_dump(gold: _Gold, source_lines: list[str], span: tuple[int, int]) -> str | None:
    """The dump of gold's statement at ``span`` parsed alone ((0, 0): the whole file); None where it does not parse
    alone (it shares a line with the next statement)."""
    if span not in gold.dumps:
        try:
            alone = ast.parse("".join(source_lines[span[0] - 1 : span[1]])) if span != (0, 0) else gold.tree
            gold.dumps[span] = ast.dump(alone)
        except SyntaxError:
            gold.dumps[span] = None
    return gold.dumps[span]


def file_mutants(path: str, source: str, lines: frozenset[int]) -> list[Mutant]:
    """Every mutant of ``source`` whose edited node lies wholly on ``lines``, in source order, but those that parse to
    gold's own tree or to an earlier mutant's. Only the top-level statement holding the edit is parsed again (the rest
    of the file is gold's, byte for byte): for a 1,500-line module that is what makes sampling 10 mutants cheap. What
    the module's text alone decides (its tree, nodes, parents, statements) is worked out once per text (:func:`_gold`):
    a package's candidates delete code from the same few modules."""
    gold = _gold(source)
    if not lines:
        return []
    low, high = min(lines), max(lines)
    raw = source.encode().splitlines(keepends=True)
    source_lines = source.splitlines(keepends=True)
    spans = gold.spans
    nodes = [n for n in gold.nodes if n.lineno <= high and n.end_lineno >= low]  # type: ignore[attr-defined]  # positioned nodes only
    out: list[Mutant] = []
    seen: set[tuple[tuple[int, int], str]] = set()
    for node in nodes:
        for edit in _edits(node):
            span = set(range(edit.node.lineno, edit.node.end_lineno + 1))  # type: ignore[attr-defined]  # positioned nodes only (expr/stmt); typeshed declares positions on those subclasses, not on ast.AST
            if not span <= lines:
                continue
            text = _apply(raw, edit.node, edit.replacement)
            where = next(s for s in spans if s[0] <= edit.node.lineno <= s[1])  # type: ignore[attr-defined]  # positioned nodes only (expr/stmt)
            try:
                if _gold_dump(gold, source_lines, where) is None:
                    raise SyntaxError(where)
                key = (where, ast.dump(ast.parse(_mutated_statement(text, where, edit))))
            except SyntaxError:  # invalid, or the statement shares a line with the next one: judge the whole file
                try:
                    key = ((0, 0), ast.dump(ast.parse(text)))
                except SyntaxError:
                    continue
            if key in seen or key[1] == _gold_dump(gold, source_lines, key[0]):
                continue
            seen.add(key)
            line = edit.node.lineno  # type: ignore[attr-defined]  # positioned nodes only (expr/stmt); typeshed declares positions on those subclasses, not on ast.AST
            reach = _reach(edit.node, gold.parents)
            out.append(Mutant(path=path, line=line, operator=edit.operator, text=text, reach=reach))
    return out


def gold_mutants(broken: dict[str, str], original: dict[str, str], *, cap: int, seed: str) -> list[Mutant]:
    """Up to ``cap`` mutants of the code the gold patch restores (``original`` vs the snapshot ``broken``), sampled
    deterministically for ``seed``: operators take turns, each operator's sites in a seeded random order."""
    by_operator: dict[Operator, list[Mutant]] = defaultdict(list)
    for path in sorted(broken):
        for m in file_mutants(path, original[path], restored_lines(broken[path], original[path])):
            by_operator[m.operator].append(m)
    rng = random.Random(seed)
    queues = []
    for op in OPERATORS:
        sites = by_operator.get(op, [])
        rng.shuffle(sites)
        queues.append(sites)
    picked: list[Mutant] = []
    while len(picked) < cap and any(queues):
        for q in queues:
            if q and len(picked) < cap:
                picked.append(q.pop())
    return picked


__all__ = ["OPERATORS", "Mutant", "Operator", "file_mutants", "gold_mutants", "restored_lines"]
