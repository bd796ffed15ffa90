"""The hack suite (``swe_hacks.py``): every attempt that fixes nothing scores 0 and nothing acts on the host.

Each runs through the environment's own path: ``SweTask.setup``, the agent's script in the crf-sandbox harness box
with the harness's default limits, ``SweTask.score``, on the offline mini fixture. The in-process forgeries that
isolation cannot close are flagged (``suspected_forgery``) and rejected with ``reject_suspected_forgery``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import verifiers.v1 as vf
from swe_hacks import ATTACKS, Attack, attempt
from swebench_lite import SweTask, SweTaskConfig, SweTaskset, SweTasksetConfig
from verifiers.v1.runtimes import provision_runtime

from crf_prime.swe.fixture import FAIL_TO_PASS, build_mini_swebench

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


@pytest.fixture
async def runtime() -> AsyncIterator[vf.Runtime]:
    async with provision_runtime(vf.SubprocessConfig()) as rt:
        yield rt


def _task(root: Path, **task: object) -> SweTask:
    build_mini_swebench(root)
    config = SweTasksetConfig(
        id="swebench-lite",
        dataset=str(root / "instances.jsonl"),
        repos_dir=root / "repos",
        task=SweTaskConfig(hints=False, **task),
    )
    (only,) = list(SweTaskset(config))
    return only


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
async def test_attempt_scores_zero_without_host_effect(attack: Attack, tmp_path: Path, runtime: vf.Runtime) -> None:
    task = _task(tmp_path / "fixture", reject_suspected_forgery=attack.remaining)
    out = await attempt(task, runtime, attack, tmp_path / "host")
    assert out.error == ""  # graded, not an infrastructure error
    assert out.reward == 0.0, out.info
    assert out.host_effect is False
    assert out.suspected == (1.0 if attack.suspected else 0.0), out.info["forgery"]
    if attack.remaining:  # the forgery does pass the test in-process; the policy's flag is what rejects it
        assert out.info["f2p_failure"] == [] and out.info["reason"].startswith("suspected forgery: ")
    else:
        assert out.info["f2p_failure"] == FAIL_TO_PASS


async def test_flagged_forgery_keeps_swebench_verdict_by_default(tmp_path: Path, runtime: vf.Runtime) -> None:
    """Without ``reject_suspected_forgery`` an always-equal value passes the test: flagged, documented, not closed."""
    (attack,) = [a for a in ATTACKS if a.name == "always_equal_return_value"]
    out = await attempt(_task(tmp_path / "fixture"), runtime, attack, tmp_path / "host")
    assert out.reward == 1.0 and out.suspected == 1.0
    assert "ministats/stats.py: defines __eq__ (always-equal values)" in out.info["forgery"]
