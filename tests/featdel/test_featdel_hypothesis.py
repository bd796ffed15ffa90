"""Hypothesis in Feature Deletion runs (crf_prime/featdel/hypothesis_profile.py): every run, cold or warm, in a real
box on a real venv with Hypothesis from PyPI, draws the same few examples and sets no deadline."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from crf_prime.featdel.hypothesis_profile import MAX_EXAMPLES
from crf_prime.featdel.pytest_server import PytestServer
from crf_prime.featdel.runner import PytestRun, run_pytest
from crf_prime.featdel.testenv import TestEnv, default_spec, ensure_test_env
from crf_prime.sandbox import Sandbox, SandboxConfig, SandboxLimits

HYPOTHESIS = "hypothesis==6.170.17"
LIMITS = SandboxLimits(wall_seconds=120, memory_mb=1024, pids=64, output_bytes=200_000, tmp_size_mb=16)

TESTS = """
import json, time
from hypothesis import given, settings, strategies as st

DRAWN = []

@given(st.integers())
def test_draws(n):
    DRAWN.append(n)

def test_profile():
    d = settings.default
    print("PROFILE " + json.dumps({
        "drawn": DRAWN, "max_examples": d.max_examples, "derandomize": d.derandomize,
        "deadline": None if d.deadline is None else d.deadline.total_seconds(), "database": d.database is None,
    }))

@given(st.just(0))  # one example: nothing to shrink when it fails
def test_slow(n):
    time.sleep(0.3)  # past Hypothesis' default deadline of 200 ms
"""


@pytest.fixture(scope="module")
def env() -> TestEnv:
    return ensure_test_env(default_spec((HYPOTHESIS,)))


def _tree(dest: Path) -> Path:
    (dest / "repo" / "tests").mkdir(parents=True)
    (dest / "repo" / "tests" / "test_props.py").write_text(TESTS)
    return dest


def _profile(run: PytestRun) -> dict:
    assert run.status_of("tests/test_props.py::test_profile")[0] == "passed", run.tail(2000)
    return json.loads(run.stdout.split("PROFILE ", 1)[1].splitlines()[0])


def test_every_run_draws_the_same_examples_without_a_deadline(env: TestEnv, tmp_path: Path) -> None:
    """Two cold runs and a warm one: the profile holds (``MAX_EXAMPLES``, derandomized, no deadline, no database),
    the drawn examples are the same list in each, and a test slower per example than Hypothesis' default deadline
    passes. Without the plugin (the venv's own pytest, no ``-p crf_hypothesis``, no CI variable in the environment)
    the same slow test fails on the deadline and the draws change with the run."""
    sandbox = Sandbox(SandboxConfig(limits=LIMITS))
    runs = [run_pytest(sandbox, env, _tree(tmp_path / f"cold{i}"), pythonpath=[], pytest_args=["-s"]) for i in range(2)]
    with PytestServer(sandbox, env) as warm:
        tree = _tree(warm.run_dir("w-"))
        runs.append(run_pytest(sandbox, env, tree, pythonpath=[], pytest_args=["-s"], read_only_tree=True, warm=warm))
    profiles = [_profile(run) for run in runs]
    assert profiles[0] | {"drawn": []} == {
        "drawn": [],
        "max_examples": MAX_EXAMPLES,
        "derandomize": True,
        "deadline": None,
        "database": True,
    }
    assert 0 < len(profiles[0]["drawn"]) <= MAX_EXAMPLES
    assert profiles[1] == profiles[0] and profiles[2] == profiles[0]
    assert all(run.status_of("tests/test_props.py::test_slow")[0] == "passed" for run in runs)

    plain = []
    bare = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}  # no CI variable: Hypothesis would load its "ci" profile
    for i in range(2):
        repo = _tree(tmp_path / f"plain{i}") / "repo"
        out = subprocess.run(
            [str(env.python), "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "tests"],
            cwd=repo,
            env=bare,
            capture_output=True,
            text=True,
            check=False,
        )
        assert "1 failed, 2 passed" in out.stdout and "DeadlineExceeded" in out.stdout, out.stdout[-2000:]
        plain.append(json.loads(out.stdout.split("PROFILE ", 1)[1].splitlines()[0]))
    assert plain[0]["max_examples"] == 100 and plain[0]["deadline"] == 0.2 and not plain[0]["derandomize"]
    assert plain[0]["drawn"] != plain[1]["drawn"]
