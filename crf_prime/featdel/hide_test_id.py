"""pytest plugin for grading runs: neither the process environment nor the test's temporary directory names the test
being run.

pytest writes the running test's node id into ``os.environ["PYTEST_CURRENT_TEST"]`` around every test phase
(documented in pytest's "Writing plugins" reference). Code under test can read the environment through functions
an allow-list must keep (``os.path.expandvars("$PYTEST_CURRENT_TEST")``, ``os.getenv``), and a test id spells
which answer that test expects. Rather than forbidding readers one by one, this plugin, loaded with ``-p`` before
any project code, makes the environment mapping drop that one key: pytest's writes never happen, so no reader (any
Python function, ``putenv``'s C environment, a child process) can see it. Likewise ``tmp_path``, which pytest names
after the test (``pytest-current/test_is_420``, probed with ``os.path.exists``), gets a random name here. Standard
library and pytest only: it is copied next to the grading tree and imported by the test environment's interpreter
(``crf_prime.featdel.runner``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

VARIABLE = "PYTEST_CURRENT_TEST"
MODULE = "crf_hide_test_id"
"""Name the plugin is installed and loaded under (``-p crf_hide_test_id``)."""


class _Environ(type(os.environ)):  # type: ignore[misc]  # subclasses os.environ's own class (os._Environ), which is private to name
    """``os.environ`` that never holds :data:`VARIABLE`: setting it does nothing, removing it is never an error
    (pytest pops it after each test)."""

    def __setitem__(self, key, value):
        if key != VARIABLE:
            super().__setitem__(key, value)

    def __delitem__(self, key):
        if key != VARIABLE:
            super().__delitem__(key)

    def pop(self, key, *default):
        if key == VARIABLE:
            return default[0] if default else None
        return super().pop(key, *default)


def install() -> None:
    """Drop the variable and make the one ``os.environ`` object (every earlier reference included) refuse it.
    Added code cannot undo this: ``os.environ`` itself is outside the code policy (``crf_prime.featdel.policy``)."""
    os.environ.pop(VARIABLE, None)
    os.unsetenv(VARIABLE)
    os.environ.__class__ = _Environ


def install_into(directory: Path) -> Path:
    """Copy this plugin into ``directory`` as ``crf_hide_test_id.py`` (put ``directory`` on the box's PYTHONPATH and
    pass ``-p crf_hide_test_id``); returns ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(__file__, directory / f"{MODULE}.py")
    return directory


if __name__ == MODULE:  # loaded by pytest in the box (never when the host imports crf_prime)
    import tempfile

    import pytest

    install()

    @pytest.fixture
    def tmp_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
        """The test's temporary directory under a random name: pytest's own fixture names it after the test
        (``pytest-current/test_is_420``), which code under test can probe with ``os.path.exists``."""
        return Path(tempfile.mkdtemp(prefix="t", dir=tmp_path_factory.getbasetemp()))
