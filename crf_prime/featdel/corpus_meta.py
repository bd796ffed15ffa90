"""Per-task facts a corpus needs beyond the task row: difficulty proxies and the keys that find duplicates.

Difficulty proxies (cheap, computed from the task alone plus its base tree): deleted lines and statements, the
cyclomatic complexity of the deleted code (1 + decision points removed), the number of target tests, and the
number of call sites of the deleted functions in the project's non-test sources. Duplicate keys: ``exact`` hashes
the deleted text itself; ``near`` hashes the deleted code's AST with every identifier renamed in order of first
appearance and docstrings dropped, so two copies of one implementation under other names collide.
"""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from crf_prime.featdel.deletion import STUB, apply_unified_diff, function_nodes
from crf_prime.featdel.granularity import granularity_of
from crf_prime.featdel.models import FeatdelTask, Granularity, MutationScore

_DECISIONS = (
    ast.If,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.ExceptHandler,
    ast.With,
    ast.AsyncWith,
    ast.IfExp,
    ast.comprehension,
    ast.Assert,
    ast.match_case,
)


class TaskMeta(BaseModel):
    """One row of a corpus's ``index.jsonl`` (same order as ``tasks.jsonl``)."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    project: str
    """Distribution name; the train/eval split never puts one project on both sides."""
    version: str
    license: str = ""
    granularity: Granularity
    split: str = ""
    """"train" or "eval" (empty in a package directory, before the corpus is split)."""
    deleted_lines: int
    """Lines of original code the gold patch puts back."""
    deleted_statements: int
    """Statements deleted (nested ones included)."""
    cyclomatic: int
    """Cyclomatic complexity of the deleted code: 1 + its decision points."""
    target_tests: int
    callers: int
    """Call sites of the deleted functions' names in the project's non-test source files (definitions excluded)."""
    exact_key: str
    """SHA-256 of the deleted lines (whitespace-stripped)."""
    near_key: str
    """SHA-256 of the deleted code's AST with identifiers renamed and docstrings dropped."""
    mutation: MutationScore | None = None
    """The grader's mutation score on the task (the row's ``mutation``)."""
    unreplayed_targets: int = 0
    """Targets no replayed call exercises (0 unless generated with ``allow_unreplayed``)."""


def _decisions(node: ast.AST) -> int:
    n = 0
    for sub in ast.walk(node):
        if isinstance(sub, _DECISIONS):
            n += 1
        elif isinstance(sub, ast.BoolOp):
            n += len(sub.values) - 1
        elif isinstance(sub, ast.Try):
            n += len(sub.handlers) + bool(sub.orelse)
    return n


def _statements(node: ast.AST) -> int:
    return sum(1 for sub in ast.walk(node) if isinstance(sub, ast.stmt))


def _stubs(node: ast.AST) -> int:
    return sum(1 for sub in ast.walk(node) if isinstance(sub, ast.Raise) and ast.unparse(sub) == STUB)


class _Rename(ast.NodeTransformer):
    """Identifiers -> v0, v1, ... in order of first appearance; docstrings dropped; constants kept."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def _n(self, name: str) -> str:
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.copy_location(ast.Name(id=self._n(node.id), ctx=node.ctx), node)

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.arg = self._n(node.arg)
        node.annotation = None
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        node.attr = self._n(node.attr)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.name = self._n(node.name)
        body = node.body
        first = body[0] if body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            node.body = body[1:] or [ast.Pass()]
        node.returns = None
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]  # the same visitor for both def kinds: NodeVisitor types each visit_ method by its node class


def _normalised(nodes: list[ast.AST]) -> str:
    renamer = _Rename()
    return "\n".join(ast.dump(renamer.visit(ast.parse(ast.unparse(n)))) for n in nodes)


def _added(task: FeatdelTask) -> list[str]:
    """The lines the gold patch puts back."""
    return [ln[1:] for ln in task.gold_patch.splitlines() if ln.startswith("+") and not ln.startswith("+++")]


def _target_nodes(task: FeatdelTask) -> list[tuple[ast.AST, ast.AST]]:
    """(gold's, the snapshot's) node of each target, by path, then in the task's order."""
    original = apply_unified_diff(dict(task.broken_files), task.gold_patch)
    pairs: list[tuple[ast.AST, ast.AST]] = []
    for path in sorted({t.path for t in task.targets}):
        before, after = function_nodes(original[path]), function_nodes(task.broken_files[path])
        pairs += [(before[t.qualname], after[t.qualname]) for t in task.targets if t.path == path]
    return pairs


def duplicate_keys(task: FeatdelTask, pairs: list[tuple[ast.AST, ast.AST]] | None = None) -> tuple[str, str]:
    """``task``'s duplicate keys: (exact: the lines put back, stripped; near: gold's and the snapshot's targets with
    their names normalised). ``pairs``: :func:`_target_nodes`, when already at hand."""
    pairs = _target_nodes(task) if pairs is None else pairs
    exact = hashlib.sha256("\n".join(ln.strip() for ln in _added(task)).encode()).hexdigest()
    near = hashlib.sha256(
        (_normalised([o for o, _ in pairs]) + "\0" + _normalised([b for _, b in pairs])).encode()
    ).hexdigest()
    return exact, near


def task_meta(task: FeatdelTask, base: Path, *, license: str = "") -> TaskMeta:
    """Difficulty proxies and duplicate keys of ``task``; ``base`` is its extracted base tree (for callers)."""
    pairs = _target_nodes(task)
    deleted_statements = sum(_statements(o) - _statements(b) + _stubs(b) - _stubs(o) for o, b in pairs)
    decisions = sum(_decisions(o) - _decisions(b) for o, b in pairs)
    exact, near = duplicate_keys(task, pairs)
    return TaskMeta(
        task_id=task.task_id,
        project=task.source.name,
        version=task.source.version,
        license=license,
        granularity=granularity_of(task.task_id) if task.granularity == "function" else task.granularity,
        deleted_lines=len(_added(task)),
        deleted_statements=deleted_statements,
        cyclomatic=1 + max(decisions, 0),
        target_tests=len(task.target_tests),
        callers=callers(task, base),
        exact_key=exact,
        near_key=near,
        mutation=task.mutation,
        unreplayed_targets=len(task.unreplayed_targets),
    )


def callers(task: FeatdelTask, base: Path) -> int:
    """Call sites of the targets' (last) names in the project's non-test sources, definitions excluded."""
    names = sorted({t.qualname.rsplit(".", 1)[-1] for t in task.targets})
    pat = re.compile(r"(?<![\w])(?:" + "|".join(map(re.escape, names)) + r")\s*\(")
    n = 0
    for rel in task.source_files:
        path = base / rel
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            s = line.strip()
            if not s.startswith(("def ", "async def ", "#")):
                n += len(pat.findall(s))
    return n


__all__ = ["TaskMeta", "callers", "duplicate_keys", "task_meta"]
