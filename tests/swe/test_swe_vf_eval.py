"""A whole rollout of the swebench-lite taskset through the real ``vf-eval`` CLI: the default harness (crf-prime's
SandboxHarness) edits the mini fixture's repo in the bubblewrap box, the model is LoopbackOpenAI streaming a
scripted agent, and the reward runs the hidden tests sandboxed and grades them with swebench's rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from vf_cli_support import only_episode, tool_messages, vf_eval

from crf_prime.loopback import LoopbackOpenAI, Reply
from crf_prime.swe.fixture import build_mini_swebench

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


def _call(name: str, **args: object) -> dict:
    return {"name": name, "arguments": json.dumps(args)}


FIX = [
    Reply(tool_calls=[_call("view", path="ministats/stats.py")]),
    Reply(
        tool_calls=[
            _call(
                "edit",
                path="ministats/stats.py",
                old_str="    return s[len(s) // 2]\n",
                new_str="    mid = len(s) // 2\n    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2\n",
            )
        ]
    ),
    Reply(tool_calls=[_call("bash", command="python -m pytest -q -p no:cacheprovider tests 2>&1 | tail -1")]),
    Reply(content="fixed", tool_calls=[_call("submit", summary="average the middle pair")]),
]

GIVE_UP = [Reply(content="cannot reproduce", tool_calls=[_call("submit", summary="no change")])]


def _vf_eval(tmp_path: Path, script: list[Reply]) -> tuple[dict, list[dict]]:
    mini = tmp_path / "mini"
    build_mini_swebench(mini)
    replies = list(script)
    with LoopbackOpenAI(lambda body: replies.pop(0)) as server:
        dataset = [
            "--env.taskset.dataset",
            str(mini / "instances.jsonl"),
            "--env.taskset.repos-dir",
            str(mini / "repos"),
        ]
        traces = vf_eval("swebench-lite", server.base_url, tmp_path / "outputs", *dataset, timeout=300)
        requests = list(server.requests)
    (trace,) = only_episode(traces)["traces"]
    return trace, requests


def test_vf_eval_agent_fix_is_resolved(tmp_path: Path) -> None:
    trace, requests = _vf_eval(tmp_path, FIX)
    assert trace["ok"], trace["errors"]
    assert trace["agent"]["config"]["harness"]["id"] == "swebench-lite"  # the taskset's exported default harness
    assert len(requests) == 4
    first_user = next(m for m in requests[0]["messages"] if m["role"] == "user")
    assert "median() is wrong for lists with an even number of elements" in first_user["content"]
    view, edit, pytest_run = tool_messages(trace)
    assert "return s[len(s) // 2]" in view
    assert "edited ministats/stats.py" in edit
    assert "3 passed" in pytest_run  # the agent sees the base tests only: the test patch is withheld
    assert trace["rewards"]["resolved"]["score"] == 1.0
    assert trace["metrics"]["f2p_pass"] == 1.0 and trace["metrics"]["p2p_pass"] == 1.0
    assert trace["info"]["swebench"]["resolution"] == "RESOLVED_FULL"
    assert "diff --git a/ministats/stats.py" in trace["info"]["swebench"]["model_patch"]


def test_vf_eval_no_change_scores_zero_and_writes_hint(tmp_path: Path) -> None:
    trace, _ = _vf_eval(tmp_path, GIVE_UP)
    assert trace["ok"], trace["errors"]
    assert trace["rewards"]["resolved"]["score"] == 0.0
    assert trace["metrics"]["f2p_pass"] == 0.0
    assert "tests/test_stats.py::test_median_even" in trace["info"]["hint"]
