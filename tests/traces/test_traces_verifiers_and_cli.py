"""verifiers v1 traces.jsonl written by verifiers' own writer; the `crf-prime traces ingest` command; the memory bound."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from crf_prime.cli import main
from crf_prime.records import read_states
from crf_prime.traces import IngestReport, detect_format, ingest

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
    assert main(["traces", "ingest", "--paths", str(FIX), str(vf_path), "--out", str(out)]) == 0
    rows = list(read_states(out))
    assert len(rows) == 19 + 2
    assert {r.source.format for r in rows} == {"claude-code", "openhands", "swe-smith", "swe-gym", "verifiers"}
    err = capsys.readouterr().err
    assert "states written" in err and "21" in err
    assert "malformed" in err and "claude_code_session.jsonl:12" in err


def test_cli_ingest_forced_format_and_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.jsonl"
    assert (
        main(["traces", "ingest", "--paths", str(FIX / "swe_gym.jsonl"), "--format", "swe-gym", "--out", str(out)]) == 0
    )
    assert len(out.read_text().splitlines()) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text("nope\n")
    assert (
        main(["traces", "ingest", "--paths", str(bad), "--format", "swe-smith", "--out", str(tmp_path / "x.jsonl")])
        == 2
    )
    assert "bad.jsonl" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()


def test_cli_help_says_channel_3_is_crf_prime_addition(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["traces", "ingest", "--help"]) == 0
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


def test_cli_ingest_mixed_directory_with_format_per_glob(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "metadata.json").write_text(json.dumps({"agent_class": "CodeActAgent", "max_iterations": 30}) + "\n")
    (runs / "traj.json").write_text((FIX / "openhands_v0_trajectory.json").read_text())
    (tmp_path / "session.jsonl").write_text((FIX / "claude_code_session.jsonl").read_text())
    out = tmp_path / "out" / "states.jsonl"
    glob = f"{runs}/traj*.json=openhands"
    assert (
        main(
            [
                "traces",
                "ingest",
                "--paths",
                str(tmp_path / "session.jsonl"),
                str(runs),
                "--format",
                glob,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert [r.source.format for r in read_states(out)] == ["claude-code"] * 5 + ["openhands"] * 4
    err = " ".join(capsys.readouterr().err.split())
    assert "skipped: undetected_file │ 1" in err
    assert f"skipped file {runs / 'metadata.json'}: cannot detect the trace format" in err


def test_cli_ingest_bad_format_fails_at_launch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "traces",
                "ingest",
                "--paths",
                str(FIX),
                "--format",
                "runs/*.json=open-hands",
                "--out",
                str(tmp_path / "s.jsonl"),
            ]
        )
        == 2
    )
    assert "unknown trace format 'open-hands'" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_cli_ingest_nothing_readable_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "metadata.json").write_text(json.dumps({"agent_class": "CodeActAgent"}) + "\n")
    out = tmp_path / "new" / "states.jsonl"
    assert main(["traces", "ingest", "--paths", str(tmp_path / "metadata.json"), "--out", str(out)]) == 5
    err = " ".join(capsys.readouterr().err.split())
    assert "nothing could be ingested from 1 file(s)" in err and "metadata.json: cannot detect" in err
    assert not (tmp_path / "new").exists()


def test_outputs_are_world_readable_whatever_the_umask(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "states.jsonl"
    old = os.umask(0o077)
    try:
        assert main(["traces", "ingest", "--paths", str(FIX / "swe_gym.jsonl"), "--out", str(out)]) == 0
    finally:
        os.umask(old)
    assert [oct(p.stat().st_mode & 0o777) for p in (tmp_path / "a", out.parent, out)] == ["0o755", "0o755", "0o644"]


def _long_gym_row(turns: int, result: str) -> dict:
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "task"}]
    for i in range(turns):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "execute_bash", "arguments": f'{{"i": {i}}}'}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": result},
        ]
    messages.append({"role": "assistant", "content": "done"})
    return {"instance_id": "x__y-1", "run_id": "gpt-4o_maxiter_30", "messages": messages}


def test_context_cap_keeps_task_and_recent_turns(tmp_path: Path) -> None:
    path = tmp_path / "gym.jsonl"
    path.write_text(json.dumps(_long_gym_row(10, "r" * 1000)) + "\n")
    report = IngestReport()
    states = list(ingest([path], "swe-gym", report, max_context_chars=3000))
    last = states[-1]
    # system + task (85 chars) + note, then the last two call/result pairs (1128 chars each) fit in 3000
    assert [m["role"] for m in last.messages] == ["system", "user", "user", "assistant", "tool", "assistant", "tool"]
    assert last.messages[:3] == (
        {"role": "system", "content": "S"},
        {"role": "user", "content": "task"},
        {"role": "user", "content": "[16 earlier messages omitted: context capped at 3000 chars]"},
    )
    assert [m.get("tool_call_id") for m in last.messages[4::2]] == ["c8", "c9"]
    assert report.capped == 8  # states 3..10 (0-based) carry 85 + 1128 * step > 3000 chars before the cap
    uncapped = list(ingest([path], "swe-gym"))
    assert [len(s.messages) for s in uncapped] == [2 + 2 * i for i in range(11)]


def test_cli_prints_estimate_first_and_plain_progress_within_one_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Off a terminal: plain progress lines inside a single file (bytes read), and the size estimate before writing."""
    path = tmp_path / "gym.jsonl"
    path.write_text(
        "".join(json.dumps({**_long_gym_row(20, "r" * 500), "instance_id": f"i{n}"}) + "\n" for n in range(50))
    )
    out = tmp_path / "states.jsonl"
    assert main(["traces", "ingest", "--paths", str(path), "--out", str(out), "--progress-every", "1e-9"]) == 0
    lines = capsys.readouterr().err.splitlines()
    total = f"{path.stat().st_size / 1e6:.1f} MB"
    estimate = next(i for i, line in enumerate(lines) if line.startswith("ingest: will write 1050 states, about "))
    sizing = [i for i, line in enumerate(lines) if line.startswith("sizing: ")]
    progress = [line for line in lines[estimate:] if line.startswith("ingest: ") and " read · " in line]
    assert sizing and max(sizing) < estimate
    assert len(progress) >= 10 and all(f"/ {total} read" in line for line in progress)
    read = [line.split(" / ")[0] for line in progress]  # "ingest: 14.4 kB", ...: bytes read inside the one file
    assert len(set(read)) >= 3 and read[0] != f"ingest: {total}"
    approx = float(lines[estimate].split("about ")[1].split(" MB")[0]) * 1e6
    assert 0.8 < approx / out.stat().st_size < 1.25


@pytest.mark.parametrize(
    "argv", [["--max-context-chars", "-1"], ["--max-observation-chars", "-5"], ["--progress-every", "0"]]
)
def test_cli_numeric_options_checked_at_launch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert main(["traces", "ingest", "--paths", str(FIX), "--out", str(tmp_path / "s.jsonl"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("crf-prime traces ingest: error: ") and argv[0] in err and "greater than" in err
    assert not list(tmp_path.iterdir())


_BLOCK_IN_WRITE_PASS = """
import sys
from crf_prime.cli import main
from crf_prime.traces.ingest import INGESTERS

real, calls = INGESTERS["swe-gym"], []

def blocking(path, report, **kw):
    calls.append(path)
    for state in real(path, report, **kw):
        yield state
        if len(calls) == 2:  # the writing pass (the first pass only sizes): the temp file now holds a state
            print("ready", flush=True)
            sys.stdin.readline()

INGESTERS["swe-gym"] = blocking
sys.exit(main(sys.argv[1:]))
"""


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as for a command started in the background by a shell


@pytest.mark.parametrize(
    ("sig", "preexec"),
    [(signal.SIGTERM, None), (signal.SIGINT, None), (signal.SIGINT, _ignore_sigint)],
    ids=["sigterm", "sigint", "sigint-in-background"],
)
def test_signal_removes_the_temp_output(tmp_path: Path, sig: signal.Signals, preexec) -> None:
    out = tmp_path / "out" / "states.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _BLOCK_IN_WRITE_PASS,
            "traces",
            "ingest",
            "--paths",
            str(FIX / "swe_gym.jsonl"),
            "--out",
            str(out),
        ],
        preexec_fn=preexec,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline() == "ready\n"
        assert [p.name.startswith(".states.jsonl.tmp") for p in out.parent.iterdir()] == [True]
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err  # docs/cli.md: interrupted, temporary files removed
    assert not (tmp_path / "out").exists()
