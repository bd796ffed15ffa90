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

TEST_DIR_NAMES = frozenset({"test", "tests", "testing", "e2e"})


def patch_files(patch: str) -> list[str]:
    """Target paths of every file a unified git diff touches, in order, without duplicates."""
    return list(dict.fromkeys(_DIFF_HEADER.findall(patch)))


def test_directives(test_patch: str, repo: str) -> list[str]:
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
    """Whether ``path`` is a test file by SWE-bench's split of PR diffs into ``patch`` and ``test_patch``.

    Used to keep an agent's edits to tests (and ``conftest.py`` files that could rewrite outcomes) out of the
    patch that is graded: a directory named test/tests/testing/e2e, or a ``test_*`` / ``*_test.py`` /
    ``tests.py`` / ``conftest.py`` file.
    """
    p = PurePosixPath(path)
    if any(part in TEST_DIR_NAMES for part in p.parts[:-1]):
        return True
    name = p.name
    return name.startswith("test_") or name.endswith(("_test.py", "_tests.py")) or name in {"tests.py", "conftest.py"}
