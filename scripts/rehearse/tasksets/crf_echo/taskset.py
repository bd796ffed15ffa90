"""The echo taskset: ``Echo: 4821`` → ``4821``; reward = similarity of the reply to the string (1.0 only if equal).

Reward ``echo`` = ``difflib.SequenceMatcher(reply, answer).ratio()``: 2·matches / (len(reply) + len(answer)), in
[0, 1], exactly 1.0 iff the stripped reply equals the string, 0 for an empty reply. Graded from the trace alone.
"""

from __future__ import annotations

import random
from difflib import SequenceMatcher
from typing import Annotated

import verifiers.v1 as vf
from pydantic import Field

SYSTEM = "Repeat the digits after 'Echo:' exactly."


def echo_prompt(answer: str) -> str:
    """The user message of the task whose answer is ``answer`` (also the SFT prompt of tiny_model.py)."""
    return f"Echo: {answer}"


def echo_strings(num_tasks: int, length: int, seed: int) -> list[str]:
    """``num_tasks`` distinct digit strings of ``length`` digits, the same for a given seed."""
    if num_tasks > 10**length:
        raise ValueError(f"num_tasks={num_tasks} exceeds the {10**length} strings of {length} digits")
    rng = random.Random(seed)
    seen: dict[str, None] = {}
    while len(seen) < num_tasks:
        seen.setdefault("".join(rng.choice("0123456789") for _ in range(length)))
    return list(seen)


def similarity(reply: str, answer: str) -> float:
    """SequenceMatcher ratio of the stripped reply to the answer (1.0 iff equal)."""
    return SequenceMatcher(None, reply.strip(), answer, autojunk=False).ratio()


class EchoData(vf.TaskData):
    answer: str
    """The digit string the reply must repeat."""


class EchoTask(vf.Task[EchoData]):
    NEEDS_CONTAINER = False

    @vf.stop
    async def single_turn(self, trace: vf.Trace) -> bool:
        return trace.num_turns >= 1

    @vf.reward(weight=1.0)
    async def echo(self, trace: vf.Trace) -> float:
        return similarity(trace.last_reply, self.data.answer)

    @vf.metric
    async def exact(self, trace: vf.Trace) -> float:
        return float(trace.last_reply.strip() == self.data.answer)


class EchoConfig(vf.TasksetConfig):
    """Taskset knobs (``[env.taskset]``)."""

    num_tasks: Annotated[int, Field(ge=1)] = 256
    length: Annotated[int, Field(ge=1, le=8)] = 3
    """Digits per string."""
    seed: int = 0
    """Seed of the strings (train and eval use different seeds)."""


class EchoTaskset(vf.Taskset[EchoTask, EchoConfig]):
    def load(self) -> list[EchoTask]:
        c = self.config
        return [
            EchoTask(
                EchoData(idx=i, name=f"echo-{s}", prompt=echo_prompt(s), system_prompt=SYSTEM, answer=s),
                c.task,
            )
            for i, s in enumerate(echo_strings(c.num_tasks, c.length, c.seed))
        ]
