"""One grading placement for feature-deletion and swebench-lite: one settings table, one way to run in a runtime."""

from __future__ import annotations

import asyncio

import pytest
from feature_deletion.taskset import FeatureDeletionTaskConfig
from swebench_lite.taskset import SweTaskConfig
from verifiers.v1.runtimes import provision_runtime
from verifiers.v1.runtimes.subprocess import SubprocessConfig

from crf_prime import placement
from crf_prime.errors import InfraError
from crf_prime.placement import GRADING_LIMITS, GradingConfig, local_workdir, run_in_runtime

TABLE = {"limits": {"wall_seconds": 60}, "unsandboxed": True, "python": "/opt/py/bin/python"}


@pytest.mark.parametrize(("task_config", "memory_mb"), [(FeatureDeletionTaskConfig, 4096), (SweTaskConfig, 4096)])
def test_both_environments_take_the_same_grading_table(task_config, memory_mb: int) -> None:
    config = task_config.model_validate({"grading": TABLE})
    grading = config.grading
    assert isinstance(grading, GradingConfig)
    assert (grading.limits.wall_seconds, grading.unsandboxed, grading.python) == (60.0, True, "/opt/py/bin/python")
    assert grading.limits.memory_mb == memory_mb == GRADING_LIMITS.memory_mb  # keys not given keep the defaults
    with pytest.raises(ValueError, match="greater than 0"):
        task_config.model_validate({"grading": {"limits": {"wall_seconds": 0}}})
    for old in ("grade_timeout_s", "runtime_python", "unsandboxed", "test_timeout", "unsandboxed_tests", "python"):
        assert old not in task_config.model_fields


def test_environment_defaults_differ_only_in_the_wall_limit_log_room_and_tmp_size() -> None:
    featdel, swe = FeatureDeletionTaskConfig().grading, SweTaskConfig().grading
    assert featdel.limits == GRADING_LIMITS and featdel.limits.wall_seconds == 300.0
    assert swe.limits.wall_seconds == 1800.0 and swe.limits.output_bytes == 20_000_000
    # SWE runs the tests on a copy of the graded tree in the box's /tmp, so its /tmp holds a repository
    assert swe.limits.tmp_size_mb == 1024
    defaults = {"wall_seconds": 300.0, "output_bytes": 2_000_000, "tmp_size_mb": GRADING_LIMITS.tmp_size_mb}
    assert swe.limits.model_copy(update=defaults) == GRADING_LIMITS


async def test_run_in_a_real_runtime_passes_the_exit_and_stops_at_the_wall() -> None:
    async with provision_runtime(SubprocessConfig()) as runtime:
        assert local_workdir(runtime) == runtime.workdir
        done = await run_in_runtime(runtime, ["sh", "-c", "echo out; echo err >&2; exit 3"], {}, wall_seconds=30)
        assert (done.exit_code, done.stdout, done.stderr, done.timed_out) == (3, "out\n", "err\n", False)
        slow = await run_in_runtime(runtime, ["sleep", "30"], {}, wall_seconds=0.5)
        assert slow.timed_out and slow.exit_code == 124 and slow.duration_s < 20


class _HungRuntime:
    """A runtime whose ``run`` never returns (a dead container connection): the one thing a real runtime here won't do."""

    type = "docker"

    async def run(self, argv: list[str], env: dict[str, str]) -> object:
        await asyncio.Event().wait()

    async def write(self, path: str, data: bytes) -> None:
        raise AssertionError("not used")


async def test_a_runtime_that_never_returns_is_an_infra_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(placement, "RUNTIME_MARGIN_S", 0.2)
    with pytest.raises(InfraError, match=r"did not return within 0\.1s \+ 0\.2s"):
        await run_in_runtime(_HungRuntime(), ["true"], {}, wall_seconds=0.1)
    assert local_workdir(_HungRuntime()) is None
