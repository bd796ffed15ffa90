"""The test venv: built once per requirement set, with its bytecode written, so that no run in the box compiles it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

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
