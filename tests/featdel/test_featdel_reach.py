"""The box hides every host directory of installed distributions, so a package installed on the host can be a
Feature Deletion source: the leak check runs in the box and finds no copy; the deleted code cannot be read back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from corpus_support import TESTS, project

from crf_prime.featdel.generate import GenerateConfig, generate
from crf_prime.featdel.grader import grade_changes
from crf_prime.featdel.testenv import ensure_test_env, visible_copies
from crf_prime.placement import GradingSandbox
from crf_prime.sandbox import Sandbox, SandboxConfig
from crf_prime.sandbox.bwrap import distribution_dirs

pytestmark = pytest.mark.bwrap

# an installed package of the host's base interpreter that the featdel test venv does not hold (it has only
# pytest, coverage and their dependencies); pip is in nearly every base interpreter
HOST_PACKAGE = "pip"


def _installed() -> Path:
    for d in distribution_dirs():
        if (d / HOST_PACKAGE / "__init__.py").is_file():
            return d
    pytest.skip(f"the host's base interpreter has no {HOST_PACKAGE} package in a site-packages directory")


def test_box_hides_installed_distributions(tmp_path: Path) -> None:
    site = _installed()
    base_python = Path(sys.base_prefix) / "bin" / "python3"
    code = f"import {HOST_PACKAGE}; print({HOST_PACKAGE}.__file__)"
    host = subprocess.run([str(base_python), "-c", code], capture_output=True, text=True, check=True)
    assert host.stdout.startswith(str(site))  # the host interpreter imports it from there

    sandbox = Sandbox(GradingSandbox())
    script = f'ls -A "{site}" | wc -l; cat "{site}/{HOST_PACKAGE}/__init__.py" >/dev/null 2>&1 || echo unreadable'
    seen = sandbox.run(["/bin/sh", "-c", script], workdir=tmp_path)
    assert seen.stdout.split() == ["0", "unreadable"]
    boxed = sandbox.run([str(base_python), "-c", code], workdir=tmp_path)
    assert boxed.exit_code == 1 and f"No module named '{HOST_PACKAGE}'" in boxed.stderr
    # the standard library stays
    assert sandbox.run([str(base_python), "-c", "import json, sqlite3"], workdir=tmp_path).exit_code == 0

    # the leak check: on the host the copy is there, in the box it is not
    assert visible_copies((HOST_PACKAGE,), [site]) == [site / HOST_PACKAGE]
    assert visible_copies((HOST_PACKAGE,), [site], sandbox=sandbox) == []
    assert visible_copies((HOST_PACKAGE,), [site], sandbox=Sandbox(SandboxConfig(unsandboxed=True))) == [
        site / HOST_PACKAGE
    ]


@pytest.mark.slow
def test_a_package_installed_on_the_host_is_a_source(tmp_path: Path) -> None:
    _installed()
    src = project(tmp_path / HOST_PACKAGE, HOST_PACKAGE, tests=TESTS)
    out = tmp_path / "out"
    tasks, summary = generate(GenerateConfig(source=str(src), out=out, max_tasks=2, workers=1))
    assert summary.valid == len(tasks) == 2
    env = ensure_test_env(tasks[0].test_env)
    # the deleted code is nowhere in the box: the snapshot as given fails its target tests
    graded = grade_changes(tasks[0], out, {}, sandbox=Sandbox(GradingSandbox()), env=env)
    assert graded.score == 0.0 and graded.failed
