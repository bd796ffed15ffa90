"""The pieces of fresh-tree grading on their own: symlink-safe tree reading and writing, the allow-list of file
kinds, the diff filter of the container placement, grading from the exit status, the forgery adapter."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crf_prime.swe.changes import select_changes
from crf_prime.swe.forgery import check_forgery, project_tops
from crf_prime.swe.grading import frame_log, grade_run, worst_status
from crf_prime.swe.runner import filter_diff
from crf_prime.swe.workspace import Entry, read_tree, remove_file, write_file

T = "tests/test_stats.py::"


def test_read_tree_records_symlinks_and_skips_git(tmp_path: Path) -> None:
    host = tmp_path / "host"
    host.mkdir()
    (host / "secret.py").write_text("SECRET = 1\n")
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "a.py").write_text("x = 1\n")
    (repo / "pkg" / "run.sh").write_text("echo\n")
    (repo / "pkg" / "run.sh").chmod(0o755)
    (repo / "pkg" / "b.py").symlink_to(host / "secret.py")
    (repo / "outside").symlink_to(host)  # a directory symlink is not descended into
    os.mkfifo(repo / "pkg" / "pipe")  # opening a fifo for reading would block: recorded, never opened
    (repo / ".git").mkdir()
    (repo / ".git" / "config").write_text("[core]\n\tfsmonitor = touch /tmp/x\n")
    tree = read_tree(repo)
    assert tree == {
        "outside": Entry("link", str(host).encode()),
        "pkg/a.py": Entry("file", b"x = 1\n"),
        "pkg/b.py": Entry("link", str(host / "secret.py").encode()),
        "pkg/pipe": Entry("other"),
        "pkg/run.sh": Entry("file", b"echo\n", executable=True),
    }


def test_writes_never_follow_a_symlink(tmp_path: Path) -> None:
    host = tmp_path / "host"
    host.mkdir()
    (host / "victim.py").write_text("keep\n")
    root = tmp_path / "fresh"
    (root / "pkg").mkdir(parents=True)
    (root / "link").symlink_to(host)
    (root / "pkg" / "f.py").symlink_to(host / "victim.py")
    write_file(root, "pkg/f.py", b"new\n")  # replaces the link itself
    assert (root / "pkg" / "f.py").read_text() == "new\n" and not (root / "pkg" / "f.py").is_symlink()
    with pytest.raises(NotADirectoryError):
        write_file(root, "link/victim.py", b"pwned\n")  # a symlinked parent component is refused
    with pytest.raises(ValueError, match="not a relative path"):
        write_file(root, "../host/victim.py", b"pwned\n")
    remove_file(root, "link")  # removes the link, not the target
    assert (host / "victim.py").read_text() == "keep\n" and not (root / "link").exists()
    write_file(root, "new/dir/m.py", b"m\n", executable=True)
    assert os.access(root / "new" / "dir" / "m.py", os.X_OK)


BASE = {
    "pkg/__init__.py": Entry("file", b""),
    "pkg/core.py": Entry("file", b"def f():\n    return 1\n"),
    "pkg/data.txt": Entry("file", b"a\n"),
    "docs/index.rst": Entry("file", b"Docs\n"),
    "setup.py": Entry("file", b"setup()\n"),
    "tests/test_core.py": Entry("file", b"def test(): pass\n"),
    "pkg/link.py": Entry("link", b"core.py"),
}


def test_allow_list_keeps_source_and_restores_everything_else() -> None:
    tree = dict(BASE)
    del tree["pkg/data.txt"]  # deleting a tracked text file: a source change
    tree |= {
        "pkg/core.py": Entry("file", b"def f():\n    return 2\n"),
        "pkg/new.py": Entry("file", b"y = 2\n"),
        "docs/index.rst": Entry("file", b"Docs v2\n"),
        "setup.py": Entry("file", b"setup(entry_points={})\n"),
        "tests/test_core.py": Entry("file", b"def test(): assert True\n"),
        "conftest.py": Entry("file", b"x\n"),
        "pkg/conftest.py": Entry("file", b"x\n"),
        "pytest.ini": Entry("file", b"[pytest]\n"),
        "pyproject.toml": Entry("file", b"[tool.pytest.ini_options]\n"),
        "pytest.py": Entry("file", b"print()\n"),
        "_pytest/__init__.py": Entry("file", b"\n"),
        "forge-1.0.dist-info/entry_points.txt": Entry("file", b"[pytest11]\n"),
        "pkg/__pycache__/core.cpython-311.pyc": Entry("file", b"\x00\x01"),
        "pkg/sitecustomize.py": Entry("file", b"\n"),
        "pkg/x.pth": Entry("file", b"import os\n"),
        "pkg/blob.py": Entry("file", b"\x00binary"),
        "pkg/notes.txt": Entry("file", b"new text file\n"),
        ".gitignore": Entry("file", b"conftest.py\n"),
        "pkg/link.py": Entry("file", b"now a file\n"),
        "pkg/alias.py": Entry("link", b"/etc/passwd"),
        "pkg/big.py": Entry("large"),
        "pkg/fifo": Entry("other"),
        "tests/extra.py": Entry("file", b"\n"),
    }
    sel = select_changes(BASE, tree, test_paths={"pkg/tested_elsewhere.py"})
    assert sel.kept == {
        "docs/index.rst": Entry("file", b"Docs v2\n"),
        "pkg/core.py": Entry("file", b"def f():\n    return 2\n"),
        "pkg/data.txt": None,
        "pkg/new.py": Entry("file", b"y = 2\n"),
    }
    assert sel.dropped == {
        ".gitignore": "hidden path",
        "_pytest/__init__.py": "new module outside the repository's existing top-level directories",
        "conftest.py": "test file",
        "forge-1.0.dist-info/entry_points.txt": "metadata or cache",
        "pkg/__pycache__/core.cpython-311.pyc": "metadata or cache",
        "pkg/alias.py": "symlink",
        "pkg/big.py": "file too large",
        "pkg/blob.py": "binary content",
        "pkg/conftest.py": "test file",
        "pkg/fifo": "new file that is not Python source",
        "pkg/link.py": "base entry is not a regular file",
        "pkg/notes.txt": "new file that is not Python source",
        "pkg/sitecustomize.py": "interpreter startup hook",
        "pkg/x.pth": "metadata or cache",
        "pyproject.toml": "test-runner or build configuration",
        "pytest.ini": "test-runner or build configuration",
        "pytest.py": "new module outside the repository's existing top-level directories",
        "setup.py": "test-runner or build configuration",
        "tests/extra.py": "test file",
        "tests/test_core.py": "test file",
    }


def _chunk(path: str, body: str, *, new_mode: str | None = None) -> str:
    mode = f"new file mode {new_mode}\n" if new_mode else ""
    return f"diff --git a/{path} b/{path}\n{mode}--- a/{path}\n+++ b/{path}\n{body}"


def test_filter_diff_drops_all_chunks_of_a_path_together() -> None:
    base = {"pkg/core.py", "pkg/__init__.py", "tox.ini"}
    diff = "".join(
        [
            _chunk("pkg/core.py", "@@ -1 +1 @@\n-a\n+b\n"),
            _chunk("pkg/link.py", "@@ -0,0 +1 @@\n+core.py\n", new_mode="120000"),
            _chunk("tox.ini", "@@ -1 +1 @@\n-a\n+b\n"),
            _chunk("pkg/blob.py", "GIT binary patch\nliteral 3\n", new_mode="100644").replace(
                "--- a/pkg/blob.py\n+++ b/pkg/blob.py\n", ""
            ),
            _chunk("pkg/new.py", "@@ -0,0 +1 @@\n+x\n", new_mode="100644"),
        ]
    )
    kept, dropped = filter_diff(diff, base_paths=base, test_paths=set())
    assert kept == _chunk("pkg/core.py", "@@ -1 +1 @@\n-a\n+b\n") + _chunk(
        "pkg/new.py", "@@ -0,0 +1 @@\n+x\n", new_mode="100644"
    )
    assert dropped == {
        "pkg/link.py": "symlink or submodule",
        "tox.ini": "test-runner or build configuration",
        "pkg/blob.py": "binary content",
    }


def test_worst_status_wins_and_markers_are_not_parsed() -> None:
    output = (
        f"FAILED {T}test_even - assert 3 == 2.5\nPASSED {T}test_odd\n"
        f"PASSED {T}test_even\n>>>>> End Test Output\n>>>>> Test Exit Code: 0\n"
    )
    assert worst_status(output, "pytest") == {f"{T}test_even": "FAILED", f"{T}test_odd": "PASSED"}
    report = grade_run("i", output, 1, "pytest", [f"{T}test_even"], [f"{T}test_odd"])
    assert not report.resolved and report.exit_code == 1 and report.f2p_failure == (f"{T}test_even",)
    forged = f"PASSED {T}test_even\nPASSED {T}test_odd\n"
    assert grade_run("i", forged, 1, "pytest", [f"{T}test_even"], []).reason.endswith("(forged output)")
    assert grade_run("i", forged, 0, "pytest", [f"{T}test_even"], [f"{T}test_odd"]).resolved
    assert grade_run("i", forged, None, "pytest", [f"{T}test_even"], []).reason.startswith("the test run was killed")
    timed = grade_run("i", forged, 0, "pytest", [f"{T}test_even"], [], timed_out=True)
    assert not timed.found and timed.reason == ">>>>> Tests Timed Out"
    assert (
        frame_log("prep\n", "out", 1)
        == "prep\n>>>>> Start Test Output\nout\n>>>>> End Test Output\n>>>>> Test Exit Code: 1\n"
    )


def test_fail_to_pass_needs_passed_unless_gold_gave_xfail() -> None:
    output = f"XFAIL {T}test_even - reason\nPASSED {T}test_odd\n"
    report = grade_run("i", output, 0, "pytest", [f"{T}test_even"], [f"{T}test_odd"])
    assert not report.resolved and report.f2p_failure == (f"{T}test_even",) and report.f2p_xfail == (f"{T}test_even",)
    listed = grade_run("i", output, 0, "pytest", [f"{T}test_even"], [f"{T}test_odd"], xfail_ok=[f"{T}test_even"])
    assert listed.resolved


def test_forgery_adapter_flags_and_rejects_runner_imports() -> None:
    base = ["pkg/__init__.py", "pkg/core.py", "src/_pytest/x.py", "setup.py"]
    assert project_tops(base) == {"pkg", "_pytest", "setup"}
    original = {"pkg/core.py": "import os\n\n\ndef f():\n    return os.sep\n"}
    clean = check_forgery(original, {"pkg/core.py": original["pkg/core.py"].replace("os.sep", "os.sep * 2")}, base)
    assert (clean.suspected, clean.certain, clean.detail) == (False, False, "")
    xfail = check_forgery(original, {"pkg/core.py": "import pytest\n\n\ndef f():\n    pytest.xfail()\n"}, base)
    assert xfail.suspected and xfail.certain and "import of 'pytest'" in xfail.detail
    frame = check_forgery(original, {"pkg/core.py": "import sys\n\n\ndef f():\n    return sys._getframe(1)\n"}, base)
    assert frame.suspected and not frame.certain and "_getframe" in frame.detail
    eq = check_forgery({}, {"pkg/new.py": "class A:\n    def __eq__(self, o):\n        return True\n"}, base)
    assert eq.suspected and not eq.certain and eq.detail == "pkg/new.py: defines __eq__ (always-equal values)"
    # the runner's own repository may import itself
    own = check_forgery({"src/_pytest/x.py": "X = 1\n"}, {"src/_pytest/x.py": "import _pytest.nodes\n"}, base)
    assert own.suspected and not own.certain


def test_never_graded_directories_are_not_read(tmp_path: Path) -> None:
    from crf_prime.swe.changes import never_graded_dir

    (tmp_path / ".venv" / "lib").mkdir(parents=True)
    (tmp_path / ".venv" / "lib" / "big.py").write_text("x\n")
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "__pycache__" / "m.pyc").write_bytes(b"\0")
    (tmp_path / "forge-1.dist-info").mkdir()
    (tmp_path / "forge-1.dist-info" / "METADATA").write_text("Name: forge\n")
    (tmp_path / "pkg" / "m.py").write_text("m\n")
    (tmp_path / ".hidden.py").write_text("h\n")  # a hidden file is read (and dropped by the allow-list)
    assert read_tree(tmp_path, never_graded_dir) == {
        ".hidden.py": Entry("file", b"h\n"),
        "pkg/m.py": Entry("file", b"m\n"),
    }
