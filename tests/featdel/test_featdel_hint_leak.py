"""Channel 2 cannot exfiltrate hidden test data (issue 25 item 6), through the real Feature Deletion environment: the
agent's code reads the hidden test file while it is graded and raises it as an exception message; the reward is 0,
the grade records the failure, and ``trace.info["hint"]`` (the teacher's context) holds none of that text."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import verifiers.v1 as vf
from featdel_support import INFLECTION, generated
from verifiers.v1.runtimes import provision_runtime

from crf_prime.featdel.models import FeatdelTask

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

MARK = "LEAKED-7f3a9c:"


@pytest.fixture
async def runtime() -> AsyncIterator[vf.Runtime]:
    async with provision_runtime(vf.SubprocessConfig()) as rt:
        yield rt


async def test_hidden_test_text_raised_by_the_agent_never_reaches_the_hint(runtime: vf.Runtime) -> None:
    from feature_deletion.taskset import FeatureDeletionConfig, FeatureDeletionTaskset

    task = FeatureDeletionTaskset(
        FeatureDeletionConfig(id="feature-deletion", tasks=generated(INFLECTION, 2)[0])
    ).load()[0]
    row: FeatdelTask = task.data.featdel
    trace = vf.Trace(
        agent=vf.AgentInfo(config=vf.AgentConfig()),
        task=vf.TraceTask(type="FeatureDeletionTask", data=task.data, key=task.key),
        nodes=[vf.MessageNode(parent=None, message=vf.UserMessage(content=task.data.prompt_text), sampled=False)],
    )
    await task.setup(trace, runtime)
    hidden = row.hidden_tests[0]
    target = row.targets[0]
    path = Path(runtime.workdir) / target.path  # type: ignore[attr-defined]
    stub = "raise NotImplementedError"
    leak = f"raise ValueError({MARK!r} + open({hidden!r}).read()[:400])  # the hidden test file, read at grading"
    text = path.read_text()
    assert stub in text
    path.write_text(text.replace(stub, leak, 1))
    await task.score(trace, runtime)
    assert trace.rewards["tests_pass"].score == 0.0
    graded = json.dumps(trace.info["featdel_grade"])
    assert MARK in graded  # the exfiltration happened: the grading run's failure text carries the hidden file
    hint = trace.info["hint"]
    assert hint.startswith("- Test `") and MARK not in hint
    assert MARK not in json.dumps(trace.info["hint_sites"])
