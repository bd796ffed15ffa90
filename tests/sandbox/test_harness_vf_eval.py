"""SandboxHarness end to end: real ``vf-eval`` (subprocess CLI) on a tiny taskset, the model played by LoopbackOpenAI
streaming a scripted agent's tool-call deltas. The agent's attacks must come back as errors in the trace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crf_prime.loopback import LoopbackOpenAI, Reply

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

FIXTURE = Path(__file__).parent / "harness_fixture"
VF_EVAL = Path(sys.executable).with_name("vf-eval")


def _call(name: str, **args: object) -> dict:
    return {"name": name, "arguments": json.dumps(args)}


def _agent_script(port: int) -> list[Reply]:
    return [
        Reply(tool_calls=[_call("bash", command="cat /etc/shadow")]),
        Reply(
            reasoning="try the network",
            tool_calls=[
                _call(
                    "bash",
                    command=f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)\"",
                )
            ],
        ),
        Reply(tool_calls=[_call("edit", path="hello.txt", old_str="", new_str="hi\n")]),
        Reply(tool_calls=[_call("bash", command="echo hacked >> tests/check.txt"), _call("view", path="hello.txt")]),
        Reply(content="done", tool_calls=[_call("submit", summary="wrote hello.txt")]),
    ]


def _vf_eval(tmp_path: Path, *extra: str, env_extra: dict[str, str] | None = None) -> tuple[dict, list[dict]]:
    replies: list[Reply] = []
    with LoopbackOpenAI(lambda body: replies.pop(0)) as server:
        port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
        replies += _agent_script(port)  # the agent attacks the model server's own host port
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(FIXTURE), os.environ.get("PYTHONPATH", "")]),
            "CRF_LOOPBACK_KEY": "test",
            "HOME": os.environ.get("HOME", "/root"),
            **(env_extra or {}),
        }
        out = tmp_path / "outputs"
        cmd = [
            str(VF_EVAL),
            "crf-tiny-box",
            "-n",
            "1",
            "-m",
            "scripted",
            "--client.base-url",
            server.base_url,
            "--client.api-key-var",
            "CRF_LOOPBACK_KEY",
            "--env.agent.runtime.type",
            "subprocess",
            "--no-push",
            "--no-rich",
            "-o",
            str(out),
            *extra,
        ]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
        requests = list(server.requests)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (traces,) = out.glob("*/traces.jsonl")
    (line,) = traces.read_text().splitlines()
    return json.loads(line), requests


def _tool_messages(trace: dict) -> list[str]:
    return [n["message"]["content"] for n in trace["nodes"] if n["message"]["role"] == "tool"]


def _check_episode(episode: dict, requests: list[dict], harness_id: str) -> None:
    (trace,) = episode["traces"]
    assert trace["ok"], trace["errors"]
    assert trace["agent"]["config"]["harness"]["id"] == harness_id
    assert trace["rewards"]["wrote_hello"]["score"] == 1.0  # tests/check.txt stayed intact (protected)
    assert trace["stop_condition"] == "agent_completed"
    assert len(requests) == 5
    assert all(r["stream"] is True and r["stream_options"] == {"include_usage": True} for r in requests)
    assert [t["function"]["name"] for t in requests[0]["tools"]] == ["bash", "view", "edit", "submit"]
    tools = _tool_messages(trace)
    shadow, socket_attempt, edit, protected_write, view = tools
    assert shadow == "[stderr]\ncat: /etc/shadow: Permission denied\n[exit code: 1]"
    assert "ConnectionRefusedError: [Errno 111] Connection refused" in socket_attempt
    assert socket_attempt.endswith("[exit code: 1]")
    assert edit == "wrote hello.txt (3 characters)"
    assert "tests/check.txt: Read-only file system" in protected_write
    assert view == "     1\thi"


def test_vf_eval_default_harness_confines_agent(tmp_path: Path) -> None:
    episode, requests = _vf_eval(tmp_path)
    _check_episode(episode, requests, harness_id="crf-tiny-box")  # the taskset's exported default harness


def test_vf_eval_harness_id_crf_sandbox(tmp_path: Path) -> None:
    episode, requests = _vf_eval(
        tmp_path, "--env.agent.harness.id", "crf-sandbox", env_extra={"CRF_TINY_BOX_NO_HARNESS": "1"}
    )
    _check_episode(episode, requests, harness_id="crf-sandbox")
