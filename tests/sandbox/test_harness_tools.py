"""SandboxHarness pieces without vf-eval: tool dispatch and errors, view/edit confinement, budgets, turn cap, the
streamed-completion reassembly against LoopbackOpenAI, and the container path through a real verifiers runtime."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import openai
import pytest
from verifiers.v1.clients import ModelContext
from verifiers.v1.configs.client import EvalClientConfig
from verifiers.v1.runtimes import provision_runtime
from verifiers.v1.runtimes.subprocess import SubprocessConfig
from verifiers.v1.task import TaskData

from crf_prime.harness import SandboxHarness, SandboxHarnessConfig
from crf_prime.harness.executors import RuntimeExecutor, SandboxExecutor
from crf_prime.harness.harness import _complete, _Rollout
from crf_prime.harness.tools import ToolOutcome, format_outcome
from crf_prime.loopback import LoopbackOpenAI, Reply
from crf_prime.sandbox import Sandbox

CONFIG = SandboxHarnessConfig.model_validate(
    {"limits": {"wall_seconds": 10, "memory_mb": 256, "pids": 64, "tmp_size_mb": 16}}
)


def _rollout(workdir: Path, config: SandboxHarnessConfig = CONFIG) -> _Rollout:
    executor = SandboxExecutor(Sandbox(config), workdir, limits=config.limits)
    return _Rollout(executor, config)


@pytest.mark.bwrap
async def test_tool_errors_come_back_as_results(tmp_path: Path) -> None:
    r = _rollout(tmp_path)
    assert await r.call("rm_rf", "{}") == "error: unknown tool 'rm_rf'; available tools: bash, view, edit, submit"
    assert (await r.call("bash", "{not json")).startswith("error: invalid JSON in tool arguments")
    assert await r.call("bash", "[1]") == "error: tool arguments must be a JSON object, got list"
    assert await r.call("bash", "{}") == "error: bad arguments for bash: 'command'"
    assert await r.call("bash", json.dumps({"command": "  "})) == (
        "error: bad arguments for bash: 'command' must be a non-empty string"
    )


@pytest.mark.bwrap
async def test_bash_view_edit_run_in_the_box(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to("/etc/shadow")
    r = _rollout(tmp_path)
    out = await r.call("edit", json.dumps({"path": "a.py", "old_str": "", "new_str": "x = 1\ny = 2\n"}))
    assert out == "wrote a.py (12 characters)"
    assert await r.call("edit", json.dumps({"path": "a.py", "old_str": "y = 2", "new_str": "y = 3"})) == "edited a.py"
    assert (tmp_path / "a.py").read_text() == "x = 1\ny = 3\n"
    out = await r.call("edit", json.dumps({"path": "a.py", "old_str": "nope", "new_str": ""}))
    assert out == "error: old_str occurs 0 times in a.py; it must occur exactly once\n[exit code: 1]"
    assert await r.call("view", json.dumps({"path": "a.py", "start_line": 2})) == "     2\ty = 3"
    assert await r.call("view", json.dumps({"path": "."})) == "a.py\nlink"
    # a planted link to a host secret resolves inside the box, where the secret is unreadable
    assert await r.call("view", json.dumps({"path": "link"})) == (
        "error: cannot view link: Permission denied\n[exit code: 1]"
    )
    out = await r.call("edit", json.dumps({"path": "/usr/evil.py", "old_str": "", "new_str": "x"}))
    assert out == "error: cannot edit /usr/evil.py: Read-only file system\n[exit code: 1]"
    assert not Path("/usr/evil.py").exists()
    assert await r.call("bash", json.dumps({"command": "echo $PWD"})) == f"{tmp_path.resolve()}"
    assert await r.call("submit", "{}") == "submitted" and r.submitted


@pytest.mark.bwrap
async def test_command_timeout_and_rollout_budget(tmp_path: Path) -> None:
    config = CONFIG.model_copy(update={"rollout_command_seconds": 1.5})
    r = _rollout(tmp_path, config)
    out = await r.call("bash", json.dumps({"command": "sleep 30", "timeout": 1}))
    assert out == "error: the command hit the sandbox's wall-clock limit of 1 s"
    out = await r.call("bash", json.dumps({"command": "sleep 30"}))  # only ~0.5 s of budget left
    assert out.startswith("error: the command hit the sandbox's wall-clock limit of 0.")
    assert await r.call("bash", json.dumps({"command": "true"})) == (
        "error: this rollout's command budget of 1.5 s is spent"
    )
    assert r.exhausted


def test_format_outcome_truncates_the_middle() -> None:
    text = format_outcome(ToolOutcome(0, "a" * 50 + "b" * 50, ""), max_chars=20)
    assert text == "a" * 10 + "\n[... 80 characters truncated ...]\n" + "b" * 10
    assert format_outcome(ToolOutcome(0, "", ""), max_chars=20) == "(no output)"
    assert format_outcome(ToolOutcome(2, "", "boom\n"), max_chars=100) == "[stderr]\nboom\n[exit code: 2]"


async def test_complete_reassembles_streamed_tool_calls() -> None:
    calls = [
        {"name": "bash", "arguments": json.dumps({"command": "ls -la /tmp"})},
        {"name": "submit", "arguments": "{}"},
    ]
    with LoopbackOpenAI([Reply(content="let me look", tool_calls=calls)]) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        message = await _complete(client, "m", [{"role": "user", "content": "go"}], [])
        await client.close()
    assert message["content"] == "let me look"
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]] == [
        ("bash", calls[0]["arguments"]),
        ("submit", "{}"),
    ]
    assert all(c["id"].startswith("call_") for c in message["tool_calls"])


@pytest.mark.bwrap
async def test_launch_stops_at_turn_cap_and_confines_commands(tmp_path: Path) -> None:
    bash = {"name": "bash", "arguments": json.dumps({"command": "cat /etc/shadow"})}
    config = CONFIG.model_copy(update={"max_turns": 3})
    harness = SandboxHarness(config)
    async with provision_runtime(SubprocessConfig()) as runtime:
        with LoopbackOpenAI([Reply(tool_calls=[bash])] * 5) as server:
            ctx = ModelContext(model="scripted", client=EvalClientConfig(base_url=server.base_url))
            result = await harness.launch(
                ctx, SimpleNamespace(stop_condition=None), runtime, server.base_url, "k", {}, TaskData(prompt="hi")
            )
            requests = list(server.requests)
    assert result.exit_code == 0
    assert result.stdout.startswith("turns=3 submitted=False")
    assert len(requests) == 3
    assert requests[-1]["messages"][-1]["content"] == "[stderr]\ncat: /etc/shadow: Permission denied\n[exit code: 1]"


async def test_container_path_uses_runtime_run() -> None:
    async with provision_runtime(SubprocessConfig()) as runtime:
        executor = RuntimeExecutor(runtime, output_bytes=10)
        out = await executor.run(["sh", "-c", "echo 0123456789abcdef; exit 3"], timeout_s=10)
        assert out == ToolOutcome(3, "0123456789\n[... output truncated: 7 more bytes not shown ...]\n", "", None, None)
        out = await executor.run(["sleep", "30"], timeout_s=0.5)
        assert out.limit_hit == "wall" and out.exit_code is None


def test_unknown_tool_in_config_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"harness.tools: unknown tool\(s\) \['shell'\]"):
        SandboxHarness(SandboxHarnessConfig(tools=["bash", "shell"]))
