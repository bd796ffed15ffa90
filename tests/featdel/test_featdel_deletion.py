"""AST body deletion, gold patches, junit node-id mapping, tree stripping (no sandbox needed)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crf_prime.featdel.deletion import (
    PatchError,
    apply_unified_diff,
    delete_bodies,
    iter_functions,
    unified_diff,
)
from crf_prime.featdel.runner import junit_key, parse_junit
from crf_prime.featdel.source import is_test_path, protected_paths, source_files, strip_tree
from crf_prime.featdel.testenv import system_site_dirs, visible_copies

SOURCE = '''\
"""Module doc."""
import functools


@functools.lru_cache(maxsize=None)
def fib(n: int, *, memo: dict | None = None) -> int:
    """Fibonacci — naïve ✓."""
    # how it works: recursion
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)


def one(x): return x + 1


class Box:
    """A box."""

    def __init__(self, v):
        self.v = v

    @property
    def double(self):
        """Twice."""; return self.v * 2

    async def fetch(self, k=lambda q: {"a": q}):  # trailing comment on the header
        out = await k(self.v)
        return out

    def gen(self):
        for i in range(3):
            yield i

    def stub(self):
        raise NotImplementedError

    def _private(self):
        return 1
'''


def _fn(tree: ast.Module, qual: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    node: ast.AST = tree
    for part in qual.split("."):
        node = next(c for c in ast.iter_child_nodes(node) if getattr(c, "name", None) == part)
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    return node


@pytest.mark.parametrize("qual", ["fib", "one", "Box.double", "Box.fetch", "Box.gen"])
def test_delete_keeps_header_decorators_docstring(qual: str) -> None:
    out = delete_bodies(SOURCE, [qual])
    before, after = ast.parse(SOURCE), ast.parse(out)
    f0, f1 = _fn(before, qual), _fn(after, qual)
    assert ast.dump(f0.args) == ast.dump(f1.args)
    assert [ast.dump(d) for d in f0.decorator_list] == [ast.dump(d) for d in f1.decorator_list]
    assert ast.get_docstring(f0, clean=False) == ast.get_docstring(f1, clean=False)
    body = f1.body[1:] if ast.get_docstring(f1) is not None else f1.body
    assert [ast.dump(s) for s in body] == ["Raise(exc=Name(id='NotImplementedError', ctx=Load()))"]
    # everything before the def line is byte-identical, and so is every other function
    start = f0.lineno - 1 - len(f0.decorator_list)
    assert out.splitlines()[: f0.lineno] == SOURCE.splitlines()[: f0.lineno] or start >= 0
    for other in ("fib", "one", "Box.double", "Box.fetch", "Box.gen", "Box.__init__"):
        if other != qual:
            assert ast.dump(_fn(before, other)) == ast.dump(_fn(after, other))


def test_delete_removes_comments_between_docstring_and_body() -> None:
    out = delete_bodies(SOURCE, ["fib"])
    assert "how it works" not in out
    assert '    """Fibonacci — naïve ✓."""\n    raise NotImplementedError\n' in out
    assert "def one(x): raise NotImplementedError" in delete_bodies(SOURCE, ["one"])
    assert '"""Twice."""; raise NotImplementedError' in delete_bodies(SOURCE, ["Box.double"])


def test_gold_patch_round_trips_and_rejects_wrong_base() -> None:
    broken = delete_bodies(SOURCE, ["fib", "Box.fetch"])
    patch = unified_diff("pkg/mod.py", broken, SOURCE)
    assert patch.startswith("--- a/pkg/mod.py\n+++ b/pkg/mod.py\n")
    assert apply_unified_diff({"pkg/mod.py": broken}, patch) == {"pkg/mod.py": SOURCE}
    with pytest.raises(PatchError):
        apply_unified_diff({"pkg/mod.py": SOURCE}, patch)


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs GNU patch")
def test_gold_patch_applies_with_gnu_patch(tmp_path: Path) -> None:
    broken = delete_bodies(SOURCE, ["Box.gen", "one"])
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(broken)
    patch = unified_diff("pkg/mod.py", broken, SOURCE)
    subprocess.run(["patch", "-p1", "--batch"], input=patch, text=True, cwd=tmp_path, check=True, capture_output=True)
    assert (tmp_path / "pkg" / "mod.py").read_text() == SOURCE


def test_iter_functions_finds_real_bodies_only() -> None:
    found = {f.qualname: f for f in iter_functions("m.py", SOURCE)}
    assert set(found) == {"fib", "one", "Box.__init__", "Box.double", "Box.fetch", "Box.gen", "Box._private"}
    assert found["fib"].public and not found["Box._private"].public and not found["Box.__init__"].public
    assert found["fib"].statements == 3  # if (with its return), return
    assert found["Box.fetch"].class_name == "Box"
    assert "fib" in found["fib"].calls


def test_junit_key_matches_pytest(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_k.py").write_text(
        "import pytest\n\nclass TestA:\n    def test_m(self):\n        assert 1 == 2, 'boom'\n\n"
        "@pytest.mark.parametrize('x', ['a b', 1])\ndef test_p(x):\n    pass\n"
    )
    junit = tmp_path / "j.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", "tests"],
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )
    outcomes = parse_junit(junit.read_text())
    assert outcomes[junit_key("tests/test_k.py::TestA::test_m")][0] == "failed"
    assert "boom" in outcomes[junit_key("tests/test_k.py::TestA::test_m")][1]
    assert outcomes[junit_key("tests/test_k.py::test_p[a b]")] == ("passed", "")
    assert outcomes[junit_key("tests/test_k.py::test_p[1]")] == ("passed", "")
    assert len(outcomes) == 3


def test_strip_tree_removes_leak_surface(tmp_path: Path) -> None:
    leaks = [
        "pkg/__pycache__/mod.cpython-311.pyc",
        "pkg/mod.pyc",
        ".git/HEAD",
        ".mypy_cache/3.11/cache.db",
        ".pytest_cache/v/x",
        ".ruff_cache/x",
        "pkg.egg-info/SOURCES.txt",
        "build/lib/pkg/mod.py",
        "dist/pkg-1.0.tar.gz",
        ".coverage",
        "pkg/_speed.so",
    ]
    keep = ["pkg/__init__.py", "pkg/mod.py", "pkg/build/__init__.py", "tests/test_mod.py", "setup.cfg"]
    for rel in leaks + keep:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    strip_tree(tmp_path)
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert left == sorted(keep)
    assert source_files(tmp_path, ("pkg",)) == ("pkg/__init__.py", "pkg/build/__init__.py", "pkg/mod.py")
    assert protected_paths(tmp_path) == ("setup.cfg", "tests/test_mod.py")
    assert is_test_path("pkg/tests/data.json") and not is_test_path("pkg/testsuite.py")


def test_visible_installed_copies_are_found(tmp_path: Path) -> None:
    site = tmp_path / "dist-packages"
    (site / "minilib").mkdir(parents=True)
    (site / "helper.py").write_text("x = 1\n")
    assert visible_copies(("minilib", "helper", "other"), [site]) == [site / "minilib", site / "helper.py"]
    assert visible_copies(("other",), [site]) == []
    assert (
        Path("/usr/lib/python3/dist-packages") in system_site_dirs()
        or not Path("/usr/lib/python3/dist-packages").is_dir()
    )
