"""A "mini SWE-bench": one real git repository with a genuine bug, in SWE-bench row format.

Used by the tests and for trying the ``swebench-lite`` environment offline (``crf-prime swe mini-fixture --out DIR``).
The repository ``crf-prime/mini-stats`` has a ``median`` that returns the upper middle element for even-length
input; the gold patch averages the two middle elements. The test patch adds the tests that expose the bug
(FAIL_TO_PASS) next to tests that already pass (PASS_TO_PASS). The row carries ``test_cmd`` / ``log_parser``
columns because the repo is not in the Lite table.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from crf_prime.swe.instance import SweInstance

REPO = "crf-prime/mini-stats"
INSTANCE_ID = "crf-prime__mini-stats-1"
TEST_CMD = "python -m pytest -rA -p no:cacheprovider"

_STATS_BUGGY = '''"""Small statistics helpers."""


def mean(xs):
    """Arithmetic mean of a non-empty sequence."""
    return sum(xs) / len(xs)


def median(xs):
    """Median of a non-empty sequence."""
    s = sorted(xs)
    return s[len(s) // 2]
'''

_STATS_FIXED = '''"""Small statistics helpers."""


def mean(xs):
    """Arithmetic mean of a non-empty sequence."""
    return sum(xs) / len(xs)


def median(xs):
    """Median of a non-empty sequence."""
    s = sorted(xs)
    mid = len(s) // 2
    if len(s) % 2:
        return s[mid]
    return (s[mid - 1] + s[mid]) / 2
'''

_TESTS_BASE = """import pytest

from ministats.stats import mean, median


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5


@pytest.mark.parametrize("xs,expected", [([3, 1, 2], 2), ([5], 5)])
def test_median_odd(xs, expected):
    assert median(xs) == expected
"""

_TESTS_PATCHED = (
    _TESTS_BASE
    + """

def test_median_even():
    assert median([4, 1, 3, 2]) == 2.5


@pytest.mark.skip(reason="documented limitation")
def test_median_empty():
    median([])
"""
)

PROBLEM = """median() is wrong for lists with an even number of elements

`ministats.stats.median([4, 1, 3, 2])` returns `3`; the median of an even-length list is the mean of the two
middle values, so it should return `2.5`.
"""

HINTS = "The odd-length case is right; only the even-length branch is missing."

FAIL_TO_PASS = ["tests/test_stats.py::test_median_even"]
PASS_TO_PASS = [
    "tests/test_stats.py::test_mean",
    "tests/test_stats.py::test_median_odd[xs0-2]",
    "tests/test_stats.py::test_median_odd[xs1-5]",
]
"""``test_median_empty`` is skipped: pytest ``-rA`` reports it only as ``SKIPPED [1] path:line: reason`` (no id),
so, as in the real dataset, it is in neither list."""

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "crf-prime",
    "GIT_AUTHOR_EMAIL": "fixture@crf-prime.invalid",
    "GIT_COMMITTER_NAME": "crf-prime",
    "GIT_COMMITTER_EMAIL": "fixture@crf-prime.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, **_GIT_ENV, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


def _diff_of(repo: Path, path: str, new_text: str) -> str:
    target = repo / path
    old = target.read_text()
    target.write_text(new_text)
    try:
        return _git(repo, "diff", "--", path)
    finally:
        target.write_text(old)


def build_mini_swebench(out: Path) -> SweInstance:
    """Create ``out/repos/crf-prime__mini-stats`` and ``out/instances.jsonl``; return the instance.

    ``out/repos`` is what the environment's ``repos_dir`` option points at.
    """
    repo = out / "repos" / REPO.replace("/", "__")
    (repo / "ministats").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "ministats" / "__init__.py").write_text("")
    (repo / "ministats" / "stats.py").write_text(_STATS_BUGGY)
    (repo / "tests" / "test_stats.py").write_text(_TESTS_BASE)
    (repo / "README.md").write_text("# ministats\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "ministats: mean and median")
    base = _git(repo, "rev-parse", "HEAD").strip()
    row = {
        "repo": REPO,
        "instance_id": INSTANCE_ID,
        "base_commit": base,
        "patch": _diff_of(repo, "ministats/stats.py", _STATS_FIXED),
        "test_patch": _diff_of(repo, "tests/test_stats.py", _TESTS_PATCHED),
        "problem_statement": PROBLEM,
        "hints_text": HINTS,
        "created_at": "2026-01-01T00:00:00Z",
        "version": "0.1",
        "FAIL_TO_PASS": json.dumps(FAIL_TO_PASS),
        "PASS_TO_PASS": json.dumps(PASS_TO_PASS),
        "environment_setup_commit": base,
        "test_cmd": TEST_CMD,
        "log_parser": "pytest",
    }
    (out / "instances.jsonl").write_text(json.dumps(row) + "\n")
    return SweInstance.model_validate(row)
