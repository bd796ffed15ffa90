"""The test venv: built once per requirement set, with its bytecode written, so that no run in the box compiles it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from crf_prime.featdel import testenv
from crf_prime.featdel.testenv import default_spec, ensure_test_env


def _pytest_bytecode(venv: Path) -> Path:
    (init,) = venv.glob("lib/python3*/site-packages/pytest/__init__.py")
    return Path(importlib.util.cache_from_source(str(init)))


def test_the_venv_holds_its_bytecode_also_when_it_was_built_without(tmp_path: Path) -> None:
    env = ensure_test_env(default_spec(()), cache=tmp_path)
    pyc = _pytest_bytecode(env.venv)
    assert pyc.is_file() and (env.venv / ".bytecode").is_file()
    pyc.unlink()  # a venv cached before its bytecode was compiled
    (env.venv / ".bytecode").unlink()
    again = ensure_test_env(default_spec(()), cache=tmp_path)
    assert again.venv == env.venv and pyc.is_file()


def _fake_venv(root: Path, files: dict[str, str | Path]) -> Path:
    """A venv's layout: its interpreter and site-packages holding ``files`` (text, or a file to hard-link, as uv does
    from its cache)."""
    site = root / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    site.mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "bin" / "python").symlink_to(sys.executable)
    for name, content in files.items():
        if isinstance(content, Path):
            os.link(content, site / name)
        else:
            (site / name).write_text(content)
    return site


def _valid_for(pyc: Path, source: Path) -> bool:
    """Whether a timestamp-checked compiled file is current for ``source`` (what the import system checks)."""
    header = pyc.read_bytes()[:16]
    flags, mtime, size = (int.from_bytes(header[i : i + 4], "little") for i in (4, 8, 12))
    st = source.stat()
    return header[:4] == importlib.util.MAGIC_NUMBER and flags == 0 and (mtime, size) == (int(st.st_mtime), st.st_size)


def test_a_file_every_venv_links_is_compiled_once_for_all_of_them(tmp_path: Path) -> None:
    root = tmp_path / "venvs"
    a = _fake_venv(root / "a", {"shared.py": "def f():\n    return 1\n", "broken.py": "def (:\n"})
    testenv._compile(a.parents[2])
    b = _fake_venv(root / "b", {"shared.py": a / "shared.py", "own.py": "X = 2\n"})
    os.utime(a / "shared.py", ns=(1_000_000_000, 1_000_000_000))  # the linked copy's mtime is the same file's
    c = _fake_venv(root / "c", {"shared.py": (a / "shared.py").read_text()})  # the same text, another file
    testenv._compile(a.parents[2])  # a's compiled file is stale now: compiled again for the new mtime
    for site in (b, c):
        testenv._compile(site.parents[2])

    def pyc(site: Path, name: str) -> Path:
        return Path(importlib.util.cache_from_source(str(site / name)))

    assert not pyc(a, "broken.py").exists()  # left to fail at import, as before
    assert pyc(a, "shared.py").stat().st_ino == pyc(b, "shared.py").stat().st_ino  # one compile for both
    assert pyc(b, "shared.py").stat().st_ino != pyc(c, "shared.py").stat().st_ino  # same text, not the same file
    for site, name in ((a, "shared.py"), (b, "shared.py"), (b, "own.py"), (c, "shared.py")):
        assert _valid_for(pyc(site, name), site / name), (site, name)
    d = _fake_venv(root / "d", {"shared.py": b / "shared.py"})
    testenv._compile(d.parents[2])
    assert pyc(d, "shared.py").stat().st_ino == pyc(b, "shared.py").stat().st_ino  # linked, not compiled again
    # loaded from d, the code names d's file (the import system sets it), and nothing is compiled again
    probe = "import shared, sys; print(shared.f.__code__.co_filename)"
    out = subprocess.run(
        [str(d.parents[2] / "bin" / "python"), "-B", "-c", probe],
        env={**os.environ, "PYTHONPATH": str(d)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == str(d / "shared.py")
    assert pyc(d, "shared.py").stat().st_nlink == 4  # a's, b's, d's and the store's: one file
