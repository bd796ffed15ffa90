"""The environments' ``task.hint_writer`` end to end: a real rollout scored by swebench-lite / feature-deletion on
verifiers' subprocess runtime, the hint written by a teacher served on loopback through the pool's client, ledger and
journal."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import verifiers.v1 as vf
from verifiers.v1.runtimes import provision_runtime

from crf_prime.hints import HintWriterConfig
from crf_prime.loopback import LoopbackOpenAI, Reply
from crf_prime.teachers import read_journal

pytestmark = pytest.mark.bwrap

ADVICE = "Run tests/test_stats.py::test_median_even and average the two middle elements."


@pytest.fixture
async def runtime() -> AsyncIterator[vf.Runtime]:
    async with provision_runtime(vf.SubprocessConfig()) as rt:
        yield rt


def writer_config(tmp_path: Path, base_url: str, extra: str = "") -> HintWriterConfig:
    teachers = tmp_path / "teachers.toml"
    teachers.write_text(
        f'[[teachers]]\nname = "coach"\nmodel = "scripted"\nbase_url = "{base_url}"\napi_key_var = ""\n'
        f"price_out_per_mtok = 1.0\n{extra}"
    )
    return HintWriterConfig(teachers=teachers, name="coach", journal=tmp_path / "hints.jsonl", budget_usd=1.0)


def trace_for(task, type_: str) -> vf.Trace:
    return vf.Trace(
        agent=vf.AgentInfo(config=vf.AgentConfig()),
        task=vf.TraceTask(type=type_, data=task.data, key=task.key),
        nodes=[vf.MessageNode(parent=None, message=vf.UserMessage(content=task.data.prompt_text), sampled=False)],
    )


async def test_swebench_lite_task_hint_writer(tmp_path: Path, runtime: vf.Runtime) -> None:
    from swebench_lite import SweTaskConfig, SweTaskset, SweTasksetConfig

    from crf_prime.swe.fixture import build_mini_swebench

    mini = tmp_path / "mini"
    mini.mkdir()
    build_mini_swebench(mini)
    with LoopbackOpenAI([Reply(content=ADVICE, cost=0.001)]) as server:
        config = SweTasksetConfig(
            id="swebench-lite",
            dataset=str(mini / "instances.jsonl"),
            repos_dir=mini / "repos",
            task=SweTaskConfig(hint_writer=writer_config(tmp_path, server.base_url)),
        )
        (task,) = list(SweTaskset(config))
        trace = trace_for(task, "SweTask")
        await task.setup(trace, runtime)
        await task.score(trace, runtime)  # the untouched repo: FAIL_TO_PASS fails, the teacher phrases the hint
    assert trace.reward == 0.0
    assert (trace.info["hint"], trace.info["hint_source"], trace.info["hint_cost_usd"]) == (ADVICE, "llm", 0.001)
    (request,) = server.requests
    assert "ERRORS FOUND:\n- Test `tests/test_stats.py::test_median_even` failed" in request["messages"][1]["content"]
    (row,) = read_journal(tmp_path / "hints.jsonl")
    assert row.ok and row.trace_id == trace.id and row.cost_usd == 0.001


@pytest.mark.slow
async def test_feature_deletion_task_hint_writer(tmp_path: Path, runtime: vf.Runtime) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "featdel"))
    from featdel_support import INFLECTION, generated
    from feature_deletion.taskset import FeatureDeletionConfig, FeatureDeletionTaskConfig, FeatureDeletionTaskset

    task_dir = generated(INFLECTION, 2)[0]
    script = [Reply(status=500, content="down")]  # max_attempts = 1 below: one failed call, no retry
    with LoopbackOpenAI(script) as server:
        cfg = writer_config(tmp_path, server.base_url, "max_attempts = 1\n")
        config = FeatureDeletionConfig(
            id="feature-deletion", tasks=task_dir, task=FeatureDeletionTaskConfig(hint_writer=cfg)
        )
        task = next(iter(FeatureDeletionTaskset(config)))
        trace = trace_for(task, "FeatureDeletionTask")
        await task.setup(trace, runtime)
        await task.score(trace, runtime)  # nothing implemented: hidden tests fail, the teacher is down
    assert trace.reward == 0.0 and len(server.requests) == 1
    assert trace.info["hint_source"] == "template" and trace.info["hint"].startswith("- Test `")
    assert trace.info["hint_error"].startswith("InternalServerError")
