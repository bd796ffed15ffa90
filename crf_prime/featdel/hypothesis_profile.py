"""pytest plugin for every Feature Deletion run: Hypothesis tests draw the same few examples in every run.

A property test (``@given``) draws 100 random examples per run by default, fails an example that runs past 200 ms,
and keeps failing examples in a database on disk. In a grading run each of these hurts the reward's meaning or its
cost: an honest solution could be failed on an example gold was never run on, or for being slower than gold on a
loaded machine, and a mutant's target tests ran 5 s a run (textdistance on the slow 2-core box) where a plain
test's take tenths. Loaded with ``-p crf_hypothesis`` before any project code, this plugin makes the default
profile ``crf-prime``: ``derandomize`` (the examples follow from the test alone: gold's baseline, gold's grading and
the agent's see the same ones), no ``deadline``, no ``database``, and :data:`MAX_EXAMPLES` examples. A test's own
``@settings`` still wins for what it sets, and so does a profile the project loads itself.

Standard library, pytest and (where installed) Hypothesis only: it is copied next to the grading tree and imported by
the test environment's interpreter (``crf_prime.featdel.runner``). Where Hypothesis is not installed it does nothing.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

MODULE = "crf_hypothesis"
"""Name the plugin is installed and loaded under (``-p crf_hypothesis``)."""
PROFILE = "crf-prime"
MAX_EXAMPLES = 20
"""Examples per property test (Hypothesis' default: 100). The replay of recorded calls carries the behaviour check;
the grader's measured mutation rate says whether the tests' share still holds."""


def install_into(directory: Path) -> None:
    """Copy this plugin into ``directory`` as ``crf_hypothesis.py`` (``directory`` on the box's PYTHONPATH)."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(__file__, directory / f"{MODULE}.py")


def load() -> bool:
    """Register and load the profile where Hypothesis is installed; whether it was."""
    if importlib.util.find_spec("hypothesis") is None:
        return False
    from hypothesis import settings  # type: ignore[import-not-found]  # in the test venv, not crf-prime's

    settings.register_profile(PROFILE, derandomize=True, deadline=None, database=None, max_examples=MAX_EXAMPLES)
    settings.load_profile(PROFILE)
    return True


if __name__ == MODULE:  # loaded by pytest in the box (never when the host imports crf_prime)
    load()
