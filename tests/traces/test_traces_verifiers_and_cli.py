"""verifiers v1 traces.jsonl written by verifiers' own writer; the `crf-prime ingest` command; the memory bound."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from crf_prime.cli import main
from crf_prime.traces import IngestReport, detect_format, ingest, read_states

FIX = Path(__file__).parent / "fixtures"


def write_vf_traces(run_dir: Path) -> Path:
    """A real ``traces.jsonl``: one episode, a 2-turn bash-tool rollout, serialised by verifiers' ``write_episode``."""
    from verifiers.v1.configs.agent import AgentConfig
    from verifiers.v1.episode import EnvInfo, Episode
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.runtimes.subprocess import SubprocessConfig
    from verifiers.v1.task import TaskData
    from verifiers.v1.trace import AgentInfo, ModelCall, Trace, TraceTask
    from verifiers.v1.types import AssistantMessage, SystemMessage, Tool, ToolCall, ToolMessage, UserMessage

    try:
        from verifiers.v1.utils.trace_store import TRACES_FILE, write_episode
    except ModuleNotFoundError:  # the verifiers commit prime-rl pins
        from verifiers.v1.cli.output import TRACES_FILE, write_episode

    task = TraceTask(type="FeatureTask", data=TaskData(id="t1", prompt="Make the tests pass."))
    bash = Tool(
        name="bash",
        description="Run a command",
        parameters={"type": "object", "properties": {"command": {"type": "string"}}},
    )
    # verifiers 0.4.0 records the tools on the root node, the commit prime-rl pins on the trace
    node_tools = "tools" in MessageNode.model_fields
    on_node, on_trace = ({"tools": [bash]}, {}) if node_tools else ({}, {"tools": [bash]})
    nodes = [
        MessageNode(parent=None, message=SystemMessage(content="You are a coding agent."), **on_node),
        MessageNode(parent=0, message=UserMessage(content="Make the tests pass.")),
        MessageNode(
            parent=1,
            sampled=True,
            message=AssistantMessage(
                content="Running the tests.",
                reasoning_content="tests first",
                tool_calls=[ToolCall(id="c1", name="bash", arguments='{"command": "pytest -q"}')],
            ),
        ),
        MessageNode(parent=2, message=ToolMessage(tool_call_id="c1", content="1 failed")),
        MessageNode(parent=3, sampled=True, message=AssistantMessage(content="Done.")),
    ]
    trace = Trace(
        task=task,
        agent=AgentInfo(config=AgentConfig(model="Qwen/Qwen3-4B", runtime=SubprocessConfig())),
        nodes=nodes,
        calls=[ModelCall(node=2, model="Qwen/Qwen3-4B"), ModelCall(node=4, model="Qwen/Qwen3-4B")],
        ok=True,
        **on_trace,
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    write_episode(run_dir, Episode(env=EnvInfo(id="feature-deletion"), task=task, traces=[trace], ok=True))
    return run_dir / TRACES_FILE


def test_verifiers_traces_jsonl(tmp_path: Path) -> None:
    path = write_vf_traces(tmp_path / "run")
    assert detect_format(path) == "verifiers"
    report = IngestReport()
    s0, s1 = ingest([path], "auto", report)
    assert s0.messages == (
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Make the tests pass."},
    )
    assert s0.student_action.text == "Running the tests."
    assert s0.student_action.reasoning == "tests first"
    assert [(c.id, c.name, c.arguments) for c in s0.student_action.tool_calls] == [
        ("c1", "bash", '{"command": "pytest -q"}')
    ]
    assert s0.tools == (
        {
            "type": "function",
            "function": {
                "name": "bash",
                "description": "Run a command",
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
            },
        },
    )
    assert s1.messages[2] == {
        "role": "assistant",
        "content": "Running the tests.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "pytest -q"}'}}
        ],
    }
    assert s1.messages[3] == {"role": "tool", "tool_call_id": "c1", "content": "1 failed"}
    assert s1.student_action.text == "Done."
    assert s0.model_family == "qwen" and s0.source.format == "verifiers"
    assert report.traces == 1 and report.states == 2
    # a torn last line (eval killed mid-write) is counted with its location; the episode before it still ingests
    with path.open("a") as f:
        f.write('{"id": "ep2", "traces": [{"nodes": [')
    report = IngestReport()
    assert len(list(ingest([path], "verifiers", report))) == 2
    assert report.skipped == {"malformed_json": 1} and report.malformed[0].startswith(f"{path}:2: JSONDecodeError")


def test_cli_ingest_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "states.jsonl"
    vf_path = write_vf_traces(tmp_path / "run")
    assert main(["ingest", str(FIX), str(vf_path), "--out", str(out)]) == 0
    rows = list(read_states(out))
    assert len(rows) == 19 + 2
    assert {r.source.format for r in rows} == {"claude-code", "openhands", "swe-smith", "swe-gym", "verifiers"}
    err = capsys.readouterr().err
    assert "states written" in err and "21" in err
    assert "malformed" in err and "claude_code_session.jsonl:12" in err


def test_cli_ingest_forced_format_and_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.jsonl"
    assert main(["ingest", str(FIX / "swe_gym.jsonl"), "--format", "swe-gym", "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text("nope\n")
    assert main(["ingest", str(bad), "--format", "swe-smith", "--out", str(tmp_path / "x.jsonl")]) == 1
    assert "bad.jsonl" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()


def test_cli_help_says_channel_3_is_crf_prime_addition(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["ingest", "--help"])
    assert "not part of Cursor's" in " ".join(capsys.readouterr().out.split())


def test_claude_code_memory_bounded_by_main_branch(tmp_path: Path) -> None:
    """8 MB of sidechain/snapshot records around a 3-turn main branch: peak memory stays far below the file size."""
    path = tmp_path / "big.jsonl"
    blob = "x" * 2000
    with path.open("w") as f:
        f.write(
            json.dumps(
                {
                    "type": "user",
                    "uuid": "m0",
                    "parentUuid": None,
                    "sessionId": "S",
                    "message": {"role": "user", "content": "go"},
                }
            )
            + "\n"
        )
        prev = "m0"
        for i in range(4000):
            f.write(
                json.dumps(
                    {
                        "type": "assistant",
                        "uuid": f"s{i}",
                        "parentUuid": None,
                        "isSidechain": True,
                        "message": {"id": f"x{i}", "content": [{"type": "text", "text": blob}]},
                    }
                )
                + "\n"
            )
            if i % 1000 == 999:
                uid = f"a{i}"
                f.write(
                    json.dumps(
                        {
                            "type": "assistant",
                            "uuid": uid,
                            "parentUuid": prev,
                            "sessionId": "S",
                            "message": {
                                "id": uid,
                                "model": "claude-x",
                                "content": [{"type": "text", "text": f"step {i}"}],
                            },
                        }
                    )
                    + "\n"
                )
                prev = uid
    size = path.stat().st_size
    tracemalloc.start()
    states = list(ingest([path], "claude-code"))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(states) == 4
    assert peak < size / 10, (peak, size)


def test_json_array_memory_bounded_by_one_element(tmp_path: Path) -> None:
    path = tmp_path / "rows.json"
    row = {
        "messages": [{"role": "user", "content": "y" * 4000}, {"role": "assistant", "content": "ok"}],
        "traj_id": "t",
        "patch": "",
    }
    with path.open("w") as f:
        f.write("[\n")
        f.write(",\n".join(json.dumps({**row, "traj_id": f"t{i}"}) for i in range(2000)))
        f.write("\n]\n")
    size = path.stat().st_size
    tracemalloc.start()
    n = sum(1 for _ in ingest([path], "swe-smith"))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert n == 2000
    assert peak < size / 10, (peak, size)
