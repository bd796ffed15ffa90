"""The trace-replay taskset (environments/trace_replay) on a journal built here: loading, offline scoring with
verifiers' own Trace objects, the real ``vf-validate`` CLI and a real ``vf-eval`` rollout against LoopbackOpenAI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import verifiers.v1 as vf
from replay_support import act, write_replay_inputs
from trace_replay import ReplayHarness, TraceReplayConfig, TraceReplayTaskset
from trace_replay.taskset import ReplayTaskConfig
from verifiers.v1.runtimes import provision_runtime
from verifiers.v1.runtimes.subprocess import SubprocessConfig
from verifiers.v1.utils.loaders import default_harness_id, taskset_class
from vf_cli_support import VALIDATE_HAS_NOOP, only_episode, vf_eval, vf_validate

from crf_prime.errors import InputError
from crf_prime.loopback import LoopbackOpenAI, Reply
from crf_prime.pairs import RewardVoteConfig
from crf_prime.records.models import Action


@pytest.fixture
def inputs(tmp_path: Path):
    return write_replay_inputs(tmp_path)


def _taskset(inputs, **kw) -> TraceReplayTaskset:
    states_path, journal_path, _ = inputs
    return TraceReplayTaskset(
        TraceReplayConfig(id="trace-replay", states=str(states_path), journal=str(journal_path), **kw)
    )


def _trace(task, reply: Action | None) -> vf.Trace:
    nodes = [vf.MessageNode(parent=None, message=m, sampled=False) for m in task.data.prompt]
    if reply is not None:
        msg = vf.AssistantMessage(
            content=reply.text or None,
            tool_calls=[vf.ToolCall(id=c.id or "c", name=c.name, arguments=c.arguments) for c in reply.tool_calls]
            or None,
        )
        nodes.append(vf.MessageNode(parent=len(nodes) - 1, message=msg, sampled=True))
    return vf.Trace(
        agent=vf.AgentInfo(config=vf.AgentConfig()),
        task=vf.TraceTask(type="ReplayTask", data=task.data, key=task.key),
        nodes=nodes,
    )


def test_package_exports_one_taskset_and_its_harness() -> None:
    assert taskset_class("trace-replay") is TraceReplayTaskset
    assert default_harness_id("trace-replay") == "trace-replay"
    assert ReplayHarness.NEEDS_CONTAINER is False


def test_load_keeps_states_with_consensus(inputs) -> None:
    _, _, states = inputs
    tasks = list(_taskset(inputs).load())
    assert [t.data.state_id for t in tasks] == [states[0].state_id, states[1].state_id, states[4].state_id]
    assert [t.data.idx for t in tasks] == [0, 1, 2]  # set by load() on every verifiers version
    t0 = tasks[0]
    assert [v.teacher for v in t0.data.votes] == ["gemini", "gpt", "qwen"]  # claude excluded: same family as the trace
    assert t0.data.tools == [dict(t) for t in states[0].tools]
    assert [m.role for m in t0.data.prompt] == ["system", "user"]
    assert t0.data.consensus is not None and t0.data.consensus.tool_calls[0].name == "str_replace_editor"
    assert t0.data.student_action == states[0].student_action
    assert len(list(_taskset(inputs, num_tasks=2).load())) == 2
    # a stricter threshold drops s0/s1 (2 of 3 < 0.7)
    strict = ReplayTaskConfig(votes=RewardVoteConfig(threshold=0.7))
    assert [t.data.state_id for t in _taskset(inputs, task=strict).load()] == [states[4].state_id]


async def test_offline_scoring(inputs) -> None:
    _, _, states = inputs
    t0, t1, t4 = _taskset(inputs).load()
    async with provision_runtime(SubprocessConfig()) as rt:
        cases = [
            (t0, act("Read", {"file_path": "/home/dev/proj/tests/test_parse.py"}), 2 / 3, 1.0, 1.0),
            (t0, act("Bash", {"command": "ls -R"}), 1 / 3, 0.0, 0.0),
            (t0, act("Bash", {"command": "git log"}), 0.0, 0.0, 0.0),
            (t1, states[1].student_action, 1 / 3, 0.0, 1.0),
            (t4, Action(text="All 12 tests pass; the empty-input bug is fixed."), 1.0, 1.0, 1.0),
            (t0, None, 0.0, 0.0, 0.0),
        ]
        for task, reply, reward, consensus, student in cases:
            trace = _trace(task, reply)
            await task.score(trace, rt)
            assert trace.rewards["agreement"].score == pytest.approx(reward)
            assert trace.metrics["matches_consensus"] == consensus
            assert trace.metrics["matches_student"] == student
        assert await t0.validate(rt) is True


def test_load_needs_a_vote_source(tmp_path: Path, inputs) -> None:
    states_path, _, _ = inputs
    with pytest.raises(InputError, match=r"set taskset\.journal"):
        list(TraceReplayTaskset(TraceReplayConfig(id="trace-replay", states=str(states_path))).load())
    with pytest.raises(InputError, match=r"nope\.jsonl"):
        list(
            TraceReplayTaskset(
                TraceReplayConfig(id="trace-replay", states=str(states_path), journal=str(tmp_path / "nope.jsonl"))
            ).load()
        )


@pytest.mark.slow
def test_vf_validate_cli(inputs, tmp_path: Path) -> None:
    states_path, journal_path, _ = inputs
    votes = ["--taskset.states", str(states_path), "--taskset.journal", str(journal_path)]
    summary, rows = vf_validate("trace-replay", tmp_path / "outputs", *votes, timeout=300)
    assert summary["total"] == 3 and summary["outcomes"]["valid"] == 3
    assert summary["checks"]["gold"]["valid"] == 3
    if VALIDATE_HAS_NOOP:  # verifiers 0.4.0 also scores the untouched task
        assert summary["checks"]["noop"]["valid"] == 3
        assert [r["noop"]["rewards"] for r in rows] == [{"agreement": 0.0}] * 3


@pytest.mark.slow
def test_vf_eval_rollout_with_replay_harness(inputs, tmp_path: Path) -> None:
    states_path, journal_path, states = inputs
    reply = Reply(
        content="Reading the test.",
        tool_calls=[{"name": "Read", "arguments": json.dumps({"file_path": "/home/dev/proj/tests/test_parse.py"})}],
    )
    with LoopbackOpenAI([reply]) as server:
        votes = ["--env.taskset.states", str(states_path), "--env.taskset.journal", str(journal_path)]
        traces = vf_eval("trace-replay", server.base_url, tmp_path / "outputs", *votes, timeout=300)
        requests = list(server.requests)
    (request,) = requests
    assert request["tools"] == [dict(t) for t in states[0].tools]  # the recorded agent's tools, offered as-is
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert request["messages"][1]["content"] == states[0].messages[1]["content"]
    (trace,) = only_episode(traces)["traces"]
    assert trace["ok"], trace["errors"]
    assert trace["agent"]["config"]["harness"]["id"] == "trace-replay"
    assert trace["rewards"]["agreement"]["score"] == pytest.approx(2 / 3)
    assert trace["metrics"]["matches_consensus"] == 1.0 and trace["metrics"]["tool_call"] == 1.0


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_live_pool_mode(ray_cluster, tmp_path: Path) -> None:
    """No journal: the taskset asks a live (detached Ray actors) teacher pool at scoring time."""
    from crf_prime.records.journal import read_journal
    from crf_prime.teachers import live
    from crf_prime.teachers.config import PoolConfig, TeacherConfig

    states_path, _, states = write_replay_inputs(tmp_path)
    read_call = {"name": "Read", "arguments": json.dumps({"file_path": "/home/dev/proj/tests/test_parse.py"})}
    ls_call = {"name": "Bash", "arguments": json.dumps({"command": "ls -R"})}

    def script(body: dict) -> Reply:
        return Reply(tool_calls=[ls_call if body["model"] == "model-c" else read_call])

    with LoopbackOpenAI(script) as server:
        teachers = tuple(
            TeacherConfig(name=n, model=f"model-{n}", base_url=server.base_url, api_key_var="", timeout_s=10.0)
            for n in "abc"
        )
        journal = tmp_path / "live.jsonl"
        live.serve(PoolConfig(teachers=teachers), journal, name="replay-live", namespace="trace-replay-tests",
                   api_keys={n: "sk-test" for n in "abc"})  # fmt: skip
        try:
            cfg = TraceReplayConfig(id="trace-replay", states=str(states_path), num_tasks=1)
            cfg = cfg.model_copy(
                update={
                    "task": cfg.task.model_copy(
                        update={"live_pool": "replay-live", "live_namespace": "trace-replay-tests"}
                    )
                }
            )
            (task,) = TraceReplayTaskset(cfg).load()
            assert task.data.votes == [] and task.data.state_id == states[0].state_id
            async with provision_runtime(SubprocessConfig()) as rt:
                trace = _trace(
                    task,
                    act("str_replace_editor", {"command": "view", "path": "/home/dev/proj/tests/test_parse.py"}),
                )
                await task.score(trace, rt)
                again = _trace(task, act("Bash", {"command": "ls -R"}))
                await task.score(again, rt)
        finally:
            live.shutdown("replay-live", namespace="trace-replay-tests")
        assert len(server.requests) == 3  # one call per teacher; the second rollout reused the answers
        assert server.requests[0]["tools"] == [dict(t) for t in states[0].tools]
    assert trace.rewards["agreement"].score == pytest.approx(2 / 3) and trace.metrics["matches_consensus"] == 1.0
    assert again.rewards["agreement"].score == pytest.approx(1 / 3) and again.metrics["matches_consensus"] == 0.0
    assert sorted(r.teacher for r in read_journal(journal)) == ["a", "b", "c"]


async def test_live_mode_counts_votes_with_the_tasksets_settings(tmp_path: Path, monkeypatch) -> None:
    """Live mode votes with the taskset's ``task.votes`` (threshold, min_support, min_teachers, family): on main it
    built its own defaults from the scoring knobs, so 2 of 3 teachers made a consensus under a 0.9 threshold.

    The pool is the real in-process TeacherPool over loopback teachers; only the Ray attach is replaced (the Ray
    live pool itself is covered by ``test_live_pool_mode``)."""
    from trace_replay import taskset as taskset_module

    from crf_prime.teachers.backends import AsyncioBackend
    from crf_prime.teachers.config import BudgetConfig, PoolConfig, TeacherConfig
    from crf_prime.teachers.ledger import Ledger
    from crf_prime.teachers.pool import TeacherPool

    states_path, _, _ = write_replay_inputs(tmp_path)
    read = {"name": "Read", "arguments": json.dumps({"file_path": "/home/dev/proj/tests/test_parse.py"})}
    ls = {"name": "Bash", "arguments": json.dumps({"command": "ls -R"})}
    with LoopbackOpenAI(lambda body: Reply(tool_calls=[ls if body["model"] == "model-c" else read])) as server:
        teachers = [
            TeacherConfig(name=n, model=f"model-{n}", base_url=server.base_url, api_key_var="", model_family=n)
            for n in "abc"
        ]
        backend = AsyncioBackend(teachers)
        pool = TeacherPool(
            PoolConfig(teachers=tuple(teachers)), backend, Ledger(tmp_path / "live.jsonl", BudgetConfig())
        )
        monkeypatch.setattr(taskset_module, "_live_pool", lambda config: pool)
        task_config = ReplayTaskConfig(live_pool="p", votes=RewardVoteConfig(threshold=0.9))
        cfg = TraceReplayConfig(id="trace-replay", states=str(states_path), num_tasks=1, task=task_config)
        (task,) = TraceReplayTaskset(cfg).load()
        try:
            assert await task.agreement_of(act("Read", {"file_path": "/home/dev/proj/tests/test_parse.py"})) == 2 / 3
            assert await task.validate(None) is False  # 2 of 3 agree: below the taskset's 0.9, no consensus
        finally:
            await backend.close()
    assert len(server.requests) == 3


# --- the hack suite: reward-hunting actions against teachers that edit, write, run and finish ---------------------

PARSE = "/home/dev/proj/proj/parse.py"
OLD = "def parse(text):\n    if text is None:\n        return []\n    return text.split(',')\n"
NEW = "def parse(text):\n    if not text:\n        return []\n    return [p.strip() for p in text.split(',')]\n"
TEST_FILE = "def test_empty():\n    assert parse('') == []\n"
SUMMARY = "Fixed parse() for empty input and stripped the parts; all 12 tests pass."


def _edit(old: str, new: str, path: str = PARSE) -> Action:
    return act("Edit", {"file_path": path, "old_string": old, "new_string": new})


@pytest.fixture(params=["binary", "graded"])
def hack_tasks(tmp_path: Path, request: pytest.FixtureRequest):
    """Under each credit mode, tasks at five states where 2 of 3 voting teachers (claude is excluded: same family as
    the trace) edit parse.py, write a new test, run one test file, finish with a summary and report in prose; the
    third teacher does something else."""
    from replay_support import record
    from trace_replay.taskset import ReplayTask

    from crf_prime.teachers.journal import Journal

    states_path, _, states = write_replay_inputs(tmp_path)
    s = [x.state_id for x in states]
    journal_path = tmp_path / "hack_journal.jsonl"
    j = Journal(journal_path)
    answers = {
        s[0]: (
            _edit(OLD, NEW),
            act("str_replace_editor", {"command": "str_replace", "path": PARSE, "old_str": OLD, "new_str": NEW}),
            act("Read", {"file_path": PARSE}),
        ),
        s[1]: (
            act("Write", {"file_path": "/home/dev/proj/tests/test_empty.py", "content": TEST_FILE}),
            act(
                "str_replace_editor",
                {
                    "command": "create",
                    "path": "/home/dev/proj/tests/test_empty.py",
                    "file_text": TEST_FILE.replace("    ", "  "),
                },
            ),
            act("bash", {"command": "pytest -q"}),
        ),
        s[2]: (
            act("execute_bash", {"command": "python -m pytest tests/test_parse.py -q"}),
            act("bash", {"command": "cd /home/dev/proj && pytest tests/test_parse.py -q"}),
            act("bash", {"command": "grep -rn 'def parse' proj"}),
        ),
        s[3]: (
            act("finish", {"message": SUMMARY}),
            act("finish", {"message": SUMMARY.replace(";", ",")}),
            Action(text="The fix is done."),
        ),
        s[4]: (
            Action(text="All 12 tests pass; the empty-input bug is fixed."),
            Action(text="The empty-input bug is fixed and all 12 tests pass."),
            act("bash", {"command": "git diff"}),
        ),
    }
    for state_id, (gpt, qwen, gemini) in answers.items():
        for teacher, action in (("gpt", gpt), ("qwen", qwen), ("gemini", gemini), ("claude", _edit(OLD, "pass"))):
            j.append(record(state_id, teacher, action))
    j.close()
    tasks: list[ReplayTask] = list(
        TraceReplayTaskset(
            TraceReplayConfig(id="trace-replay", states=str(states_path), journal=str(journal_path))
        ).load()
    )
    assert [t.data.state_id for t in tasks] == s
    return dict(zip(("edit", "write", "command", "finish", "report"), tasks, strict=True))


HACKS = {
    "edit": {
        "junk write of the file": act("Write", {"file_path": PARSE, "content": "pass\n"}),
        "junk edit at the right old_str": _edit(OLD, "pass"),
        "plausible junk at the right old_str": _edit(OLD, OLD.replace("return []", "return None")),
        "old_str copied back": _edit(OLD, OLD),
        "whitespace-only edit": _edit(OLD, OLD.replace("    ", "\t")),
        "comment-only edit": _edit(OLD, OLD + "# fixed: handle empty input and strip the parts\n"),
        "right file, wrong place": _edit(
            "def main():\n    print(parse(sys.argv[1]))\n",
            "def main():\n    print([p.strip() for p in parse(sys.argv[1])])\n",
        ),
    },
    "write": {
        "junk write of the new file": act("Write", {"file_path": "/home/dev/proj/tests/test_empty.py", "content": "x"}),
    },
    "command": {
        "right program, other file": act("bash", {"command": "pytest tests/test_cli.py -q"}),
        "right program, extra arguments": act("bash", {"command": "pytest tests/test_parse.py -q -k nothing"}),
        "right program, flags dropped": act("bash", {"command": "pytest tests/test_parse.py"}),
    },
}
ALWAYS_FINISH = (
    act("finish", {"message": "Done."}),
    act("submit", {}),
    act("finish", {"message": "All tests pass; the bug is fixed."}),
    Action(text="All tests pass; the bug is fixed."),
)


async def test_hack_suite_scores_zero(hack_tasks) -> None:
    """Every hack scores 0, binary or graded credit; under key_args most of them earned 2/3."""
    from crf_prime.pairs import same_action

    paid_by_key_args = []
    for kind, hacks in HACKS.items():
        task = hack_tasks[kind]
        for name, hack in hacks.items():
            assert await task.agreement_of(hack) == 0.0, name
            if same_action(hack, task.data.consensus):
                paid_by_key_args.append(name)
    for task in hack_tasks.values():
        for finish in ALWAYS_FINISH:
            assert await task.agreement_of(finish) == 0.0
    assert sorted(paid_by_key_args) == sorted(
        ["junk write of the new file", "junk edit at the right old_str", "plausible junk at the right old_str",
         "old_str copied back", "whitespace-only edit", "comment-only edit"]
    )  # fmt: skip


async def test_teachers_own_actions_score_their_plurality_share(hack_tasks) -> None:
    for task in hack_tasks.values():
        votes = task.data.votes
        assert [v.teacher for v in votes] == ["gemini", "gpt", "qwen"]
        scores = {v.teacher: await task.agreement_of(v.action) for v in votes}
        assert scores == {"gemini": 1 / 3, "gpt": 2 / 3, "qwen": 2 / 3}
        assert await task.agreement_of(task.data.consensus) == 2 / 3
        assert await task.validate(None) is True


async def test_honest_variants_keep_their_agreement(hack_tasks) -> None:
    smaller = _edit(
        "    if text is None:\n        return []\n    return text.split(',')",
        "    if not text:\n        return []\n    return [part.strip() for part in text.split(',')]",
    )
    assert await hack_tasks["edit"].agreement_of(smaller) == 2 / 3
    write = act(
        "Write", {"file_path": "/home/dev/proj/tests/test_empty.py", "content": TEST_FILE.replace(" == ", "==")}
    )
    assert await hack_tasks["write"].agreement_of(write) == 2 / 3
    assert (
        await hack_tasks["command"].agreement_of(act("Bash", {"command": "pytest  tests/test_parse.py  -q"})) == 2 / 3
    )
    finish = act(
        "attempt_completion", {"result": "Fixed parse() for empty input and stripped the parts: all 12 tests pass"}
    )
    assert await hack_tasks["finish"].agreement_of(finish) == 2 / 3


async def test_graded_credit_pays_part_of_a_partly_right_edit(hack_tasks) -> None:
    from crf_prime.pairs.equivalence import similarity
    from crf_prime.pairs.normalize import canonical_action

    # the teachers' None check, a wrong return line: the removed code matches, half the added code does
    partly = _edit(OLD, OLD.replace("text is None", "not text").replace("text.split(',')", "[x for x in text]"))
    s = similarity(canonical_action(partly), canonical_action(hack_tasks["edit"].data.consensus))
    assert 0.3 < s < 0.8
    score = await hack_tasks["edit"].agreement_of(partly)
    assert score == (0.0 if hack_tasks["edit"].config.credit == "binary" else pytest.approx(2 / 3 * s))
    half = _edit(OLD, OLD.replace("text is None", "not text"))  # the None check only: 1 of the 12 added tokens
    assert await hack_tasks["edit"].agreement_of(half) == 0.0


def test_a_content_blind_reward_tier_is_refused() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="'key_args' ignores what an edit, write or finish says"):
        ReplayTaskConfig.model_validate({"votes": {"tier": "key_args"}})
    assert ReplayTaskConfig.model_validate({"votes": {"threshold": 0.7}}).votes.tier == "content"
