"""LLM-written hints against a real OpenAI-compatible server on loopback, configured like a teachers.toml entry."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_hints_attach import make_trace

from crf_prime.hints import LLMHintWriter, attach_hint_async
from crf_prime.loopback import LoopbackOpenAI, Reply
from crf_prime.teachers import ConfigError, TeacherConfig


def teacher(base_url: str, **kw) -> TeacherConfig:
    return TeacherConfig(name="coach", model="scripted", base_url=base_url, api_key_var="", **kw)


def failing_trace():
    return make_trace([([("bash", '{"command": "pytest -x"}')], ["E   assert 1 == 2\nexit code: 1"])])


async def test_llm_hint_is_stored_and_prompt_carries_task_and_errors():
    with LoopbackOpenAI([Reply(content="Run the one failing test alone and read its assertion.\n\n")]) as server:
        writer = LLMHintWriter(teacher(server.base_url))
        trace = failing_trace()
        hint = await attach_hint_async(trace, writer=writer)
        await writer.close()
    assert hint == "Run the one failing test alone and read its assertion."
    assert trace.info["hint"] == hint and trace.info["hint_source"] == "llm"
    (request,) = server.requests
    system, user = request["messages"]
    assert system["role"] == "system" and "Do not solve the task" in system["content"]
    assert user["content"].startswith("TASK:\nfix it\n\nEND OF THE ATTEMPT:\n")
    assert 'bash({"command": "pytest -x"})' in user["content"]
    assert "ERRORS FOUND:\n- `bash` failed: exit code 1, E assert 1 == 2" in user["content"]


async def test_clean_episode_makes_no_call():
    with LoopbackOpenAI([]) as server:
        writer = LLMHintWriter(teacher(server.base_url))
        trace = make_trace([([("bash", '{"command": "ls"}')], ["ok"])])
        assert await attach_hint_async(trace, writer=writer) == ""
        await writer.close()
    assert server.requests == [] and trace.info["hint_source"] == "template"


async def test_failed_writer_keeps_templated_hint_and_records_error():
    script = [Reply(status=500, content="down")] * 2
    with LoopbackOpenAI(script) as server:
        writer = LLMHintWriter(teacher(server.base_url, max_attempts=2))
        trace = failing_trace()
        hint = await attach_hint_async(trace, writer=writer)
        await writer.close()
    assert len(server.requests) == 2  # max_attempts honoured
    assert hint == "- `bash` failed: exit code 1, E assert 1 == 2"
    assert trace.info["hint_source"] == "template"
    assert trace.info["hint_error"].startswith("InternalServerError")


def test_writer_from_teachers_toml(tmp_path: Path):
    path = tmp_path / "teachers.toml"
    path.write_text('[[teachers]]\nname = "coach"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\napi_key_var = ""\n')
    assert LLMHintWriter.from_teachers_toml(path, "coach").teacher.model == "m"
    with pytest.raises(ConfigError, match="no \\[\\[teachers\\]\\] entry named 'other'"):
        LLMHintWriter.from_teachers_toml(path, "other")
