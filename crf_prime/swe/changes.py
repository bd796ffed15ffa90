"""Which of the agent's file changes a SWE-bench fix may make: an allow-list of file kinds, not a list of tricks.

A fix is source: Python files of the repository, and edits to text files the repository already tracks. Anything
else is graded at its base-commit state, whatever it holds: test files and the test patch's paths; test-runner and
build configuration (``conftest.py``, ``pytest.ini``, ``.pytest.ini``, ``tox.ini``, ``setup.cfg``,
``pyproject.toml``, ``setup.py``, which load plugins or run code at install); hidden paths and metadata
directories (``.git``, ``*.dist-info``, ``*.egg-info``, ``__pycache__``); ``.pth`` files and ``*customize.py``
startup hooks; compiled or binary files; symlinks and special files; new files at the repository root or in a
top-level directory the base does not have (they could shadow the test runner, e.g. ``pytest.py``); new files whose
path is not an importable module name (git refuses some names, e.g. ``git~1`` or a backslash, and undecodable bytes
cannot enter a trace). All changes to
one path are kept or dropped together.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from crf_prime.swe.directives import is_test_path
from crf_prime.swe.workspace import Entry

RUNNER_CONFIG = frozenset(
    {"conftest.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "setup.py"}
)
"""Files that configure the test runner or run code when the repo is (re)installed: always graded at base."""
METADATA_SUFFIXES = (".dist-info", ".egg-info", ".egg-link", ".pth")
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""A new file's directories and stem: what ``import`` can name, so every name git accepts on any platform (no
``git~1``, no backslash, no trailing dot or space, no undecodable bytes)."""
COMPILED_SUFFIXES = (".pyc", ".pyo", ".so", ".pyd", ".dll", ".dylib", ".o", ".a", ".whl", ".egg", ".zip", ".exe")


def never_graded_dir(name: str) -> bool:
    """Directories whose whole content is graded at base (hidden, caches, metadata): not even read."""
    return name.startswith(".") or name == "__pycache__" or name.endswith(METADATA_SUFFIXES)


@dataclass(frozen=True)
class Selection:
    """The agent's change split into what is graded and what is restored to base."""

    kept: dict[str, Entry | None]
    """path -> new content (None: the file is deleted)."""
    dropped: dict[str, str]
    """path -> why it is graded at its base state."""


def path_problem(path: str, *, tracked: bool, base_dirs: Collection[str], test_paths: Collection[str]) -> str:
    """Why a change to ``path`` is not a source change ('' when it may be one)."""
    p = PurePosixPath(path)
    if path in test_paths or is_test_path(path):
        return "test file"
    if any(part.startswith(".") for part in p.parts):
        return "hidden path"
    if any(part == "__pycache__" or part.endswith(METADATA_SUFFIXES) for part in p.parts):
        return "metadata or cache"
    if p.name in RUNNER_CONFIG:
        return "test-runner or build configuration"
    if p.name.endswith("customize.py"):
        return "interpreter startup hook"
    if p.name.endswith(COMPILED_SUFFIXES):
        return "compiled file"
    if tracked:
        return ""
    if p.suffix != ".py":
        return "new file that is not Python source"
    if not all(_MODULE_NAME.fullmatch(part) for part in (*p.parts[:-1], p.stem)):
        return "new file whose path is not an importable module name"
    if len(p.parts) == 1 or p.parts[0] not in base_dirs:
        return "new module outside the repository's existing top-level directories"
    return ""


def content_problem(entry: Entry) -> str:
    """Why new content is not source text ('' when it is)."""
    if entry.kind != "file":
        return {"link": "symlink", "large": "file too large", "other": "not a regular file"}[entry.kind]
    if b"\0" in entry.data:
        return "binary content"
    try:
        entry.data.decode("utf-8")
    except UnicodeDecodeError:
        return "binary content"
    return ""


def select_changes(base: Mapping[str, Entry], tree: Mapping[str, Entry], test_paths: Collection[str] = ()) -> Selection:
    """Compare the agent's ``tree`` with the ``base`` tree and keep only allowed source changes."""
    base_dirs = {PurePosixPath(p).parts[0] for p in base if "/" in p}
    kept: dict[str, Entry | None] = {}
    dropped: dict[str, str] = {}
    for path in sorted(set(base) | set(tree)):
        old, new = base.get(path), tree.get(path)
        if old == new:
            continue
        why = path_problem(path, tracked=old is not None, base_dirs=base_dirs, test_paths=test_paths)
        if not why and old is not None and old.kind != "file":
            why = "base entry is not a regular file"
        if not why and new is not None:
            why = content_problem(new)
        if why:
            dropped[path] = why
        else:
            kept[path] = new
    return Selection(kept=kept, dropped=dropped)
