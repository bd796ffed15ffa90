"""LLM-written hints through the teacher pool (client + budget ledger + journal) against a real OpenAI-compatible
server on loopback, configured like a teachers.toml entry."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from test_hints_attach import make_trace

from crf_prime.hints import FailingTest, HintWriterConfig, LLMHintWriter, attach_hint_async, hint_writer
from crf_prime.loopback import LoopbackOpenAI, Reply
from crf_prime.teachers import BudgetConfig, ConfigError, TeacherConfig, read_journal

TEMPLATED = "- `bash` failed: exit code 1, E assert 1 == 2"


def teacher(base_url: str, **kw) -> TeacherConfig:
    return TeacherConfig(name="coach", model="scripted", base_url=base_url, api_key_var="", **kw)


def failing_trace(command: str = "pytest -x"):
    return make_trace([([("bash", f'{{"command": "{command}"}}')], ["E   assert 1 == 2\nexit code: 1"])])


async def test_llm_hint_is_stored_and_prompt_carries_task_and_errors(tmp_path: Path):
    with LoopbackOpenAI([Reply(content="Run the one failing test alone and read its assertion.\n\n")]) as server:
        writer = LLMHintWriter(teacher(server.base_url), journal=tmp_path / "hints.jsonl")
        trace = failing_trace()
        hint = await attach_hint_async(trace, writer=writer)
        await writer.close()
    assert hint == "Run the one failing test alone and read its assertion."
    assert trace.info["hint"] == hint and trace.info["hint_source"] == "llm"
    assert trace.info["hint_cached"] is False and "hint_error" not in trace.info
    (request,) = server.requests
    assert request["max_tokens"] == 512  # the hint cap, below the teacher's sampling.max_tokens (2048)
    system, user = request["messages"]
    assert system["role"] == "system" and "Do not solve the task" in system["content"]
    assert user["content"].startswith("TASK:\nfix it\n\nEND OF THE ATTEMPT:\n")
    assert 'bash({"command": "pytest -x"})' in user["content"]
    assert "ERRORS FOUND:\n" + TEMPLATED in user["content"]
    (row,) = read_journal(tmp_path / "hints.jsonl")
    assert row.ok and row.teacher == "coach" and row.state_id.startswith("hint:") and row.trace_id == trace.id


async def test_second_identical_request_is_served_from_the_journal(tmp_path: Path):
    journal = tmp_path / "hints.jsonl"
    with LoopbackOpenAI([Reply(content="Read the assertion.", cost=0.003)]) as server:
        first = LLMHintWriter(teacher(server.base_url), journal=journal)
        t1 = failing_trace()
        await attach_hint_async(t1, writer=first)
        t2 = failing_trace()  # same episode content, asked again in the same run
        await attach_hint_async(t2, writer=first)
        await first.close()
        again = LLMHintWriter(teacher(server.base_url), journal=journal)  # a re-run on the same journal
        t3 = failing_trace()
        await attach_hint_async(t3, writer=again)
        await again.close()
    assert len(server.requests) == 1  # paid once
    assert [t.info["hint"] for t in (t1, t2, t3)] == ["Read the assertion."] * 3
    assert [t.info["hint_cached"] for t in (t1, t2, t3)] == [False, True, True]
    assert [t.info["hint_cost_usd"] for t in (t1, t2, t3)] == [0.003, 0.0, 0.0]
    assert len(list(read_journal(journal))) == 1


PRICED = {"price_out_per_mtok": 10.0}
"""A hint reserves 512 tokens x $10/M = $0.00512 (input unpriced); the scripted answer costs $0.003."""


async def test_exhausted_budget_keeps_templated_hint_and_records_why(tmp_path: Path):
    script = [Reply(content="Read the assertion.", cost=0.003)]
    with LoopbackOpenAI(script) as server:
        writer = LLMHintWriter(
            teacher(server.base_url, **PRICED), journal=tmp_path / "hints.jsonl", budget=BudgetConfig(job_usd=0.008)
        )
        paid = failing_trace()
        await attach_hint_async(paid, writer=writer)
        refused = failing_trace("pytest -x tests/test_b.py")  # another episode: another journal key
        hint = await attach_hint_async(refused, writer=writer)
        await writer.close()
    assert len(server.requests) == 1
    assert paid.info["hint_source"] == "llm"
    assert hint == "- `bash` failed: exit code 1, E assert 1 == 2" and refused.info["hint_source"] == "template"
    # $0.003 spent + $0.00512 worst case > $0.008: refused before it is sent, the cap is never crossed
    assert refused.info["hint_error"] == (
        f"BudgetExhausted: hint budget reached: spent $0.0030 of $0.0080 on {tmp_path / 'hints.jsonl'}; "
        "the next hint's worst case does not fit"
    )
    assert refused.info["hint_cost_usd"] == 0.0


async def test_per_episode_budget_refuses_a_second_paid_hint_for_the_same_episode(tmp_path: Path):
    with LoopbackOpenAI([Reply(content="Read the assertion.", cost=0.003)]) as server:
        writer = LLMHintWriter(
            teacher(server.base_url, **PRICED),
            journal=tmp_path / "hints.jsonl",
            budget=BudgetConfig(per_trace_usd=0.008),
        )
        trace = failing_trace()
        await attach_hint_async(trace, writer=writer)
        # the same episode scored again with a failing test: a new prompt, but the episode's budget is spent
        hint = await attach_hint_async(trace, writer=writer, failing_tests=[FailingTest(name="t::a", message="no")])
        await writer.close()
    assert len(server.requests) == 1
    assert trace.info["hint_source"] == "template" and hint == "- Test `t::a` failed.\n" + TEMPLATED
    assert trace.info["hint_error"] == (
        f"BudgetExhausted: per-episode hint budget of $0.0080 reached for episode {trace.id!r}: "
        "the next hint's worst case does not fit"
    )


async def test_per_episode_cap_holds_for_concurrent_hints_of_one_episode(tmp_path: Path):
    """Eight hints of one episode at once (different prompts) under a cap that fits one worst case: one is paid."""
    with LoopbackOpenAI(lambda body: Reply(content="Read the assertion.", cost=0.005, delay_s=0.05)) as server:
        writer = LLMHintWriter(
            teacher(server.base_url, max_concurrency=8, **PRICED),
            journal=tmp_path / "hints.jsonl",
            budget=BudgetConfig(per_trace_usd=0.006),
        )
        trace = failing_trace()
        tests = [[FailingTest(name=f"t::{i}", message="no")] for i in range(8)]
        copies = [trace.model_copy(deep=True) for _ in tests]  # one episode (same trace id), eight scorings
        await asyncio.gather(
            *(attach_hint_async(c, writer=writer, failing_tests=f) for c, f in zip(copies, tests, strict=True))
        )
        await writer.close()
    assert len(server.requests) == 1 and trace.id == copies[0].id
    assert sorted(c.info["hint_source"] for c in copies) == ["llm"] + ["template"] * 7
    assert sum(r.cost_usd for r in read_journal(tmp_path / "hints.jsonl")) == pytest.approx(0.005)


def test_a_capped_writer_needs_prices(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"price_in_per_mtok / price_out_per_mtok"):
        LLMHintWriter(teacher("http://127.0.0.1:9/v1"), journal=tmp_path / "h.jsonl", budget=BudgetConfig(job_usd=1))


async def test_clean_episode_makes_no_call(tmp_path: Path):
    with LoopbackOpenAI([]) as server:
        writer = LLMHintWriter(teacher(server.base_url), journal=tmp_path / "hints.jsonl")
        trace = make_trace([([("bash", '{"command": "ls"}')], ["ok"])])
        assert await attach_hint_async(trace, writer=writer) == ""
        await writer.close()
    assert server.requests == [] and trace.info["hint_source"] == "template"


async def test_server_error_keeps_templated_hint_and_records_error(tmp_path: Path):
    script = [Reply(status=500, content="down")] * 2
    with LoopbackOpenAI(script) as server:
        writer = LLMHintWriter(teacher(server.base_url, max_attempts=2), journal=tmp_path / "hints.jsonl")
        trace = failing_trace()
        hint = await attach_hint_async(trace, writer=writer)
        await writer.close()
    assert len(server.requests) == 2  # max_attempts honoured by the pool's client
    assert hint == TEMPLATED and trace.info["hint_source"] == "template"
    assert trace.info["hint_error"].startswith("InternalServerError")
    (row,) = read_journal(tmp_path / "hints.jsonl")
    assert not row.ok and row.error_type == "server_error"  # journaled, and asked again on a re-run


def write_teachers(path: Path, base_url: str) -> Path:
    path.write_text(
        f'[budget]\njob_usd = 3.0\nper_trace_usd = 0.5\n\n[[teachers]]\nname = "coach"\nmodel = "m"\n'
        f'base_url = "{base_url}"\napi_key_var = ""\nprice_out_per_mtok = 1.0\n'
    )
    return path


def test_writer_from_config_takes_teacher_and_caps_from_the_teachers_file(tmp_path: Path):
    path = write_teachers(tmp_path / "teachers.toml", "http://127.0.0.1:9/v1")
    cfg = HintWriterConfig(teachers=path, name="coach", journal=tmp_path / "j.jsonl", per_episode_usd=0.1)
    writer = LLMHintWriter.from_config(cfg)
    assert (writer.teacher.model, writer.budget) == ("m", BudgetConfig(job_usd=3.0, per_trace_usd=0.1))
    assert hint_writer(cfg) is hint_writer(HintWriterConfig(**cfg.model_dump()))  # one ledger per config
    assert hint_writer(None) is None
    with pytest.raises(ConfigError, match=re.escape("no [[teachers]] entry named 'other' (hint_writer.name")):
        LLMHintWriter.from_config(HintWriterConfig(teachers=path, name="other"))


def test_writer_config_rejects_unknown_keys():
    with pytest.raises(ValueError, match="budget"):
        HintWriterConfig.model_validate({"name": "coach", "budget": 1.0})


def test_writer_caps_without_the_teachers_prices_name_the_file_and_entry(tmp_path: Path):
    path = tmp_path / "teachers.toml"
    path.write_text(
        '[[teachers]]\nname = "judge"\nmodel = "j"\nbase_url = "http://127.0.0.1:9/v1"\napi_key_var = ""\n'
        '[[teachers]]\nname = "coach"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\napi_key_var = ""\n'
    )
    cfg = HintWriterConfig(teachers=path, name="coach", journal=tmp_path / "j.jsonl", budget_usd=1.0)
    with pytest.raises(ConfigError, match=re.escape(f"{path}: teachers[1 name='coach'].price_in_per_mtok")):
        LLMHintWriter.from_config(cfg)
