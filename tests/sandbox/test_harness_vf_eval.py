"""SandboxHarness end to end: real ``vf-eval`` (subprocess CLI) on a tiny taskset, the model played by LoopbackOpenAI
streaming a scripted agent's tool-call deltas. The agent's attacks must come back as errors in the trace."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from vf_cli_support import only_episode, tool_messages, vf_eval

from crf_prime.loopback import LoopbackOpenAI, Reply

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

FIXTURE = Path(__file__).parent / "harness_fixture"


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
            "PYTHONPATH": os.pathsep.join([str(FIXTURE), os.environ.get("PYTHONPATH", "")]),
            "HOME": os.environ.get("HOME", "/root"),
            **(env_extra or {}),
        }
        traces = vf_eval("crf-tiny-box", server.base_url, tmp_path / "outputs", *extra, env=env, timeout=240)
        requests = list(server.requests)
    return only_episode(traces), requests


def _check_episode(episode: dict, requests: list[dict], harness_id: str) -> None:
    (trace,) = episode["traces"]
    assert trace["ok"], trace["errors"]
    assert trace["agent"]["config"]["harness"]["id"] == harness_id
    assert trace["rewards"]["wrote_hello"]["score"] == 1.0  # tests/check.txt stayed intact (protected)
    assert trace["stop_condition"] == "agent_completed"
    assert len(requests) == 5
    # not streamed: verifiers' TrainClient, which prime-rl rolls out through, refuses streaming requests
    assert all(not r.get("stream") for r in requests)
    assert [t["function"]["name"] for t in requests[0]["tools"]] == ["bash", "view", "edit", "submit"]
    tools = tool_messages(trace)
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
