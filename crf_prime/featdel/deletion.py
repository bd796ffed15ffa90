"""Find deletable functions with ``ast`` and delete their bodies by byte positions.

The splice keeps decorators, signature and docstring byte-identical and replaces everything between the end of the
header (or of the docstring) and the end of the last body statement with ``raise NotImplementedError``; the rest of
the file is untouched, so the gold patch is minimal (Cursor's Feature Deletion recipe; closest public relative:
SWE-smith's "LM rewrite" stubs). Comments between the docstring and the first statement go with the
body so they cannot leak the implementation.
"""

from __future__ import annotations

import ast
import difflib
import io
import tokenize
from dataclasses import dataclass

from crf_prime.errors import InputError
from crf_prime.featdel.syntax import parse, shared

STUB = "raise NotImplementedError"
SKIP_DECORATORS = frozenset({"overload", "abstractmethod", "abstractproperty", "abc.abstractmethod", "typing.overload"})


@dataclass(frozen=True)
class FunctionInfo:
    """A function or method found in a source file."""

    path: str
    qualname: str
    lineno: int
    """Line of the ``def`` keyword."""
    start_line: int
    """First line including decorators."""
    body_lines: frozenset[int]
    """Lines of every statement in the body (docstring excluded) — used to map coverage contexts."""
    statements: int
    """Statements in the body, nested ones included (docstring excluded)."""
    public: bool
    class_name: str | None
    calls: frozenset[str]
    """Bare names called in the body (for grouping related functions)."""
    body_dump: str
    """``ast.dump`` of the body, to detect duplicated implementations."""


def _docstring_node(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.Expr | None:
    first = fn.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first
    return None


def _decorator_name(d: ast.expr) -> str:
    if isinstance(d, ast.Call):
        d = d.func
    try:
        return ast.unparse(d)
    except Exception:  # pragma: no cover - unparse handles every expression node
        return ""


def _is_stub(body: list[ast.stmt]) -> bool:
    if len(body) != 1:
        return False
    s = body[0]
    if isinstance(s, ast.Pass):
        return True
    if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and s.value.value is Ellipsis:
        return True
    if isinstance(s, ast.Raise) and s.exc is not None:
        exc = s.exc.func if isinstance(s.exc, ast.Call) else s.exc
        return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
    return False


def iter_functions(path: str, source: str) -> list[FunctionInfo]:
    """Every function/method in ``source`` that has a real body (not a stub, overload or abstract method)."""
    tree = shared(source)
    out: list[FunctionInfo] = []

    def visit(node: ast.AST, prefix: str, cls: str | None, public_scope: bool, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(
                    child,
                    f"{prefix}{child.name}.",
                    child.name,
                    public_scope and not child.name.startswith("_"),
                    in_function,
                )
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                qual = f"{prefix}{child.name}"
                doc = _docstring_node(child)
                body = child.body[1:] if doc is not None else child.body
                decos = {_decorator_name(d) for d in child.decorator_list}
                if body and not _is_stub(body) and not (decos & SKIP_DECORATORS) and not in_function:
                    lines: set[int] = set()
                    calls: set[str] = set()
                    n = 0
                    for stmt in body:
                        for sub in ast.walk(stmt):
                            if isinstance(sub, ast.stmt):
                                n += 1
                                lines.update(range(sub.lineno, (sub.end_lineno or sub.lineno) + 1))
                            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name):
                                calls.add(sub.func.id)
                    name_public = not child.name.startswith("_")
                    out.append(
                        FunctionInfo(
                            path=path,
                            qualname=qual,
                            lineno=child.lineno,
                            start_line=min([child.lineno] + [d.lineno for d in child.decorator_list]),
                            body_lines=frozenset(lines),
                            statements=n,
                            public=public_scope and name_public,
                            class_name=cls,
                            calls=frozenset(calls),
                            body_dump="\n".join(ast.dump(s) for s in body),
                        )
                    )
                visit(child, f"{qual}.<locals>.", None, False, True)
            else:
                visit(child, prefix, cls, public_scope, in_function)

    visit(tree, "", None, True, False)
    return out


def _walk_defs(node: ast.AST, prefix: str = ""):
    """Yield (qualname, function node) for every def, recursing through classes and if/try/with blocks."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef):
            yield from _walk_defs(child, f"{prefix}{child.name}.")
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield f"{prefix}{child.name}", child
            yield from _walk_defs(child, f"{prefix}{child.name}.<locals>.")
        else:
            yield from _walk_defs(child, prefix)


def _find(tree: ast.AST, qualname: str, lineno: int | None = None) -> ast.FunctionDef | ast.AsyncFunctionDef:
    for q, fn in _walk_defs(tree):
        if q == qualname and (lineno is None or fn.lineno == lineno):
            return fn
    raise KeyError(f"{qualname!r} not found")


def _line_offsets(data: bytes) -> list[int]:
    offsets = [0]
    for i, b in enumerate(data):
        if b == 0x0A:
            offsets.append(i + 1)
    return offsets


def _header_colon(source: str, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[int, int]:
    """(line, byte col) just after the ``:`` that ends the ``def`` header (first ``:`` at bracket depth 0)."""
    lines = source.splitlines(keepends=True)
    snippet = "".join(lines[fn.lineno - 1 : fn.body[0].lineno])
    depth = 0
    seen_def = False
    for tok in tokenize.generate_tokens(io.StringIO(snippet).readline):
        if tok.type == tokenize.NAME and tok.string == "def":
            seen_def = True
        elif tok.type == tokenize.OP and seen_def:
            if tok.string in "([{":
                depth += 1
            elif tok.string in ")]}":
                depth -= 1
            elif tok.string == ":" and depth == 0:
                line = fn.lineno + tok.end[0] - 1
                col_chars = tok.end[1]
                return line, len(lines[line - 1][:col_chars].encode())
    raise ValueError(f"no header colon found for {fn.name} at line {fn.lineno}")


def delete_bodies(source: str, qualnames: list[str]) -> str:
    """Replace the bodies of ``qualnames`` (in one file) with ``raise NotImplementedError``."""
    tree = shared(source)
    data = source.encode()
    offsets = _line_offsets(data)
    spans: list[tuple[int, int, bytes]] = []
    for q in qualnames:
        fn = _find(tree, q)
        doc = _docstring_node(fn)
        last = fn.body[-1]
        end = offsets[last.end_lineno - 1] + last.end_col_offset  # type: ignore[operator]  # ast.parse sets end positions on every statement (typeshed: int | None)
        first = fn.body[1] if doc is not None else fn.body[0]
        indent_line = data[offsets[first.lineno - 1] : offsets[first.lineno - 1] + first.col_offset]
        if doc is not None:
            start = offsets[doc.end_lineno - 1] + doc.end_col_offset  # type: ignore[operator]  # as above
            same_line = first.lineno == doc.end_lineno
        else:
            cl, cc = _header_colon(source, fn)
            start = offsets[cl - 1] + cc
            same_line = first.lineno == cl
        if same_line:
            repl = (b"; " if doc is not None else b" ") + STUB.encode()
        else:
            indent = indent_line if indent_line.strip() == b"" else b" " * (fn.col_offset + 4)
            repl = b"\n" + indent + STUB.encode()
        spans.append((start, end, repl))
    for start, end, repl in sorted(spans, reverse=True):
        data = data[:start] + repl + data[end:]
    out = data.decode()
    parse(out)  # must stay valid Python
    return out


def function_text(source: str, qualname: str) -> str:
    """Decorators + signature + docstring (+ body) of one function, as it appears in ``source``."""
    tree = shared(source)
    fn = _find(tree, qualname)
    lines = source.splitlines(keepends=True)
    start = min([fn.lineno] + [d.lineno for d in fn.decorator_list])
    text = "".join(lines[start - 1 : fn.end_lineno])
    indent = len(lines[start - 1]) - len(lines[start - 1].lstrip())
    return "".join(line[indent:] if line[:indent].strip() == "" else line for line in text.splitlines(keepends=True))


def unified_diff(path: str, before: str, after: str) -> str:
    """Unified diff with ``a/``/``b/`` prefixes (git-apply compatible) for one file."""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}", n=3
    )
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


class PatchError(InputError):
    """A unified diff does not apply exactly."""


def apply_unified_diff(files: dict[str, str], patch: str) -> dict[str, str]:
    """Apply a unified diff (exact context, as written by :func:`unified_diff`) to in-memory files."""
    result = dict(files)
    lines = patch.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        if not lines[i].startswith("--- "):
            i += 1
            continue
        path = lines[i + 1][4:].strip()
        path = path[2:] if path.startswith("b/") else path
        if path not in result:
            raise PatchError(f"patch touches {path!r}, which is not in the tree")
        old = result[path].splitlines(keepends=True)
        new: list[str] = []
        pos = 0
        i += 2
        while i < len(lines) and lines[i].startswith("@@"):
            old_range = lines[i].split()[1][1:]
            first, _, count = old_range.partition(",")
            start = int(first) if count == "0" else max(int(first) - 1, 0)
            new.extend(old[pos:start])
            pos = start
            i += 1
            prev = ""
            while i < len(lines) and lines[i][:1] in (" ", "-", "+", "\\"):
                tag, body = lines[i][:1], lines[i][1:]
                i += 1
                if tag == "\\":
                    if prev in (" ", "+") and new and new[-1].endswith("\n"):
                        new[-1] = new[-1][:-1]
                    continue
                prev = tag
                if tag in (" ", "-"):
                    if pos >= len(old) or old[pos].rstrip("\n") != body.rstrip("\n"):
                        raise PatchError(f"{path}: context mismatch at line {pos + 1}")
                    if tag == " ":
                        new.append(old[pos])
                    pos += 1
                else:
                    new.append(body)
        new.extend(old[pos:])
        result[path] = "".join(new)
    return result


# -- statement-level splices (block / tail granularities) ------------------------------------------------------------
BLOCK_TYPES = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)
Block = ast.If | ast.For | ast.AsyncFor | ast.While | ast.With | ast.AsyncWith | ast.Try
"""A compound statement of :data:`BLOCK_TYPES`: each has a ``body``."""


def _function_statements(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.stmt]:
    doc = _docstring_node(fn)
    return fn.body[1:] if doc is not None else fn.body


def inner_blocks(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[Block]:
    """Compound statements (if/for/while/with/try) anywhere in ``fn``'s own body (not in nested defs/classes)."""
    out: list[Block] = []

    def visit(stmts: list[ast.stmt]) -> None:
        for s in stmts:
            if isinstance(s, BLOCK_TYPES):
                out.append(s)
            for field in ("body", "orelse", "finalbody"):
                visit(
                    getattr(s, field, [])
                    if not isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                    else []
                )
            for h in getattr(s, "handlers", []):
                visit(h.body)

    visit(_function_statements(fn))
    return out


def _colon_before(source: str, line: int, col: int) -> tuple[int, int]:
    """(line, char col) just after the last ``:`` token ending before (line, col) — the header of a block body."""
    last: tuple[int, int] | None = None
    lines = source.splitlines(keepends=True)
    for tok in tokenize.generate_tokens(io.StringIO("".join(lines[:line])).readline):
        if tok.start >= (line, col):
            break
        if tok.type == tokenize.OP and tok.string == ":":
            last = tok.end
    if last is None:
        raise ValueError(f"no block header before line {line}")
    return last


def _stub_range(source: str, start: tuple[int, int], last: ast.stmt, indent: int) -> str:
    """Replace the text from ``start`` (line, char col) to the end of ``last`` with an indented stub."""
    data = source.encode()
    offsets = _line_offsets(data)
    lines = source.splitlines(keepends=True)
    s = offsets[start[0] - 1] + len(lines[start[0] - 1][: start[1]].encode())
    e = offsets[last.end_lineno - 1] + last.end_col_offset  # type: ignore[operator]  # ast.parse sets end positions on every statement (typeshed: int | None)
    out = (data[:s] + b"\n" + b" " * indent + STUB.encode() + data[e:]).decode()
    parse(out)
    return out


def delete_block(source: str, qualname: str, block_line: int) -> str:
    """Replace the body of the compound statement at ``block_line`` inside ``qualname`` (its ``if``/``for``/
    ``while``/``with``/``try`` part; ``else``/``except``/``finally`` stay) with ``raise NotImplementedError``."""
    fn = _find(shared(source), qualname)
    block = next((b for b in inner_blocks(fn) if b.lineno == block_line), None)
    if block is None:
        raise KeyError(f"{qualname!r}: no block at line {block_line}")
    first = block.body[0]
    return _stub_range(source, _colon_before(source, first.lineno, first.col_offset), block.body[-1], first.col_offset)


def delete_tail(source: str, qualname: str, keep: int) -> str:
    """Keep the first ``keep`` statements of ``qualname``'s body (after its docstring) and replace the rest with
    ``raise NotImplementedError``: the kept statements stay as context for the part to re-implement."""
    fn = _find(shared(source), qualname)
    body = _function_statements(fn)
    if not 1 <= keep < len(body):
        raise ValueError(f"{qualname!r}: cannot keep {keep} of {len(body)} statements")
    prev = body[keep - 1]
    end_line, end_col = prev.end_lineno, prev.end_col_offset
    assert end_line is not None and end_col is not None  # ast.parse sets every statement's end position
    lines = source.splitlines(keepends=True)
    end_char = len(lines[end_line - 1].encode()[:end_col].decode())
    return _stub_range(source, (end_line, end_char), body[-1], body[keep].col_offset)


def statement_count(nodes: list[ast.stmt]) -> int:
    """Statements in ``nodes``, nested ones included."""
    return sum(1 for n in nodes for sub in ast.walk(n) if isinstance(sub, ast.stmt))


def line_span(nodes: list[ast.stmt]) -> frozenset[int]:
    """Lines of every statement in ``nodes`` (nested included) — to map coverage contexts."""
    return frozenset(
        ln
        for n in nodes
        for sub in ast.walk(n)
        if isinstance(sub, ast.stmt)
        for ln in range(sub.lineno, (sub.end_lineno or sub.lineno) + 1)
    )


def function_nodes(source: str) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """qualname -> def node for every function in ``source`` (first definition wins, as :func:`iter_functions`)."""
    out: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for q, fn in _walk_defs(shared(source)):
        out.setdefault(q, fn)
    return out
