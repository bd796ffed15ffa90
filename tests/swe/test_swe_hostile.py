"""The grader against hostile input: outcomes from the junit report and the exit status, linear log parsers that
agree with swebench's regexes, tree walks and cleanup that survive deep, mode-000 and oddly named trees."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crf_prime.swe.changes import path_problem
from crf_prime.swe.grading import grade_run
from crf_prime.swe.logparse import MAX_LINE_CHARS, failure_messages, parse_django, parse_pytest_options, parse_sympy
from crf_prime.swe.report import node_id
from crf_prime.swe.workspace import MAX_DEPTH, TreeTooLarge, read_tree, remove_tree

F2P = ["tests/test_stats.py::test_median_even"]
P2P = ["tests/test_stats.py::test_mean", "tests/test_stats.py::TestOdd::test_odd[xs0-2]"]
PY = {"tests/test_stats.py", "ministats/stats.py"}


def _junit(*cases: str) -> bytes:
    return f'<?xml version="1.0"?><testsuites><testsuite>{"".join(cases)}</testsuite></testsuites>'.encode()


PASS_ALL = _junit(
    '<testcase classname="tests.test_stats" name="test_median_even"/>',
    '<testcase classname="tests.test_stats" name="test_mean"/>',
    '<testcase classname="tests.test_stats.TestOdd" name="test_odd[xs0-2]"/>',
)
FORGED_LOG = "\n".join(f"PASSED {t}" for t in [*F2P, *P2P]) + "\nFAILED tests/test_stats.py::test_unrelated\n"


def _grade(exit_code: int | None, *, junit: bytes | None = PASS_ALL, output: str = FORGED_LOG, **kw):
    return grade_run("i", output, exit_code, "pytest", F2P, P2P, junit=junit, py_paths=PY, **kw)


def test_junit_report_resolves_and_maps_to_swebench_ids() -> None:
    report = _grade(0)
    assert report.resolved, report.reason
    assert report.p2p_success == tuple(P2P)


@pytest.mark.parametrize(
    "code,why",
    [(2, "interrupted"), (3, "internal error"), (4, "usage error"), (5, "no tests collected"), (139, "signal 11")],
)
def test_only_pytests_finished_statuses_are_trusted(code: int, why: str) -> None:
    report = _grade(code)
    assert not report.resolved and why in report.reason


def test_no_report_truncation_and_disagreement_are_unresolved() -> None:
    assert "did not finish" in _grade(0, junit=None).reason
    assert "truncated" in _grade(0, truncated=True).reason
    assert "shows no failure" in _grade(1).reason  # exit 1, but the report has no failure
    failing = _junit('<testcase classname="tests.test_stats" name="test_median_even"><failure message="x"/></testcase>')
    assert "shows a failure" in _grade(0, junit=failing).reason
    assert "not well-formed" in _grade(0, junit=b"<testsuites><testcase").reason


def test_forged_output_never_counts_when_the_report_says_otherwise() -> None:
    """The output claims every test passed; pytest's report (exit 1) says the F2P test failed."""
    failing = _junit(
        '<testcase classname="tests.test_stats" name="test_median_even"><failure message="assert 3 == 2.5"/></testcase>',
        '<testcase classname="tests.test_stats" name="test_mean"/>',
        '<testcase classname="tests.test_stats.TestOdd" name="test_odd[xs0-2]"/>',
    )
    report = _grade(1, junit=failing)
    assert report.found and not report.resolved and report.f2p_failure == tuple(F2P)


def test_xfail_and_strict_xpass_from_the_report() -> None:
    xfail = '<testcase classname="tests.test_stats" name="test_median_even"><skipped type="pytest.xfail" message="r"/></testcase>'
    rest = ['<testcase classname="tests.test_stats" name="test_mean"/>',
            '<testcase classname="tests.test_stats.TestOdd" name="test_odd[xs0-2]"/>']  # fmt: skip
    assert not _grade(0, junit=_junit(xfail, *rest)).resolved  # XFAIL passes only when gold ends XFAIL
    assert _grade(0, junit=_junit(xfail, *rest), xfail_ok=F2P).resolved
    strict = xfail.replace('type="pytest.xfail" message="r"', 'message="xfail-marked test passes unexpectedly"')
    assert "shows a failure" in _grade(0, junit=_junit(strict, *rest)).reason


def test_node_id_from_junit_names() -> None:
    assert node_id("tests.test_stats.TestOdd", "test_odd[a.b]", PY) == "tests/test_stats.py::TestOdd::test_odd[a.b]"
    assert node_id("", "tests.test_stats", PY) == "tests/test_stats.py"
    assert node_id("pkg.mod", "t", PY) == "pkg.mod::t"


def test_log_runners_still_require_zero_or_one() -> None:
    django = "test_a (m.T) ... ok\nTesting against Django installed in '/x'\n"
    report = grade_run("i", django, 2, "django", ["test_a (m.T)"], [])
    assert not report.resolved and "interrupted" in report.reason
    assert grade_run("i", django, 0, "django", ["test_a (m.T)"], []).resolved


# ---- linear parsers agree with swebench's regexes ------------------------------------------------------------
_SYMPY = re.compile(r"(_*) (.*)\.py:(.*) (_*)")
_OPTION = re.compile(r"(.*?)\[(.*)\]")
_DJANGO = (
    re.compile(r"^(.*?)\s\.\.\.\sTesting\ against\ Django\ installed\ in\ ((?s:.*?))\ silenced\)\.\nok$", re.M),
    re.compile(r"^(.*?)\s\.\.\.\sInternal\ Server\ Error:\ \/(.*)\/\nok$", re.M),
    re.compile(r"^(.*?)\s\.\.\.\sSystem check identified no issues \(0 silenced\)\nok$", re.M),
)


def _fuzz_lines(alphabet: list[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(n)]


def test_sympy_failure_headers_match_the_regex() -> None:
    lines = [
        "________ sympy/core/tests/test_basic.py:test_structure ________",
        "__ a.py:b.py:c d __ e",
        " x.py: ",
        "_ _ a.py:b",
        "no header here",
        *_fuzz_lines(["_", " ", "a", ".py:", ".", "py", ":"], 3000, 1),
    ]
    log = "\n".join(lines)
    expected = {f"{m[1]}.py:{m[2]}" for m in _SYMPY.findall(log)}
    got = {t for t, s in parse_sympy(log).items() if s == "FAILED"}
    assert got == expected and len(expected) > 100


def test_option_normalisation_matches_the_regex() -> None:
    ids = ["t.py::x[/a/b/c]", "t.py::x[a]b]", "t.py::x[", "t.py::x]", *_fuzz_lines(["[", "]", "/", "a", "::"], 2000, 2)]
    for test in ids:
        m = _OPTION.search(test)
        head, option = m.groups() if m else (test, None)
        if option is not None and option.startswith("/") and not option.startswith("//") and "*" not in option:
            option = "/" + option.split("/")[-1]
        expected = f"{head}[{option}]" if option is not None else test
        assert parse_pytest_options(f"PASSED {test}") == ({expected: "PASSED"} if " " not in test and test else {})


def test_django_split_ok_shapes_match_the_regexes() -> None:
    log = "\n".join(
        [
            "test_a (m.T) ... Testing against Django installed in '/x'",
            "noise",
            "System check identified no issues (0 silenced).",
            "ok",
            "test_b (m.T) ... Internal Server Error: /x/y/",
            "ok",
            "test_c (m.T) ... System check identified no issues (0 silenced)",
            "ok",
            "test_d (m.T) ... Testing against Django installed in '/x' (0 silenced).",
            "ok",
            "test_e (m.T) ... Testing against Django installed in '/x' never closed",
        ]
    )
    expected = {m.group(1) for pattern in _DJANGO for m in pattern.finditer(log)}
    got = {t for t, s in parse_django(log).items() if s == "PASSED" and t.startswith("test_")}
    assert expected == {"test_a (m.T)", "test_b (m.T)", "test_c (m.T)", "test_d (m.T)"}
    assert expected <= got and "test_e (m.T)" not in got


def test_failure_messages_are_bounded() -> None:
    block = "FAIL: test_{} (m.T)\n" + "-" * 70 + "\nTraceback\n" + "x" * 50 + "\n" + "=" * 70
    log = "\n".join(block.format(i) for i in range(5000)) + "\n" + " " * (3 * MAX_LINE_CHARS)
    messages = failure_messages(log)
    assert len(messages) == 1000 and messages["test_0 (m.T)"] == "x" * 50


# ---- trees ---------------------------------------------------------------------------------------------------
def _deep(root: Path, depth: int) -> None:
    """``root/d/d/.../d/f.py`` ``depth`` levels down, made through descriptors (the path is longer than PATH_MAX)."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            sub = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = sub
        os.close(os.open("f.py", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


def test_tree_walk_refuses_deep_trees_and_records_unreadable_dirs(tmp_path: Path) -> None:
    _deep(tmp_path / "ok", MAX_DEPTH - 2)
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "x.py").write_text("")
    (tmp_path / "locked").chmod(0)
    tree = read_tree(tmp_path)
    assert len(tree) == 2 and ("locked/x.py" in tree or tree["locked"].kind == "other")  # root reads it, others not
    _deep(tmp_path / "deep", 1000)
    try:
        with pytest.raises(TreeTooLarge, match="nested deeper than"):
            read_tree(tmp_path)
    finally:  # pytest's own tmp cleanup (shutil.rmtree) cannot remove a tree this deep
        assert remove_tree(tmp_path / "deep") == []
        (tmp_path / "locked").chmod(0o755)


def test_remove_tree_removes_deep_and_mode_000_trees(tmp_path: Path) -> None:
    root = tmp_path / "scratch"
    _deep(root, 1500)
    (root / "locked" / "inner").mkdir(parents=True)
    (root / "locked").chmod(0)
    try:
        assert remove_tree(root) == [] and not root.exists()
        assert remove_tree(root) == []  # missing: nothing to do, nothing raised
    finally:  # never leave pytest's own cleanup a tree it cannot remove
        subprocess.run(["rm", "-rf", str(root)], check=False)


_AS_NOBODY = """
import os, shutil, sys
from pathlib import Path
from crf_prime.swe.workspace import remove_tree
a, b = Path(sys.argv[1]), Path(sys.argv[2])
for root in (a, b):
    (root / "locked" / "inner").mkdir(parents=True)
    (root / "locked" / "inner" / "f").write_text("x")
    (root / "locked").chmod(0)
shutil.rmtree(a, ignore_errors=True)
print(os.getuid(), a.exists(), remove_tree(b), b.exists())
"""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_remove_tree_as_a_non_root_grader(tmp_path: Path) -> None:
    """In a user namespace as uid 65534 (no capability over the host's files), a mode-000 directory defeats
    ``shutil.rmtree`` but not :func:`remove_tree`."""
    argv = ["unshare", "--user", "--map-user=65534", sys.executable, "-c", _AS_NOBODY]
    run = subprocess.run([*argv, str(tmp_path / "a"), str(tmp_path / "b")], capture_output=True, text=True)
    if run.returncode != 0 and "unshare" in run.stderr:
        pytest.skip(f"no user namespace: {run.stderr.strip()}")
    assert run.stdout.split() == ["65534", "True", "[]", "False"], run.stderr
    (tmp_path / "a" / "locked").chmod(0o755)


@pytest.mark.parametrize(
    "path", ["ministats/git~1/x.py", "ministats/a\\b.py", "ministats/bad\udcffname.py", "ministats/x .py"]
)
def test_new_files_git_or_python_cannot_name_are_dropped(path: str) -> None:
    assert path_problem(path, tracked=False, base_dirs={"ministats"}, test_paths=()) != ""
    assert path_problem("ministats/_helper.py", tracked=False, base_dirs={"ministats"}, test_paths=()) == ""


def test_remove_tree_never_raises_on_a_file(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_text("x")
    assert remove_tree(target) != []  # reported, not raised
    os.unlink(target)
