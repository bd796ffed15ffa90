"""The shell script that runs an instance's tests and frames its output for grading.

Same shape as the swebench harness's ``eval.sh`` test section: activate the image's conda env, run the repo's
``eval_commands`` and re-``install`` step, echo ``>>>>> Start Test Output``, run ``test_cmd`` + directives, record
the command's own exit status, echo ``>>>>> End Test Output`` and then ``>>>>> Test Exit Code: N`` (after the end
marker, outside the parsed region, as in swebench 5.x ``record_test_exit_code``). Resetting test files and
applying the test patch are done by the caller with separate git commands so a failure there is an
infrastructure error, not a test result.
"""

from __future__ import annotations

import shlex

from crf_prime.swe.directives import get_test_directives
from crf_prime.swe.grading import END_TEST_OUTPUT, START_TEST_OUTPUT, TEST_EXIT_CODE
from crf_prime.swe.instance import SweInstance
from crf_prime.swe.specs import RepoSpec, repo_spec

CONDA_ACTIVATE = "source /opt/miniconda3/bin/activate"


def build_test_command(instance: SweInstance, spec: RepoSpec | None = None) -> str:
    """``test_cmd`` followed by the instance's test directives."""
    spec = spec or repo_spec(instance)
    directives = [shlex.quote(d) for d in get_test_directives(instance.test_patch, instance.repo)]
    return " ".join([spec.test_cmd, *directives])


def eval_script(instance: SweInstance, *, repo_dir: str, reinstall: bool = True, spec: RepoSpec | None = None) -> str:
    """Bash script (run with stderr merged into stdout) whose output :func:`crf_prime.swe.grading.read_log` grades."""
    spec = spec or repo_spec(instance)
    lines = ["#!/bin/bash", "set -uo pipefail", "exec 2>&1", f"cd {shlex.quote(repo_dir)}"]
    if spec.conda_env is not None:
        lines += [CONDA_ACTIVATE, f"conda activate {shlex.quote(spec.conda_env)}"]
    lines += list(spec.eval_commands)
    if reinstall and spec.install:
        lines.append(spec.install)
    lines += [
        f"echo {shlex.quote(START_TEST_OUTPUT)}",
        build_test_command(instance, spec),
        "CRF_SWE_TEST_EXIT_CODE=$?",
        f"echo {shlex.quote(END_TEST_OUTPUT)}",
        f'echo "{TEST_EXIT_CODE}: $CRF_SWE_TEST_EXIT_CODE"',
    ]
    return "\n".join(lines) + "\n"
