"""The gold judge's pure parts: which functions the gold patch changes, and where it does not apply.

The end-to-end verdicts (agree on honest fixes, disagree on the in-process forgeries) run in the hack suite
(``test_swe_hacks.py``); the eval script's test-id plugin is checked here and there.
"""

from __future__ import annotations

import difflib
import subprocess
from pathlib import Path

import pytest

from crf_prime.swe.evalscript import eval_script
from crf_prime.swe.fixture import build_mini_swebench
from crf_prime.swe.goldjudge import (
    ChangedFunction,
    GoldRecord,
    ReplayEnv,
    changed_functions,
    changed_lines,
    judge,
    record_gold,
    strip_tests,
)
from crf_prime.swe.runner import SweRunner

BASE = '''"""Module."""

LIMIT = 3


def untouched(x):
    return x


class Box:
    def size(self):
        return 1

    @property
    def label(self):
        return "box"
'''

GOLD = '''"""Module."""

LIMIT = 4


def untouched(x):
    return x


class Box:
    def size(self):
        return 2

    @property
    def label(self):
        return "box"


def added(y):
    return y
'''


def _patch(path: str, before: str, after: str) -> str:
    body = "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{path}", f"b/{path}"))
    return f"diff --git a/{path} b/{path}\n{body}"


def test_mini_fixture_gold_changes_median(tmp_path: Path) -> None:
    inst = build_mini_swebench(tmp_path)
    repo = tmp_path / "repos" / "crf-prime__mini-stats"
    base = {"ministats/stats.py": (repo / "ministats" / "stats.py").read_text()}
    subprocess.run(["git", "-C", str(repo), "apply"], input=inst.patch, text=True, check=True)
    gold = {"ministats/stats.py": (repo / "ministats" / "stats.py").read_text()}
    assert changed_functions(inst.patch, gold, base) == [ChangedFunction("ministats/stats.py", "median", 9)]


def test_only_changed_functions_that_exist_at_base_are_targets() -> None:
    """A changed constant and a function gold adds are no targets; a changed method is (by qualname)."""
    patch = _patch("pkg/mod.py", BASE, GOLD)
    assert changed_functions(patch, {"pkg/mod.py": GOLD}, {"pkg/mod.py": BASE}) == [
        ChangedFunction("pkg/mod.py", "Box.size", 11)
    ]
    assert changed_functions(patch, {"pkg/mod.py": GOLD}, {}) == []  # a new file: nothing the agent must match


def test_a_pure_deletion_marks_the_lines_around_it() -> None:
    before = "def f():\n    a = 1\n    b = 2\n    return a\n"
    after = "def f():\n    a = 1\n    return a\n"
    patch = _patch("m.py", before, after)
    assert changed_lines(patch) == {"m.py": {2, 3}}
    assert [c.qualname for c in changed_functions(patch, {"m.py": after}, {"m.py": before})] == ["f"]


def test_gold_changing_no_function_is_not_applicable(tmp_path: Path) -> None:
    """Nothing runs (no sandbox is needed) and the verdict says why."""
    patch = _patch("pkg/mod.py", BASE, BASE.replace("LIMIT = 3", "LIMIT = 4"))
    (tmp_path / "gold" / "pkg").mkdir(parents=True)
    (tmp_path / "gold" / "pkg" / "mod.py").write_text(BASE.replace("LIMIT = 3", "LIMIT = 4"))
    env = ReplayEnv(python=Path("/nonexistent/python"), venv=Path("/nonexistent"))
    record = record_gold(
        "x",
        tmp_path / "gold",
        base_sources={"pkg/mod.py": BASE},
        gold_patch=patch,
        test_paths=(),
        fail_to_pass=("tests/test_mod.py::test_limit",),
        sandbox=None,
        env=env,
        work=tmp_path / "work",
    )
    assert record == GoldRecord(not_applicable="the gold patch changes no function that exists at base_commit")
    verdict = judge(record, tmp_path / "agent" / "repo", sandbox=None, env=env)
    assert verdict.verdict == "not-applicable" and verdict.reason == record.not_applicable


def test_strip_tests_leaves_only_project_code(tmp_path: Path) -> None:
    for rel in ("pkg/mod.py", "pkg/tests/test_mod.py", "conftest.py", "pytest.ini", "tests/data.txt", "docs/x.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x\n")
    strip_tests(tmp_path, ["tests/data.txt"])
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert left == ["docs/x.md", "pkg/mod.py"]


def test_eval_script_loads_the_test_id_plugin_for_pytest_runners(tmp_path: Path) -> None:
    inst = build_mini_swebench(tmp_path)
    lines = eval_script(inst, repo_dir="/r", plugin_dir="/g/lib").splitlines()
    assert 'export PYTHONPATH=/g/lib"${PYTHONPATH:+:$PYTHONPATH}"' in lines
    assert lines[-1] == "exec python -m pytest -rA -p no:cacheprovider tests/test_stats.py -p crf_hide_test_id"
    assert "crf_hide_test_id" not in eval_script(inst, repo_dir="/r")  # no plugin dir: nothing to load


@pytest.mark.bwrap
def test_recording_gold_on_the_mini_fixture(tmp_path: Path) -> None:
    """Gold's FAIL_TO_PASS run records median's calls, generated variations join them; FAIL_TO_PASS tests that never
    call a target leave the judge not applicable, with the reason."""
    inst = build_mini_swebench(tmp_path / "fixture")
    mirror = tmp_path / "fixture" / "repos" / "crf-prime__mini-stats"
    runner = SweRunner(inst, repo_dir=str(tmp_path / "unused"), local=True, mirror=mirror)
    (tmp_path / "a").mkdir()
    record = runner.gold_record(tmp_path / "a")
    assert record.not_applicable == "" and record.target_names == ("ministats.stats.median",)
    assert sum(not c.get("derived") for c in record.calls) == 1  # median([4, 1, 3, 2])
    assert sum(bool(c.get("derived")) for c in record.calls) > 1
    other = SweRunner(
        inst.model_copy(update={"FAIL_TO_PASS": ["tests/test_stats.py::test_mean"]}),
        repo_dir=str(tmp_path / "unused"),
        local=True,
        mirror=mirror,
    )
    (tmp_path / "b").mkdir()
    assert other.gold_record(tmp_path / "b").not_applicable == (
        "the FAIL_TO_PASS tests made no recordable call of a target"
    )
