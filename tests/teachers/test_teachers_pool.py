"""Teacher pool on the asyncio backend against a loopback server: budget stop and resume, exclusion, tiers, CLI."""

from __future__ import annotations

import json
import math

import pytest
from teachers_helpers import (
    Router,
    answer,
    make_state,
    pool_config,
    queued_run,
    replay_argv,
    teacher,
    write_states,
    write_teachers_toml,
)

from crf_prime.cli import main
from crf_prime.loopback import LoopbackOpenAI, Reply
from crf_prime.records.journal import read_journal
from crf_prime.teachers.backends import AsyncioBackend
from crf_prime.teachers.journal import intents_path, read_intents
from crf_prime.teachers.ledger import Ledger
from crf_prime.teachers.pool import TeacherPool
from crf_prime.teachers.replay import replay_async

pytestmark = pytest.mark.timeout(120)

WORST_1C = {"price_out_per_mtok": 100.0, "sampling": {"max_tokens": 100}}
"""Prices under which every call reserves exactly $0.01 (output priced only, 100 tokens at most)."""


async def test_job_budget_stops_sending_and_resume_sends_only_the_rest(tmp_path):
    router = Router(lambda model, sid, n: answer(cost=0.01))
    states = write_states(tmp_path / "states.jsonl", [make_state(i) for i in range(8)])
    with LoopbackOpenAI(router) as server:
        t = teacher("a", server.base_url, max_concurrency=1, **WORST_1C)
        cfg = pool_config([t], window=1, budget={"job_usd": 0.035})
        report = await replay_async(states, cfg, tmp_path / "out")
        # each call reserves $0.01: sent at spend 0.00, 0.01, 0.02; at 0.03 the next worst case would cross $0.035
        assert len(server.requests) == 3
        assert report.budget_stopped.startswith("job budget reached: spent $0.0300 of $0.0350;")
        assert "--budget.job-usd" in report.budget_stopped
        assert report.cost_journal_usd == pytest.approx(0.03)

        cfg2 = cfg.model_copy(update={"budget": cfg.budget.model_copy(update={"job_usd": 1.0})})
        report2 = await replay_async(states, cfg2, tmp_path / "out")
    assert report2.budget_stopped == ""
    assert (report2.calls_sent, report2.calls_from_journal) == (5, 3)
    assert router.duplicates() == {} and len(server.requests) == 8
    rows = list(read_journal(tmp_path / "out" / "journal.jsonl"))
    assert sorted(r.state_id for r in rows) == [f"s{i:04d}" for i in range(8)]


async def test_spend_never_exceeds_the_cap_with_calls_in_flight(tmp_path):
    router = Router(lambda model, sid, n: answer(cost=0.01, delay_s=0.05))
    states = write_states(tmp_path / "states.jsonl", [make_state(i) for i in range(40)])
    with LoopbackOpenAI(router) as server:
        t = teacher("a", server.base_url, max_concurrency=4, **WORST_1C)
        cfg = pool_config([t], window=8, budget={"job_usd": 0.1})
        report = await replay_async(states, cfg, tmp_path / "out")
    assert report.budget_stopped
    # every call costs its whole reservation here: the cap allows 9 or 10 of them (float sums), never 11
    assert 0.09 - 1e-9 <= report.cost_journal_usd <= 0.1
    assert len(server.requests) == round(report.cost_journal_usd / 0.01)


async def test_slot_freed_before_the_journal_sync_still_admits_against_the_booked_spend(tmp_path):
    """One slot, many states waiting for it: the pool frees the slot before the journal fsync, so the next call is
    admitted while the previous answer is still being written. Its cost must already count: exactly the calls
    that fit under the cap are sent, as with a slot held through the fsync."""
    router = Router(lambda model, sid, n: answer(cost=0.01))
    states = write_states(tmp_path / "states.jsonl", [make_state(i) for i in range(12)])
    with LoopbackOpenAI(router) as server:
        t = teacher("a", server.base_url, max_concurrency=1, **WORST_1C)
        cfg = pool_config([t], window=12, budget={"job_usd": 0.035})
        report = await replay_async(states, cfg, tmp_path / "out")
    assert len(server.requests) == 3 and report.cost_journal_usd == pytest.approx(0.03)
    assert len(list(read_journal(tmp_path / "out" / "journal.jsonl"))) == 3


async def test_per_trace_budget_skips_only_that_trace(tmp_path):
    router = Router(lambda model, sid, n: answer(cost=0.01))
    rows = [make_state(i, trace="big") for i in range(5)] + [make_state(i, trace="small") for i in range(5, 7)]
    states = write_states(tmp_path / "states.jsonl", rows)
    with LoopbackOpenAI(router) as server:
        t = teacher("a", server.base_url, max_concurrency=1, **WORST_1C)
        cfg = pool_config([t], window=1, budget={"per_trace_usd": 0.02})
        report = await replay_async(states, cfg, tmp_path / "out")
    asked = sorted(sid for _, sid in router.calls)
    assert asked == ["s0000", "s0001", "s0005", "s0006"]
    assert report.budget_skipped_calls == 3 and report.budget_stopped == ""


async def test_same_family_teacher_is_excluded_and_reported(tmp_path):
    router = Router(lambda model, sid, n: answer())
    rows = [make_state(0, family="anthropic"), make_state(1, family="qwen"), make_state(2, family="")]
    states = write_states(tmp_path / "states.jsonl", rows)
    with LoopbackOpenAI(router) as server:
        teachers = [
            teacher("claude", server.base_url, model_family="anthropic"),
            teacher("qwen", server.base_url, model_family="qwen"),
        ]
        report = await replay_async(states, pool_config(teachers), tmp_path / "out")
        asked = sorted(router.calls)
        assert asked == [
            ("model-claude", "s0001"),
            ("model-claude", "s0002"),
            ("model-qwen", "s0000"),
            ("model-qwen", "s0002"),
        ]
        stats = {s.teacher: s for s in report.teachers}
        assert stats["claude"].excluded_same_family == 1 and stats["qwen"].excluded_same_family == 1
        assert report.excluded_same_family == 2

        router.calls.clear()
        off = pool_config(teachers, exclude_same_family=False)
        report_off = await replay_async(states, off, tmp_path / "out2")
    assert len(router.calls) == 6 and report_off.excluded_same_family == 0


async def test_tiered_querying_escalates_only_on_disagreement(tmp_path):
    # states 0-5: both cheap teachers agree with the student ("ls"); 6-7: cheap teachers disagree with each other;
    # 8-9: they agree with each other but not with the student
    def reply(model: str, sid: str, n: int) -> Reply:
        i = int(sid[1:])
        if model == "model-cheap2" and i in (6, 7):
            return answer("cat setup.py", usage={"prompt_tokens": 1000, "completion_tokens": 100})
        if model.startswith("model-cheap") and i in (8, 9):
            return answer("pytest", usage={"prompt_tokens": 1000, "completion_tokens": 100})
        return answer("ls", usage={"prompt_tokens": 1000, "completion_tokens": 100})

    router = Router(reply)
    states = write_states(tmp_path / "states.jsonl", [make_state(i, student="ls") for i in range(10)])
    with LoopbackOpenAI(router) as server:
        prices = {"price_in_per_mtok": 1.0, "price_out_per_mtok": 1.0}
        teachers = [
            teacher("cheap1", server.base_url, tier=0, **prices),
            teacher("cheap2", server.base_url, tier=0, **prices),
            teacher("big", server.base_url, tier=1, price_in_per_mtok=10.0, price_out_per_mtok=10.0),
        ]
        report = await replay_async(states, pool_config(teachers, tiered=True), tmp_path / "out")
    big_asked = sorted(sid for model, sid in router.calls if model == "model-big")
    assert big_asked == ["s0006", "s0007", "s0008", "s0009"]
    assert report.tier_skipped_calls == 6
    # each skipped call: 1000 in + 100 out tokens at $10/M = $0.011
    assert report.tier_saved_usd == pytest.approx(6 * 0.011)
    spent = 20 * 0.0011 + 4 * 0.011
    assert report.tier_saving_fraction == pytest.approx(6 * 0.011 / (spent + 6 * 0.011))


def test_cli_replay_writes_journal_and_report(tmp_path, capsys):
    router = Router(lambda model, sid, n: answer(cost=0.002, delay_s=0.01))
    states = write_states(tmp_path / "states.jsonl", [make_state(i, trace=f"t{i // 5}") for i in range(10)])
    with LoopbackOpenAI(router) as server:
        toml = write_teachers_toml(tmp_path / "teachers.toml", server.base_url, ("a", "b", "c"), max_concurrency=4)
        import os

        os.environ["CRF_TEST_KEY"] = "sk-test"
        try:
            rc = main(replay_argv(toml, states, tmp_path / "out", "--no-progress"))
        finally:
            del os.environ["CRF_TEST_KEY"]
    assert rc == 0 and len(server.requests) == 30
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert (report["states"], report["traces"], report["calls_sent"]) == (10, 2, 30)
    assert report["usd_per_state"] == pytest.approx(0.006) and report["usd_per_trace"] == pytest.approx(0.03)
    assert report["usd_per_100_steps"] == pytest.approx(0.6)
    assert [t["teacher"] for t in report["teachers"]] == ["a", "b", "c"]
    out = capsys.readouterr().out
    assert "cost feasibility" in out and "$ per trace" in out


def test_cli_bad_config_names_the_field(tmp_path, capsys):
    states = write_states(tmp_path / "states.jsonl", [make_state(0)])
    toml = tmp_path / "teachers.toml"
    toml.write_text('[[teachers]]\nname = "a"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\nmax_concurrency = 0\n')
    rc = main(replay_argv(toml, states, tmp_path / "out"))
    err = capsys.readouterr().err
    assert rc == 2 and "--teachers[0].max-concurrency" in err and "must be >= 1 (got 0)" in err
    assert not (tmp_path / "out").exists()


def test_cli_bad_states_line_names_file_and_line(tmp_path, capsys):
    states = write_states(tmp_path / "states.jsonl", [make_state(0)])
    with states.open("a") as f:
        f.write('{"state_id": "x"}\n')
    toml = tmp_path / "teachers.toml"
    toml.write_text('[[teachers]]\nname = "a"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\napi_key_var = ""\n')
    rc = main(replay_argv(toml, states, tmp_path / "out"))
    assert rc == 2 and f"{states}:2: not a TraceState row" in capsys.readouterr().err


@pytest.mark.parametrize(("agreement_tier", "big_asked"), [("key_args", 0), ("exact", 1)])
async def test_tiered_agreement_uses_the_pairs_equivalence_tier(tmp_path, agreement_tier, big_asked):
    # "cat setup.py" and "head setup.py" read the same file: the same step at key_args, different at exact
    router = Router(lambda model, sid, n: answer("head setup.py" if model == "model-cheap2" else "cat setup.py"))
    states = write_states(tmp_path / "states.jsonl", [make_state(0, student="cat setup.py")])
    with LoopbackOpenAI(router) as server:
        teachers = [
            teacher("cheap1", server.base_url, tier=0),
            teacher("cheap2", server.base_url, tier=0),
            teacher("big", server.base_url, tier=1),
        ]
        cfg = pool_config(teachers, tiered=True, tier=agreement_tier)
        report = await replay_async(states, cfg, tmp_path / "out")
    assert sum(1 for model, _ in router.calls if model == "model-big") == big_asked
    assert report.agreement_source == f"crf_prime.pairs.same_action (min_tier={agreement_tier})"


def test_live_p95_looks_at_the_last_window_of_calls_only():
    from teachers_helpers import bash

    from crf_prime.records.journal import JournalRecord
    from crf_prime.teachers.replay import LIVE_P95_WINDOW, Progress

    p = Progress()
    base = dict(teacher="a", model="m", model_family="", ok=True, action=bash("ls"), input_tokens=1, output_tokens=1)
    for i in range(LIVE_P95_WINDOW + 1000):
        p.record(JournalRecord(state_id=f"s{i}", cost_usd=0.001, latency_s=float(i), attempt=1, ts=0.0, **base))
    # nearest rank over latencies 1000 .. 1000 + WINDOW - 1
    assert p.p95() == 1000 + math.ceil(0.95 * LIVE_P95_WINDOW) - 1
    assert p.calls == LIVE_P95_WINDOW + 1000 and p.spend == pytest.approx(0.001 * p.calls)


def test_cli_budget_without_prices_is_refused_at_launch(tmp_path, capsys):
    states = write_states(tmp_path / "states.jsonl", [make_state(0)])
    toml = tmp_path / "teachers.toml"
    toml.write_text('[[teachers]]\nname = "a"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\napi_key_var = ""\n')
    rc = main(replay_argv(toml, states, tmp_path / "out", "--budget.job-usd", "1"))
    err = capsys.readouterr().err
    assert rc == 2 and "error: teachers[0 name='a'].price_in_per_mtok / price_out_per_mtok" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("queue", "admitted"), [(None, 4), (3, 5), (0, 2)])
async def test_calls_queue_in_the_client_and_the_provider_never_sees_more_than_max_concurrency(
    tmp_path, queue, admitted
):
    answered, admitted_at_once, at_server_at_once = await queued_run(
        lambda teachers: AsyncioBackend(teachers, api_keys={"a": "sk-test"}), tmp_path / "journal.jsonl", queue, 0.2
    )
    assert answered == [f"s{i:04d}" for i in range(8)]
    # default queue max(2, 2 // 2) = 2: 4 calls reserved and admitted at once, 2 of them at the provider
    assert admitted_at_once == admitted and at_server_at_once == 2


async def test_each_request_reaches_the_server_after_its_intent_and_sent_rows(tmp_path):
    """What a restart reads: when a request arrives, the call log already holds its call's intent (made durable at
    admission, while the call waited in the queue) and its "sent" row (written just before the request)."""
    journal = tmp_path / "journal.jsonl"
    seen: dict[str, list[str]] = {}

    def reply(model, sid, n):
        seen[sid] = [i.event for i in read_intents(intents_path(journal)) if i.state_id == sid]
        return answer(delay_s=0.05)

    with LoopbackOpenAI(Router(reply)) as server:
        cfg = pool_config([teacher("a", server.base_url, max_concurrency=2)])
        backend = AsyncioBackend(cfg.teachers, api_keys={"a": "sk-test"})
        ledger = Ledger(journal, cfg.budget)
        pool = TeacherPool(cfg, backend, ledger)
        outcomes = await pool.replay([make_state(i) for i in range(10)])
        await backend.close()
        ledger.close()
    assert all(o.records[0].ok for o in outcomes)
    assert seen == {f"s{i:04d}": ["intent", "sent"] for i in range(10)}
