"""The shell script that runs an instance's tests.

Same steps as the swebench harness's ``eval.sh`` test section: activate the image's conda env, run the repo's
``eval_commands`` and re-``install`` step, then ``test_cmd`` + directives. Unlike swebench, the script prints no
markers: the preparation steps write to stderr, the test command replaces the shell (``exec``) with its stderr
merged into stdout, so stdout is exactly the test output and the script's exit status is the test command's.
The grader frames the log itself (:func:`crf_prime.swe.grading.frame_log`), so nothing the tested code prints can
pass for a marker or an exit code. Resetting files and applying patches are separate grader steps, so a failure
there is an infrastructure error or an unapplied patch, never a test result.
"""

from __future__ import annotations

import shlex

from crf_prime.featdel.hide_test_id import MODULE as HIDE_TEST_ID_MODULE
from crf_prime.swe.directives import get_test_directives
from crf_prime.swe.instance import SweInstance
from crf_prime.swe.specs import RepoSpec, repo_spec

CONDA_ACTIVATE = "source /opt/miniconda3/bin/activate"
COPY_FAILED = 97
"""Exit status of the script when the graded tree could not be copied to the box's /tmp (tree too large)."""


def build_test_command(
    instance: SweInstance, spec: RepoSpec | None = None, *, junit_path: str | None = None, hide_test_id: bool = False
) -> str:
    """``test_cmd`` followed by the instance's test directives (and ``--junitxml=junit_path`` when given: pytest
    takes options after its positional arguments, and tox passes what follows ``--`` to pytest). ``hide_test_id``
    adds ``-p crf_hide_test_id``: pytest loads ``-p`` plugins while parsing its arguments, before any conftest or
    test module, wherever they stand on the line."""
    spec = spec or repo_spec(instance)
    directives = [shlex.quote(d) for d in get_test_directives(instance.test_patch, instance.repo)]
    report = [shlex.quote(f"--junitxml={junit_path}")] if junit_path is not None else []
    plugin = ["-p", HIDE_TEST_ID_MODULE] if hide_test_id else []
    return " ".join([spec.test_cmd, *directives, *report, *plugin])


def eval_script(
    instance: SweInstance,
    *,
    repo_dir: str,
    reinstall: bool = True,
    spec: RepoSpec | None = None,
    junit_path: str | None = None,
    copy_to: str | None = None,
    plugin_dir: str | None = None,
) -> str:
    """Bash script: preparation output on stderr, then the test command's output (stderr merged) on stdout.

    ``junit_path``: where pytest writes its report (outside the graded tree). ``copy_to``: the tests run on a copy
    of ``repo_dir`` made there (the box's size-capped private ``/tmp``), so what they write never reaches the host;
    a failed copy exits 97 (not a test status). ``plugin_dir``: a grader-owned directory holding
    ``crf_hide_test_id.py`` (:func:`crf_prime.featdel.hide_test_id.install_into`); it is put on ``PYTHONPATH`` and
    pytest loads the plugin, so the tested code never sees ``PYTEST_CURRENT_TEST`` (pytest runners only)."""
    spec = spec or repo_spec(instance)
    prepare = [f"cd {shlex.quote(repo_dir)}"]
    if copy_to is not None:
        prepare.append(f"cp -a . {shlex.quote(copy_to)} && cd {shlex.quote(copy_to)} || exit {COPY_FAILED}")
    if spec.conda_env is not None:
        prepare += [CONDA_ACTIVATE, f"conda activate {shlex.quote(spec.conda_env)}"]
    prepare += list(spec.eval_commands)
    if reinstall and spec.install:
        prepare.append(spec.install)
    hide = plugin_dir is not None and spec.junit
    if plugin_dir is not None and hide:
        prepare.append(f'export PYTHONPATH={shlex.quote(plugin_dir)}"${{PYTHONPATH:+:$PYTHONPATH}}"')
    lines = ["#!/bin/bash", "set -uo pipefail", "exec 3>&1 1>&2", *prepare, "exec 1>&3 3>&- 2>&1"]
    lines.append(f"exec {build_test_command(instance, spec, junit_path=junit_path, hide_test_id=hide)}")
    return "\n".join(lines) + "\n"
