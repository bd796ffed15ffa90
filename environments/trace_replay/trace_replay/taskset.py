"""The trace-replay taskset: one task per replayed trace state with a teacher consensus.

Data: ``crf-prime traces ingest`` states (``TraceState`` JSONL) and the teachers' answers at those states — from a replay
journal written by ``crf-prime teachers replay`` (default), or asked on demand from a live teacher pool (named detached Ray
actors started with ``crf_prime.teachers.live.serve``; optional, needs the ``ray`` extra). Votes go through the
same family exclusion and tiered action equivalence as the DPO pairs (``crf_prime.pairs``).

Reward ``agreement`` = (voting teachers whose action is the same step as the policy's) / (voting teachers), in
[0, 1], under a content-aware tier (``content`` by default, or ``exact``): an edit agrees when it makes the same
change at the same place, not when it merely targets the same file; ``key_args`` and ``text`` are refused at parse
time. ``task.credit = "graded"`` also pays a partly similar change its similarity (0 below ``task.graded_floor``).
Metrics: ``matches_consensus`` (same step as the plurality), ``matches_student`` (same step as the recorded
action), ``tool_call`` (the reply calls a tool). No reply scores 0 (``vf-validate``'s noop check); the gold check is
that the consensus action itself scores its plurality share.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import verifiers.v1 as vf
from pydantic import BaseModel, ConfigDict, Field
from verifiers.v1.dialects.chat import parse_message
from verifiers.v1.errors import TaskError

from crf_prime.errors import InputError
from crf_prime.pairs.build import RewardVoteConfig, agrees, latest_answers, vote
from crf_prime.pairs.equivalence import similarity
from crf_prime.pairs.normalize import canonical_action
from crf_prime.rayinit import init_ray
from crf_prime.records.family import family_of
from crf_prime.records.journal import read_journal
from crf_prime.records.models import Action, TeacherRequest, ToolCall, TraceState
from crf_prime.records.states import read_states
from crf_prime.teachers.live import attach


class Vote(BaseModel):
    """One voting teacher's proposed action at the state."""

    model_config = ConfigDict(frozen=True)

    teacher: str
    action: Action


class ReplayData(vf.TaskData):
    """One replayed state (``prompt`` = its context messages)."""

    state_id: str
    trace_id: str = ""
    step: int = 0
    """0-based position of the state in its trace."""
    tools: list[dict[str, Any]] = Field(default_factory=list)
    """OpenAI tool schemas the recorded agent had; the replay harness offers them to the policy."""
    student_action: Action
    """The recorded action (never shown to the policy)."""
    votes: list[Vote] = Field(default_factory=list)
    """Voting teachers' actions (same-family teachers already excluded); empty in live mode until scored."""
    consensus: Action | None = None
    """The plurality action (None in live mode until scored)."""
    source_model: str = ""
    model_family: str = ""


class ReplayTaskConfig(vf.TaskConfig):
    """Scoring knobs (``--env.taskset.task.*``)."""

    votes: RewardVoteConfig = RewardVoteConfig()
    """How teacher answers become a vote (``--env.taskset.task.votes.*``): which states have a consensus and become
    tasks, which teachers vote, what counts as the same step when scoring. Journal and live mode use the same.
    ``tier`` must be content-aware (``content``, the default here, or ``exact``)."""
    credit: Literal["binary", "graded"] = "binary"
    """Per voting teacher: ``binary`` counts 1 when the policy's action is the same step (``votes.tier``), else 0;
    ``graded`` also counts an edit's change similarity to a teacher's edit it does not match, when that is at least
    ``graded_floor`` (a partly right edit earns part; every other kind of step stays binary: a canned message shares
    enough words with a teacher's to earn a part)."""
    graded_floor: float = Field(0.3, ge=0.2, le=1.0)
    """Change similarity below which ``graded`` credit is 0. Junk, copied-back, whitespace- and comment-only edits
    measure 0 against a real change (tests/pairs/test_pairs_content.py), so an unrelated change
    earns 0."""
    live_pool: str | None = None
    """Name of a live teacher pool to ask at scoring time for states without journal votes (needs ray)."""
    live_namespace: str = "crf-prime"
    """Ray namespace of the live pool."""
    ray_address: str = "auto"
    """Ray cluster to connect to when this process has no Ray connection yet (env-server processes)."""


def _policy_action(trace: vf.Trace) -> Action | None:
    """The last sampled assistant message of the rollout as an Action (None when the policy never answered)."""
    for node in reversed(trace.nodes):
        msg = node.message
        if node.sampled and msg.role == "assistant":
            calls = tuple(ToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in msg.tool_calls or ())
            return Action(text=msg.content or "", reasoning=msg.reasoning_content or "", tool_calls=calls)
    return None


class ReplayTask(vf.Task[ReplayData, vf.State, ReplayTaskConfig]):
    NEEDS_CONTAINER = False

    def _agrees(self, a: Action, b: Action) -> bool:
        return agrees(canonical_action(a), canonical_action(b), self.config.votes)

    def _credit(self, policy: Action, teacher: Action) -> float:
        """What one voting teacher pays: 1 for the same step; under ``graded``, a partial content match's similarity."""
        a, b = canonical_action(policy), canonical_action(teacher)
        if agrees(a, b, self.config.votes):
            return 1.0
        if self.config.credit == "binary" or not a.calls or not all(c.name == "edit" for c in (*a.calls, *b.calls)):
            return 0.0
        s = similarity(a, b)
        return s if s >= self.config.graded_floor else 0.0

    async def _votes(self) -> tuple[list[Vote], Action | None]:
        if self.data.votes or self.config.live_pool is None:
            return list(self.data.votes), self.data.consensus
        return await _live_votes(self.data, self.config)

    async def agreement_of(self, action: Action | None) -> float:
        votes, _ = await self._votes()
        if not votes:
            raise TaskError(f"state {self.data.state_id}: no teacher votes to score against")
        if action is None or action.is_empty():
            return 0.0
        return sum(self._credit(action, v.action) for v in votes) / len(votes)

    async def validate(self, runtime: vf.Runtime) -> bool | None:
        """Gold check: the consensus action scores its plurality share (> 0) under this task's matcher (at least
        that share under ``graded`` credit, where minority teachers with a partly similar change add theirs)."""
        votes, consensus = await self._votes()
        if consensus is None:
            return False
        top = sum(self._agrees(consensus, v.action) for v in votes)
        score = await self.agreement_of(consensus)
        return top > 0 and (score == top / len(votes) if self.config.credit == "binary" else score >= top / len(votes))

    @vf.reward(weight=1.0)
    async def agreement(self, trace: vf.Trace) -> float:
        return await self.agreement_of(_policy_action(trace))

    @vf.metric
    async def matches_consensus(self, trace: vf.Trace) -> float:
        _, consensus = await self._votes()
        action = _policy_action(trace)
        return float(action is not None and consensus is not None and self._agrees(action, consensus))

    @vf.metric
    async def matches_student(self, trace: vf.Trace) -> float:
        action = _policy_action(trace)
        return float(action is not None and self._agrees(action, self.data.student_action))

    @vf.metric
    async def tool_call(self, trace: vf.Trace) -> float:
        action = _policy_action(trace)
        return float(action is not None and bool(action.tool_calls))


class TraceReplayConfig(vf.TasksetConfig):
    """Taskset knobs (``--env.taskset.*`` / TOML ``[env.taskset]``)."""

    states: str = "states.jsonl"
    """States JSONL written by ``crf-prime traces ingest``."""
    journal: str | None = None
    """Replay journal written by ``crf-prime teachers replay``; required unless ``task.live_pool`` is set."""
    num_tasks: Annotated[int, Field(ge=1)] | None = None
    """Keep only the first N tasks."""
    task: ReplayTaskConfig = ReplayTaskConfig()


def _data(state: TraceState, votes: list[Vote], consensus: Action | None) -> ReplayData:
    return ReplayData(
        id=state.state_id,
        name=f"{state.source.trace_id or Path(state.source.file).name}#{state.step}",
        prompt=[parse_message(dict(m)) for m in state.messages],
        state_id=state.state_id,
        trace_id=state.source.trace_id,
        step=state.step,
        tools=[dict(t) for t in state.tools],
        student_action=state.student_action,
        votes=votes,
        consensus=consensus,
        source_model=state.source_model,
        model_family=state.model_family,
    )


class TraceReplayTaskset(vf.Taskset[ReplayTask, TraceReplayConfig]):
    def load(self) -> Iterator[ReplayTask]:
        c = self.config
        if c.journal is None and c.task.live_pool is None:
            raise InputError.field(
                "taskset.journal", "trace-replay: set taskset.journal (a replay journal) or taskset.task.live_pool"
            )
        answers = {}
        if c.journal is not None:
            if not Path(c.journal).is_file():
                raise InputError.field("taskset.journal", f"{c.journal} does not exist")
            answers = latest_answers(read_journal(c.journal))
        n = 0
        for state in read_states(c.states):
            if c.num_tasks is not None and n >= c.num_tasks:
                return
            got = answers.get(state.state_id)
            if got:
                v = vote(state.request(), got, c.task.votes)
                if v.consensus is None:
                    continue
                votes = [Vote(teacher=t, action=got[t].action) for t in v.voters]
                data = _data(state, votes, v.clusters[v.consensus].action)
            elif c.task.live_pool is not None:
                data = _data(state, [], None)
            else:
                continue
            # idx: verifiers 0.4.0 sets it while iterating; the commit prime-rl pins leaves it to load()
            yield ReplayTask(data.model_copy(update={"idx": n}), c.task)
            n += 1


_LIVE: dict[tuple[str, str, str], tuple[list[Vote], Action | None]] = {}
_LIVE_LOCK = threading.Lock()  # ray.init/attach are synchronous


def request_of(data: ReplayData) -> TeacherRequest:
    """What the live pool is asked at a replayed state: the same question the offline replay asked."""
    return TeacherRequest(
        key=data.state_id,
        messages=tuple(_wire(m) for m in data.prompt or ()),
        tools=tuple(data.tools),
        trace_id=data.trace_id,
        model_family=family_of(data.model_family, data.source_model),
        student_action=data.student_action,
    )


def _live_pool(config: ReplayTaskConfig) -> Any:
    """The named live teacher pool, attached once per process (``ray.init``/``attach`` are synchronous)."""

    with _LIVE_LOCK:
        init_ray(address=config.ray_address, namespace=config.live_namespace, log_to_driver=False)
        return attach(config.live_pool or "", namespace=config.live_namespace)


async def _live_votes(data: ReplayData, config: ReplayTaskConfig) -> tuple[list[Vote], Action | None]:
    """Ask the live teacher pool at this state (once per process; the pool's journal dedups across processes) and
    count the answers with the task's votes, exactly as :meth:`TraceReplayTaskset.load` counts journal answers."""
    key = (config.live_namespace, config.live_pool or "", data.state_id)
    if key in _LIVE:
        return _LIVE[key]
    request = request_of(data)
    outcome = await _live_pool(config).ask(request)
    answers = {r.teacher: r for r in outcome.records if r.ok and r.action is not None}
    v = vote(request, answers, config.votes)
    result = (
        [Vote(teacher=t, action=answers[t].action) for t in v.voters],
        v.clusters[v.consensus].action if v.consensus is not None else None,
    )
    if result[0]:  # an empty answer (budget stop, every teacher failing) is asked again next time
        _LIVE[key] = result
    return result


def _wire(message: Any) -> dict[str, Any]:
    from verifiers.v1.dialects.chat import message_to_wire  # optional host (verifiers extra)

    return message_to_wire(message)
