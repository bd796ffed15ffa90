"""The swebench-lite taskset end to end on the mini SWE-bench fixture: real git, verifiers' subprocess runtime,
tests in crf-prime's bubblewrap sandbox, swebench grading, hints, and the real ``vf-validate`` CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import verifiers.v1 as vf
from swebench_lite import SweData, SweTask, SweTaskConfig, SweTaskset, SweTasksetConfig
from verifiers.v1.runtimes import provision_runtime

from crf_prime.swe.dataset import DatasetNotFoundError
from crf_prime.swe.fixture import FAIL_TO_PASS, INSTANCE_ID, build_mini_swebench
from crf_prime.swe.runner import SweInfraError

pytestmark = pytest.mark.bwrap

FIXED_MEDIAN = """

def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
"""


@pytest.fixture
def mini(tmp_path: Path) -> Path:
    build_mini_swebench(tmp_path)
    return tmp_path


def _taskset(mini: Path, **task: object) -> SweTaskset:
    config = SweTasksetConfig(
        id="swebench-lite",
        dataset=str(mini / "instances.jsonl"),
        repos_dir=mini / "repos",
        include_hints_text=True,
        task=SweTaskConfig(**task),
    )
    return SweTaskset(config)


def _trace(task: SweTask) -> vf.Trace:
    return vf.Trace(
        agent=vf.AgentInfo(config=vf.AgentConfig()),
        task=vf.TraceTask(type="SweTask", data=task.data, key=task.key),
        nodes=[
            vf.MessageNode(parent=None, message=vf.UserMessage(content=task.data.prompt_text), sampled=False),
        ],
    )


@pytest.fixture
async def runtime() -> AsyncIterator[vf.Runtime]:
    async with provision_runtime(vf.SubprocessConfig()) as rt:
        yield rt


def _workdir(rt: vf.Runtime) -> Path:
    return Path(rt.workdir)  # type: ignore[attr-defined]


def test_taskset_rows(mini: Path) -> None:
    (task,) = list(_taskset(mini))
    assert task.key == INSTANCE_ID and task.data.image is None and task.data.workdir is None
    assert task.data.mirror == str((mini / "repos" / "crf-prime__mini-stats").resolve())
    assert task.data.prompt_text.startswith("median() is wrong for lists with an even number of elements")
    assert "Hints (discussion before the fix):\nThe odd-length case is right" in task.data.prompt_text
    image_task = SweTaskset(SweTasksetConfig(id="swebench-lite", dataset=str(mini / "instances.jsonl"))).load()[0]
    assert image_task.data.image == "swebench/sweb.eval.x86_64.crf-prime_1776_mini-stats-1:latest"
    assert image_task.data.workdir == "/testbed" and image_task.data.mirror is None
    assert image_task.data.idx == 0  # set by load() on every verifiers version
    assert "at /testbed" in (image_task.data.system_prompt or "")
    templated = SweTasksetConfig(
        id="swebench-lite", dataset=str(mini / "instances.jsonl"), image_template="registry.local/{instance_id}:v1"
    )
    assert SweTaskset(templated).load()[0].data.image == "registry.local/crf-prime__mini-stats-1:v1"
    # the wire form round-trips, as the env server rebuilds tasks from it
    wire = json.loads(task.data.model_dump_json())
    assert SweData.model_validate(wire) == task.data


def test_missing_dataset_is_a_clear_error(tmp_path: Path) -> None:
    config = SweTasksetConfig(id="swebench-lite", dataset=str(tmp_path / "lite.jsonl"))
    with pytest.raises(DatasetNotFoundError, match=r"lite.jsonl' does not exist"):
        SweTaskset(config).load()


async def test_gold_resolves_and_untouched_repo_scores_zero_with_hint(mini: Path, runtime: vf.Runtime) -> None:
    (task,) = list(_taskset(mini))
    trace = _trace(task)
    await task.setup(trace, runtime)
    repo = _workdir(runtime)
    assert "return s[len(s) // 2]" in (repo / "ministats" / "stats.py").read_text()
    assert "test_median_even" not in (repo / "tests" / "test_stats.py").read_text()  # test patch withheld
    await task.score(trace, runtime)
    assert trace.reward == 0.0
    assert trace.metrics == {"f2p_pass": 0.0, "p2p_pass": 1.0, "suspected_forgery": 0.0}
    info = trace.info["swebench"]
    assert info["resolution"] == "RESOLVED_NO" and info["f2p_failure"] == FAIL_TO_PASS and info["model_patch"] == ""
    assert "tests/test_stats.py::test_median_even" in trace.info["hint"]
    assert "`assert median([4, 1, 3, 2]) == 2.5`" in trace.info["hint"]  # the test file's line, not the log's

    async with provision_runtime(vf.SubprocessConfig()) as fresh:
        await task.setup(_trace(task), fresh)
        assert await task.validate(fresh) is True


async def test_agent_fix_resolves(mini: Path, runtime: vf.Runtime) -> None:
    (task,) = list(_taskset(mini))
    trace = _trace(task)
    await task.setup(trace, runtime)
    stats = _workdir(runtime) / "ministats" / "stats.py"
    stats.write_text(stats.read_text().split("\n\ndef median")[0] + FIXED_MEDIAN)
    (_workdir(runtime) / "ministats" / "notes.py").write_text("NOTE = 1\n")  # new files are part of the change
    await task.score(trace, runtime)
    assert trace.reward == 1.0
    assert trace.metrics == {"f2p_pass": 1.0, "p2p_pass": 1.0, "suspected_forgery": 0.0}
    info = trace.info["swebench"]
    assert info["resolution"] == "RESOLVED_FULL" and info["test_exit_code"] == 0
    assert "diff --git a/ministats/stats.py" in info["model_patch"]
    assert "diff --git a/ministats/notes.py" in info["model_patch"]
    assert trace.info["hint"] == ""  # nothing failed, no error site in the trace


async def test_edited_tests_and_forging_conftest_do_not_count(mini: Path, runtime: vf.Runtime) -> None:
    (task,) = list(_taskset(mini))
    trace = _trace(task)
    await task.setup(trace, runtime)
    repo = _workdir(runtime)
    # the agent "fixes" the tests instead of the code, and adds a conftest.py that turns every failure into a pass
    (repo / "tests" / "test_stats.py").write_text("def test_median_even():\n    pass\n")
    (repo / "conftest.py").write_text(
        "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
        "    out = yield\n    out.get_result().outcome = 'passed'\n"
    )
    await task.score(trace, runtime)
    assert trace.reward == 0.0
    assert trace.info["swebench"]["f2p_failure"] == FAIL_TO_PASS
    assert trace.info["swebench"]["model_patch"] == ""


async def test_test_timeout_is_unresolved_not_an_error(mini: Path, runtime: vf.Runtime) -> None:
    (task,) = list(_taskset(mini, grading={"limits": {"wall_seconds": 3.0}}))
    trace = _trace(task)
    await task.setup(trace, runtime)
    stats = _workdir(runtime) / "ministats" / "stats.py"
    stats.write_text(stats.read_text() + "\n\ndef median(xs):\n    while True:\n        pass\n")
    await task.score(trace, runtime)
    assert trace.reward == 0.0
    assert trace.info["swebench"]["timed_out"] is True
    assert "Tests Timed Out" in trace.info["swebench"]["reason"]


async def test_image_placement_path_runs_tests_through_the_runtime(
    mini: Path, runtime: vf.Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The docker/prime code path (repo at ``workdir``, tests via ``runtime.run`` under ``timeout``), on a checkout."""
    (local,) = list(_taskset(mini))
    checkout = _workdir(runtime) / "testbed"
    subprocess.run(["git", "clone", "-q", local.data.mirror, str(checkout)], check=True)
    data = local.data.model_copy(update={"mirror": None, "workdir": str(checkout)})
    task = SweTask(data, SweTaskConfig())
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    if hasattr(runtime, "with_env"):  # verifiers 0.4.0: a view of the runtime with its own environment
        venv_path = runtime.with_env({"PATH": path})
    else:  # the commit prime-rl pins: subprocess runs inherit this process's environment
        monkeypatch.setenv("PATH", path)
        venv_path = runtime
    trace = _trace(task)
    await task.setup(trace, venv_path)
    assert await task.validate(venv_path) is True
    await task.setup(trace, venv_path)  # back to base_commit, gold gone
    await task.score(trace, venv_path)
    assert trace.reward == 0.0 and trace.metrics["p2p_pass"] == 1.0


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid", "GIT_COMMITTER_NAME": "t"}
    env |= {"GIT_COMMITTER_EMAIL": "t@t.invalid", "GIT_CONFIG_GLOBAL": os.devnull}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


async def test_setup_hides_the_upstream_fix_in_git_history(mini: Path, runtime: vf.Runtime) -> None:
    (task,) = list(_taskset(mini))
    mirror = Path(task.data.mirror or "")
    _git(mirror, "tag", "v0.1")  # a historical tag at base_commit: kept
    subprocess.run(["git", "-C", str(mirror), "apply"], input=task.data.instance.patch, text=True, check=True)
    _git(mirror, "commit", "-qam", "Fix median for even-length input")  # upstream fix on main, after base
    _git(mirror, "tag", "v0.2")
    await task.setup(_trace(task), runtime)
    repo = _workdir(runtime)
    assert _git(repo, "rev-parse", "HEAD").strip() == task.data.instance.base_commit
    assert _git(repo, "log", "--all", "--format=%s").splitlines() == ["ministats: mean and median"]
    assert _git(repo, "reflog").strip() == ""
    assert _git(repo, "tag").split() == ["v0.1"]
    assert await task.validate(runtime) is True  # grading still works on the scrubbed repo


async def test_infrastructure_failures_raise(mini: Path, runtime: vf.Runtime) -> None:
    (task,) = list(_taskset(mini))
    shutil.rmtree(mini / "repos")
    with pytest.raises(SweInfraError, match="no git repository for 'crf-prime/mini-stats'"):
        await task.setup(_trace(task), runtime)
    build_mini_swebench(mini / "other")  # a repo that does not hold this instance's base commit
    wrong = task.data.model_copy(update={"instance": task.data.instance.model_copy(update={"base_commit": "f" * 40})})
    wrong_task = SweTask(wrong.model_copy(update={"mirror": str(mini / "other" / "repos" / "crf-prime__mini-stats")}))
    with pytest.raises(SweInfraError, match=r"is not a git repo holding base_commit f{40}"):
        await wrong_task.setup(_trace(wrong_task), runtime)
