"""pytest plugin for grading runs: neither the process environment nor the test's temporary directory names the test
being run, and the code under test cannot read the test files.

pytest writes the running test's node id into ``os.environ["PYTEST_CURRENT_TEST"]`` around every test phase
(documented in pytest's "Writing plugins" reference). Code under test can read the environment through functions
an allow-list must keep (``os.path.expandvars("$PYTEST_CURRENT_TEST")``, ``os.getenv``), and a test id spells
which answer that test expects. Rather than forbidding readers one by one, this plugin, loaded with ``-p`` before
any project code, makes the environment mapping drop that one key: pytest's writes never happen, so no reader (any
Python function, ``putenv``'s C environment, a child process) can see it. It does so again at the start of every test
phase, right before pytest's write, so nothing the code under test did to the mapping meanwhile catches it. Likewise ``tmp_path``, which pytest names
after the test (``pytest-current/test_is_420``, probed with ``os.path.exists``), gets a random name here.

The test modules hold the answers (their literals), and at grading they are in the tree: pytest reads them, and so
could ``open()`` in the code under test, which the code policy must allow. Where the grader names them
(:func:`guard_into`), an audit hook (``sys.addaudithook``: installed here, before any project code, and never
removable) refuses to open one of them while a frame of the project's own code (a file under the tree that is not a
guarded test file) is on the stack: pytest still collects the tests and reads their source for its reports, the
tests still open their own data, and the agent's code gets ``PermissionError`` at import and at call time alike.

Standard library and pytest only: it is copied next to the grading tree and imported by the test environment's
interpreter (``crf_prime.featdel.runner``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import types
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

VARIABLE = "PYTEST_CURRENT_TEST"
MODULE = "crf_hide_test_id"
"""Name the plugin is installed and loaded under (``-p crf_hide_test_id``)."""
LOOKUP_MODULE = "crf_lookup_guard"
"""Name the lookup guard (crf_prime/featdel/lookup_guard.py) is installed under beside the plugin."""
GUARD = "crf_guarded_files.json"
"""Beside the plugin: ``{"root": tree, "files": [paths under it]}``, the test files the code under test may not open."""


_ENVIRON = os.environ
"""The process's one environment mapping, as it was before any project code ran."""
_CLASS = type(os.environ)
_SETITEM, _DELITEM, _POP = _CLASS.__setitem__, _CLASS.__delitem__, _CLASS.pop
"""Its class's own methods, taken before any project code ran (the code under test may patch the class later)."""


def _set(self, key, value):
    if key != VARIABLE:
        _SETITEM(self, key, value)


def _delete(self, key):
    if key != VARIABLE:
        _DELITEM(self, key)


def _pop(self, key, *default):
    if key == VARIABLE:
        return default[0] if default else None
    return _POP(self, key, *default)


def install() -> None:
    """Make ``os.environ`` the original mapping again, without :data:`VARIABLE`, of a new class that never holds it:
    setting it does nothing, removing it is never an error (pytest pops it after each test).

    Called at load and again at the start of every test phase, right before pytest writes the variable: the code
    under test may have rebound ``os.environ``, swapped its ``__class__`` or patched a class's methods since, and
    none of that survives to the write (only pytest's own code runs between this call and it)."""
    os.environ = _ENVIRON  # noqa: B003  # rebinds the module attribute back to the one mapping, on purpose
    with contextlib.suppress(KeyError):
        _DELITEM(_ENVIRON, VARIABLE)
    os.unsetenv(VARIABLE)
    _ENVIRON.__class__ = type("_Environ", (_CLASS,), {"__setitem__": _set, "__delitem__": _delete, "pop": _pop})


def guard(root: str, files: Collection[str]) -> None:
    """Refuse to open any of ``files`` (paths relative to ``root``) while a frame of a file under ``root`` that is
    not one of them is on the stack (the project's code, the agent's included). Process-wide and permanent."""
    top = os.path.realpath(root)
    guarded = frozenset(os.path.join(top, f) for f in files)
    project: dict[str, bool] = {}
    realpath, fspath, fsdecode, getframe = os.path.realpath, os.fspath, os.fsdecode, sys._getframe

    def ours(filename: str) -> bool:
        known = project.get(filename)
        if known is None:  # "<frozen ...>", "<string>": no file of the tree
            path = realpath(filename) if os.path.isabs(filename) else ""
            known = project[filename] = path.startswith(top + os.sep) and path not in guarded
        return known

    def hook(event: str, args: tuple) -> None:
        if event != "open" or isinstance(args[0], int) or args[0] is None:
            return
        try:
            path = realpath(fsdecode(fspath(args[0])))
        except (TypeError, ValueError):
            return
        if path not in guarded:
            return
        frame: types.FrameType | None = getframe(1)
        while frame is not None:
            if ours(frame.f_code.co_filename):
                raise PermissionError(f"{path}: the code under test may not read the test files")
            frame = frame.f_back

    sys.addaudithook(hook)


def guard_settings(root: str, files: Collection[str]) -> str:
    """The guard's settings file (:data:`GUARD`, beside the plugin): ``root`` as the test process sees the tree."""
    return json.dumps({"root": root, "files": sorted(files)})


def guard_into(directory: Path, root: Path, files: Collection[str]) -> None:
    """Write the guard's settings beside the plugin in ``directory`` (see :func:`install_into`)."""
    (directory / GUARD).write_text(guard_settings(str(root.resolve()), files))


def install_into(directory: Path) -> Path:
    """Copy this plugin into ``directory`` as ``crf_hide_test_id.py`` (put ``directory`` on the box's PYTHONPATH and
    pass ``-p crf_hide_test_id``), with the lookup guard beside it (installed only where :func:`lookups_into` wrote
    its settings); returns ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(__file__, directory / f"{MODULE}.py")
    shutil.copyfile(Path(__file__).with_name("lookup_guard.py"), directory / f"{LOOKUP_MODULE}.py")
    return directory


def lookups_into(directory: Path, root: Path, sites: Mapping[str, Sequence[int]]) -> None:
    """Have the plugin in ``directory`` install the lookup guard (crf_prime/featdel/lookup_guard.py) for the
    project's computed lookups at ``sites`` (paths under ``root`` -> lines)."""
    from crf_prime.featdel import lookup_guard  # host only

    top = root.resolve()
    config = lookup_guard.settings({str(top / rel): lines for rel, lines in sites.items()})
    (directory / lookup_guard.RULES).write_text(json.dumps(config))


if __name__ == MODULE:  # loaded by pytest in the box (never when the host imports crf_prime)
    import tempfile

    import pytest

    install()
    _here = os.path.dirname(os.path.abspath(__file__))
    if os.path.exists(os.path.join(_here, f"{LOOKUP_MODULE}.py")):
        import crf_lookup_guard  # type: ignore[import-not-found]  # beside this file; installs only with its settings

        crf_lookup_guard.install_from(_here)
    _settings = os.path.join(_here, GUARD)
    if os.path.exists(_settings):
        with open(_settings) as _fh:
            _guard = json.load(_fh)
        guard(_guard["root"], _guard["files"])

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(item: pytest.Item) -> None:
        install()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(item: pytest.Item) -> None:
        install()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(item: pytest.Item) -> None:
        install()

    @pytest.fixture
    def tmp_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
        """The test's temporary directory under a random name: pytest's own fixture names it after the test
        (``pytest-current/test_is_420``), which code under test can probe with ``os.path.exists``."""
        return Path(tempfile.mkdtemp(prefix="t", dir=tmp_path_factory.getbasetemp()))
