"""A one-task verifiers v1 taskset used by the harness tests; exports SandboxHarness as its default harness.

``CRF_TINY_BOX_NO_HARNESS=1`` leaves the harness out of ``__all__`` (to test ``--env.agent.harness.id crf-sandbox``).
"""

import os

import verifiers.v1 as vf

from crf_prime.harness import SandboxHarness  # noqa: F401 (exported conditionally)


class TinyData(vf.TaskData):
    sandbox_protected: list[str] = []
    """Paths in the rollout directory the agent may read but not change."""


class TinyTask(vf.Task[TinyData, vf.State, vf.TaskConfig]):
    async def setup(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        await runtime.write("tests/check.txt", b"expected: hi\n")

    @vf.reward(weight=1.0)
    async def wrote_hello(self, runtime: vf.Runtime) -> float:
        data = await runtime.read("hello.txt")
        tests = await runtime.read("tests/check.txt")
        return float(data == b"hi\n" and tests == b"expected: hi\n")


class TinyTaskset(vf.Taskset[TinyTask, vf.TasksetConfig]):
    def load(self):
        yield TinyTask(TinyData(id="hello", prompt="Write 'hi' into hello.txt.", sandbox_protected=["tests"]))


__all__ = ["TinyTaskset"] if os.environ.get("CRF_TINY_BOX_NO_HARNESS") else ["TinyTaskset", "SandboxHarness"]
