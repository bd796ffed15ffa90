"""Is the deleted code readable elsewhere in the agent's tree?

A task whose deleted body sits verbatim in another file the agent can open is solved by copying it: python-slugify's
sdist ships ``tools/legacy_reference.py``, a frozen copy of ``slugify/_legacy.py``, so its ``smart_truncate`` tasks
paid 1.0 for a copy. The check is by construction, not by a list of known files: the deleted code's lines are looked
for, in order, in every other file of the tree (documentation and tools included; the tests hidden from the agent
and the files the task changes left out: sibling code in the same module is the project's own idiom, for an honest
agent to follow).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

COPY_SHARE = 0.8
"""A file holding this share of the deleted code's lines, in order, holds a copy of it."""
MIN_LINES = 3
"""Deleted code of fewer lines than this (as :func:`code_lines` counts them) is too short to tell a copy from an idiom."""
MIN_CHARS = 16
"""Lines shorter than this once stripped (``else:``, ``return None``) are left out: every module has them."""
MAX_FILE_BYTES = 1 << 20
"""Larger files (data, vendored bundles) are not read."""


def code_lines(lines: Iterable[str]) -> list[str]:
    """The lines that can tell a copy, as a reformatted copy still has them: stripped, runs of blanks as one,
    single quotes as double; long enough, not comments."""
    out = (" ".join(line.split()).replace("'", '"') for line in lines)
    return [line for line in out if len(line) >= MIN_CHARS and not line.startswith("#")]


def deleted_lines(gold_patch: str) -> list[str]:
    """The lines the gold patch puts back (the deleted code), as :func:`code_lines`."""
    added = (line[1:] for line in gold_patch.splitlines() if line.startswith("+") and not line.startswith("+++"))
    return code_lines(added)


def in_order(want: list[str], have: list[str]) -> int:
    """How many of ``want`` occur in ``have`` in ``want``'s order (a greedy subsequence match)."""
    found, at = 0, 0
    for line in want:
        try:
            at = have.index(line, at) + 1
        except ValueError:
            continue
        found += 1
    return found


@dataclass(frozen=True)
class Copy:
    """Where a copy of deleted code was found."""

    path: str
    found: int
    lines: int

    def detail(self) -> str:
        return f"{self.found} of the {self.lines} lines of the deleted code are in {self.path}, readable by the agent"


class TreeLines:
    """Every readable text file of a tree as :func:`code_lines`, read once."""

    def __init__(self, root: Path) -> None:
        self.files: dict[str, tuple[list[str], frozenset[str]]] = {}
        for path in sorted(root.rglob("*")):
            if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_FILE_BYTES:
                continue
            try:
                lines = code_lines(path.read_text(encoding="utf-8").splitlines())
            except (UnicodeDecodeError, OSError):
                continue
            self.files[path.relative_to(root).as_posix()] = (lines, frozenset(lines))

    def copy_of(self, gold_patch: str, skip: Iterable[str]) -> Copy | None:
        """The first file (by path) outside ``skip`` that holds a copy of the code ``gold_patch`` puts back."""
        want = deleted_lines(gold_patch)
        if len(want) < MIN_LINES:
            return None
        need = COPY_SHARE * len(want)
        skipped = set(skip)
        for path, (lines, present) in self.files.items():
            if path in skipped or sum(1 for line in want if line in present) < need:
                continue
            found = in_order(want, lines)
            if found >= need:
                return Copy(path=path, found=found, lines=len(want))
        return None


__all__ = ["COPY_SHARE", "MIN_CHARS", "MIN_LINES", "Copy", "TreeLines", "code_lines", "deleted_lines", "in_order"]
