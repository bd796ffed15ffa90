"""Which tests to run for an instance, derived from its test patch the way the swebench harness does.

Semantics of swebench 4.1.0 ``harness/test_spec/python.py: get_test_directives`` (dropped from 5.x together
with the per-repo spec tables): every ``diff --git a/X b/Y`` header contributes ``Y``; files whose name ends
with a non-test extension are dropped; for django the paths become dotted module names relative to ``tests/``
(``tests/auth_tests/test_views.py`` -> ``auth_tests.test_views``), which is what ``tests/runtests.py`` expects.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

# the greedy ``.*`` before `` b/`` is deliberate: the harness takes the last `` b/`` on the header line
_DIFF_HEADER = re.compile(r"diff --git a/.* b/(.*)")

NON_TEST_SUFFIXES: tuple[str, ...] = (
    ".json",
    ".png",
    "csv",  # no dot upstream either: any name ending in "csv" is dropped
    ".txt",
    ".md",
    ".jpg",
    ".jpeg",
    ".pkl",
    ".yml",
    ".yaml",
    ".toml",
)
"""Suffixes the harness never passes to the test runner (swebench ``NON_TEST_EXTS``)."""

TEST_DIR_NAMES = frozenset({"tests", "testing", "e2e"})
"""Directories holding tests. Not ``test``: ``django/test/`` is library code a fix may need to touch."""


def patch_files(patch: str) -> list[str]:
    """Target paths of every file a unified git diff touches, in order, without duplicates."""
    return list(dict.fromkeys(_DIFF_HEADER.findall(patch)))


def get_test_directives(test_patch: str, repo: str) -> list[str]:
    """Arguments appended to the repo's test command to run only the tests the test patch touches."""
    directives = [path for path in _DIFF_HEADER.findall(test_patch) if not path.endswith(NON_TEST_SUFFIXES)]
    if repo == "django/django":
        directives = [_django_module(path) for path in directives]
    return directives


def _django_module(path: str) -> str:
    path = path.removesuffix(".py")
    path = path.removeprefix("tests/")
    return path.replace("/", ".")


def is_test_path(path: str) -> bool:
    """Whether the grader treats ``path`` as a test file and drops an agent's change to it.

    Keeps edited tests and added ``conftest.py`` files (which could rewrite outcomes) out of the graded patch: a
    directory named tests/testing/e2e, or a ``test_*`` / ``*_test.py`` / ``tests.py`` / ``conftest.py`` file.
    Narrower than swebench's collection split (a substring ``"test"`` anywhere in the path, ``collect/utils.py``),
    which would also drop library code such as ``src/_pytest/`` or ``django/test/``.
    """
    p = PurePosixPath(path)
    if any(part in TEST_DIR_NAMES for part in p.parts[:-1]):
        return True
    name = p.name
    return name.startswith("test_") or name.endswith(("_test.py", "_tests.py")) or name in {"tests.py", "conftest.py"}
