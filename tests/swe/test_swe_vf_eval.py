"""A whole rollout of the swebench-lite taskset through the real ``vf-eval`` CLI: the default harness (crf-prime's
SandboxHarness) edits the mini fixture's repo in the bubblewrap box, the model is LoopbackOpenAI streaming a
scripted agent, and the reward runs the hidden tests sandboxed and grades them with swebench's rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from vf_cli_support import tool_messages, vf_eval

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


class _Rollouts:
    """The scripted model for rollouts of one task in one run: a rollout's first request (no assistant turn yet) takes
    the next script of ``scripts``; a later one continues the script its first assistant turn came from."""

    def __init__(self, scripts: list[list[Reply]]) -> None:
        self.waiting = list(scripts)
        self.started: dict[str, list[Reply]] = {}
        self.served: list[tuple[str, dict]] = []
        """(script key, request body) in arrival order."""

    def __call__(self, body: dict) -> Reply:
        turns = [m for m in body["messages"] if m["role"] == "assistant"]
        if not turns:
            script = self.waiting.pop(0)
            key = script[0].tool_calls[0]["name"]  # scripts start with different tools
            self.started[key] = script
        else:
            key = turns[0]["tool_calls"][0]["function"]["name"]
            script = self.started[key]
        self.served.append((key, body))
        return script[len(turns)]


def test_vf_eval_agent_fix_is_resolved_and_no_change_scores_zero_with_a_hint(tmp_path: Path) -> None:
    """One vf-eval run, two rollouts of the task (``-r 2``): one agent fixes the bug (resolved), the other submits
    without a change (0, a hint naming the failing test)."""
    mini = tmp_path / "mini"
    build_mini_swebench(mini)
    model = _Rollouts([FIX, GIVE_UP])
    with LoopbackOpenAI(model) as server:
        dataset = [
            "--env.taskset.dataset",
            str(mini / "instances.jsonl"),
            "--env.taskset.repos-dir",
            str(mini / "repos"),
        ]
        found = vf_eval("swebench-lite", server.base_url, tmp_path / "outputs", *dataset, "-r", "2", timeout=300)
    traces = [t for line in found.read_text().splitlines() for t in json.loads(line)["traces"]]
    assert not model.waiting and sorted(key for key, _ in model.served) == ["submit"] + ["view"] * len(FIX)
    fixed, idle = sorted(traces, key=lambda t: -len(tool_messages(t)))

    assert fixed["ok"], fixed["errors"]
    assert fixed["agent"]["config"]["harness"]["id"] == "swebench-lite"  # the taskset's exported default harness
    requests = [body for key, body in model.served if key == "view"]
    first_user = next(m for m in requests[0]["messages"] if m["role"] == "user")
    assert "median() is wrong for lists with an even number of elements" in first_user["content"]
    view, edit, pytest_run = tool_messages(fixed)
    assert "return s[len(s) // 2]" in view
    assert "edited ministats/stats.py" in edit
    assert "3 passed" in pytest_run  # the agent sees the base tests only: the test patch is withheld
    assert fixed["rewards"]["resolved"]["score"] == 1.0
    assert fixed["metrics"]["f2p_pass"] == 1.0 and fixed["metrics"]["p2p_pass"] == 1.0
    assert fixed["info"]["swebench"]["resolution"] == "RESOLVED_FULL"
    assert "diff --git a/ministats/stats.py" in fixed["info"]["swebench"]["model_patch"]

    assert idle["ok"], idle["errors"]
    assert tool_messages(idle) == []
    assert idle["rewards"]["resolved"]["score"] == 0.0
    assert idle["metrics"]["f2p_pass"] == 0.0
    assert "tests/test_stats.py::test_median_even" in idle["info"]["hint"]
