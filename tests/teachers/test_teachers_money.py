"""Teacher money against a billing loopback server: a cap never crossed, one paid answer per question, a ledger that
matches the bill (faults included), and a stop message with the final spend."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import Counter

import pytest
from teachers_helpers import answer, make_state, pool_config, teacher, write_states

from crf_prime.loopback import Billing, LoopbackOpenAI, Reply
from crf_prime.records.journal import read_journal
from crf_prime.records.models import TraceState
from crf_prime.teachers.client import question_params, teacher_messages
from crf_prime.teachers.config import ConfigError
from crf_prime.teachers.money import Content, params_json, plan
from crf_prime.teachers.replay import replay_async

pytestmark = pytest.mark.timeout(120)

PRICES = {"price_in_per_mtok": 0.0, "price_out_per_mtok": 50.0}
"""Output priced only: the server bills a cut-off reply at ``max_tokens`` -- exactly the reservation -- so a ledger
that books what it cannot know at the reservation must equal the bill to the last digit."""
BILLING = Billing(**PRICES)


def sid_of(body: dict) -> int:
    return int(body["messages"][1]["content"].split()[1][1:5])


def priced(name: str, base_url: str, **kw):
    kw.setdefault("reserve_prompt_overhead_tokens", 0)
    kw.setdefault("sampling", {"max_tokens": 100})
    return teacher(name, base_url, **{**PRICES, **kw})


def reservation(t, state: TraceState) -> float:
    params = params_json(question_params(t, bool(state.tools)))
    return plan(t, params, Content.of(teacher_messages(state), list(state.tools)))[1]


def question_of(body: dict) -> str:
    """The server's view of a question: model + messages + tools (what it was asked), hashed."""
    content = {k: body.get(k) for k in ("model", "messages", "tools")}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def paid_twice(server: LoopbackOpenAI) -> dict[str, int]:
    counts = Counter(question_of(c.body) for c in server.charges)
    return {q: n for q, n in counts.items() if n > 1}


def journal_spend(path) -> float:
    return sum(r.cost_usd for r in read_journal(path))


@pytest.mark.parametrize("worst_case_answers", [False, True])
async def test_a_cap_smaller_than_one_round_is_never_crossed(tmp_path, worst_case_answers):
    """11 calls may be in flight at once, each reserving $0.005; the cap ($0.02) is below one round ($0.055)."""
    cut = Reply(delay_s=0.05, malformed=True)  # billed up to max_tokens: each call costs about its reservation
    reply = cut if worst_case_answers else answer(delay_s=0.05)
    states = write_states(tmp_path / "states.jsonl", [make_state(i) for i in range(60)])
    with LoopbackOpenAI(lambda body: reply, billing=BILLING) as server:
        t = priced("a", server.base_url, max_concurrency=11)
        cfg = pool_config([t], window=22, budget={"job_usd": 0.02})
        report = await replay_async(states, cfg, tmp_path / "out")
    charged = server.charged_usd
    r = reservation(t, make_state(0))
    print(  # the figure for the report: pytest -s -k cap_smaller
        f"\nMONEY cap<one round (answers {'at' if worst_case_answers else 'below'} the worst case): server charged "
        f"${charged:.6f} for {len(server.charges)} calls, cap $0.020000, one round of 11 reserves ${11 * r:.6f}; "
        f"ledger ${report.cost_journal_usd:.6f}"
    )
    assert 11 * r > 0.02  # one round would cross the cap
    assert 0 < charged <= 0.02
    assert charged + r > 0.02  # it stopped because the next worst case did not fit, not earlier
    assert journal_spend(tmp_path / "out" / "journal.jsonl") == pytest.approx(charged, abs=1e-12)
    assert report.cost_journal_usd == pytest.approx(charged, abs=1e-12)
    # the stop message gives the final spend, after the calls in flight at the stop finished
    assert report.budget_stopped.startswith(f"job budget reached: spent ${charged:.4f} of $0.0200;")
    assert "still reserved" not in report.budget_stopped
    # cut-off answers: their cost is unknown (no lookup here), so the message splits the figure
    unknown = f"of that, known charges ${report.known_usd:.4f} and unresolved, worst case ${report.unresolved_usd:.4f}"
    assert (unknown in report.budget_stopped) == worst_case_answers
    assert report.known_usd + report.unresolved_usd == pytest.approx(charged, abs=1e-12)


async def test_per_trace_cap_holds_at_full_concurrency(tmp_path):
    rows = [make_state(i, trace="big") for i in range(12)] + [make_state(i, trace="small") for i in range(12, 14)]
    states = write_states(tmp_path / "states.jsonl", rows)
    cut = Reply(delay_s=0.05, malformed=True)  # billed at max_tokens: every call costs exactly its reservation
    with LoopbackOpenAI(lambda body: cut, billing=BILLING) as server:
        t = priced("a", server.base_url, max_concurrency=8)
        r = reservation(t, make_state(0))
        cfg = pool_config([t], window=16, budget={"per_trace_usd": 2.5 * r})
        report = await replay_async(states, cfg, tmp_path / "out")
    by_trace: Counter[str] = Counter()
    for c in server.charges:
        by_trace["small" if sid_of(c.body) >= 12 else "big"] += c.usd
    # 8 calls of trace "big" could be in flight at once; its cap fits two worst cases, and two are paid
    assert by_trace == {"big": pytest.approx(2 * r), "small": pytest.approx(2 * r)}
    assert report.budget_stopped == "" and report.budget_skipped_calls == 10
    assert journal_spend(tmp_path / "out" / "journal.jsonl") == pytest.approx(server.charged_usd, abs=1e-12)


def same_question(i: int, of: int) -> TraceState:
    """State ``i`` whose context is exactly that of ``make_state(of)`` (another state id, another trace)."""
    return make_state(of).model_copy(update={"state_id": f"dup{i:04d}", "step": i})


async def test_same_question_at_other_states_and_runs_is_paid_once(tmp_path):
    first = [make_state(i) for i in range(6)] + [same_question(i, i % 3) for i in range(4)]
    second = [same_question(10 + i, i) for i in range(6)] + [make_state(6)]
    a = write_states(tmp_path / "a.jsonl", first)
    b = write_states(tmp_path / "b.jsonl", second)
    with LoopbackOpenAI(lambda body: answer(delay_s=0.02), billing=BILLING) as server:
        teachers = [priced("a", server.base_url, max_concurrency=4), priced("b", server.base_url, max_concurrency=4)]
        cfg = pool_config(teachers)
        r1 = await replay_async(a, cfg, tmp_path / "out")
        r2 = await replay_async(b, cfg, tmp_path / "out")  # a resume on the same journal, new states
    print(
        f"\nMONEY same question at other states and a later run: {len(server.charges)} paid calls for "
        f"{len(set(map(question_of, (c.body for c in server.charges))))} questions, paid twice: {len(paid_twice(server))}; "
        f"shared {r1.shared_calls + r2.shared_calls} calls saving ${r1.shared_saved_usd + r2.shared_saved_usd:.6f}"
    )
    assert paid_twice(server) == {}
    assert len(server.charges) == 2 * 7  # 7 distinct contexts x 2 teachers
    assert (r1.calls_sent, r1.shared_calls) == (12, 8)
    assert (r2.calls_sent, r2.shared_calls) == (2, 12)
    (price,) = {round(c.usd, 12) for c in server.charges}  # every answer costs the same here
    assert r1.shared_saved_usd == pytest.approx(8 * price) and r2.shared_saved_usd == pytest.approx(12 * price)
    rows = list(read_journal(tmp_path / "out" / "journal.jsonl"))
    assert len(rows) == 2 * 17 and {r.state_id for r in rows} == {s.state_id for s in first + second}
    assert sum(r.cost_usd for r in rows) == pytest.approx(server.charged_usd, abs=1e-12)
    shared = [r for r in rows if r.shared_from]
    assert len(shared) == 20 and all(r.cost_usd == 0 and r.ok for r in shared)


async def test_concurrent_askers_of_one_question_share_one_request(tmp_path):
    states = [make_state(0)] + [same_question(i, 0) for i in range(1, 8)]
    with LoopbackOpenAI(lambda body: answer(delay_s=0.1), billing=BILLING) as server:
        cfg = pool_config([priced("a", server.base_url, max_concurrency=8)], window=8)
        report = await replay_async(write_states(tmp_path / "s.jsonl", states), cfg, tmp_path / "out")
    assert len(server.requests) == 1 and report.shared_calls == 7 and report.calls_sent == 1


async def test_faults_are_booked_as_the_server_billed(tmp_path):
    """429/500 (not billed) are retried; a hang, a cut stream and an unreadable body reached the provider: billed up
    to max_tokens by the server, booked at the reservation, not retried; a 200-with-error bills its prompt."""
    plan_ = {
        "s0000": [answer("ls")],
        "s0001": [Reply(status=429, headers={"Retry-After": "0.01"}), answer("ls")],
        "s0002": [Reply(status=500, headers={"retry-after-ms": "1"}), Reply(status=503), answer("ls")],
        "s0003": [Reply(delay_s=60.0)],
        "s0004": [Reply(error={"message": "provider went away", "code": 502})],
        "s0005": [Reply(malformed=True)],
    }
    seen = Counter()

    def script(body: dict) -> Reply:
        sid = f"s{sid_of(body):04d}"
        seen[sid] += 1
        return plan_[sid][seen[sid] - 1]

    states = write_states(tmp_path / "states.jsonl", [make_state(i) for i in range(6)])
    with LoopbackOpenAI(script, billing=BILLING) as server:
        cfg = pool_config([priced("a", server.base_url, timeout_s=5.0, max_attempts=4)], budget={"job_usd": 1.0})
        report = await replay_async(states, cfg, tmp_path / "out")
    assert dict(seen) == {"s0000": 1, "s0001": 2, "s0002": 3, "s0003": 1, "s0004": 1, "s0005": 1}
    rows = {r.state_id: r for r in read_journal(tmp_path / "out" / "journal.jsonl")}
    assert {s for s, r in rows.items() if r.possibly_paid} == {"s0003", "s0005"}
    assert {s: r.cost_source for s, r in rows.items()} == {
        "s0000": "usage",
        "s0001": "usage",
        "s0002": "usage",
        "s0003": "reservation",
        "s0004": "usage",
        "s0005": "reservation",
    }
    assert report.possibly_paid_calls == 2
    assert journal_spend(tmp_path / "out" / "journal.jsonl") == pytest.approx(server.charged_usd, abs=1e-12)


async def test_streamed_stall_is_not_retried_and_booked_at_its_reservation(tmp_path):
    states = write_states(tmp_path / "states.jsonl", [make_state(0)])
    with LoopbackOpenAI(lambda body: answer("ls", stall_s=60.0), billing=BILLING) as server:
        t = priced("a", server.base_url, stream=True, timeout_s=0.5)
        await replay_async(states, pool_config([t]), tmp_path / "out")
    (row,) = read_journal(tmp_path / "out" / "journal.jsonl")
    assert len(server.requests) == 1 and row.error_type == "timeout" and row.possibly_paid
    assert row.cost_usd == pytest.approx(reservation(t, make_state(0))) == pytest.approx(server.charged_usd)


def test_a_cap_needs_prices_and_a_finite_max_tokens(tmp_path):
    from crf_prime.teachers.config import load_pool_config

    toml = tmp_path / "teachers.toml"
    toml.write_text(
        '[budget]\njob_usd = 1.0\n[[teachers]]\nname = "a"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n'
    )
    with pytest.raises(ConfigError, match=r"teachers\[0 name='a'\]\.price_in_per_mtok / price_out_per_mtok"):
        load_pool_config(toml)
    toml.write_text(
        '[[teachers]]\nname = "a"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n[teachers.sampling]\nmax_tokens = 0\n'
    )
    with pytest.raises(ConfigError, match=r"teachers\[0 name='a'\]\.sampling\.max_tokens"):
        load_pool_config(toml)


def test_the_reservation_bounds_the_bytes_sent(tmp_path):
    """Prompt tokens are bounded by the bytes of the request: the reservation's prompt part is at least that."""
    with LoopbackOpenAI(lambda body: answer()) as server:
        t = teacher("a", server.base_url, price_in_per_mtok=1e6, reserve_prompt_overhead_tokens=0)
        state = make_state(3)
        r = reservation(t, state)
        states = write_states(tmp_path / "s.jsonl", [state])
        asyncio.run(replay_async(states, pool_config([t]), tmp_path / "out"))
    (body,) = server.requests
    compact = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    assert r >= len(compact) * 1.0  # $1 per byte at 1e6 $/Mtok; max_tokens is not priced here


async def test_a_cancelled_call_at_the_provider_stays_booked_and_frees_its_question(tmp_path):
    from crf_prime.teachers.backends import AsyncioBackend
    from crf_prime.teachers.config import PoolConfig
    from crf_prime.teachers.ledger import Ledger
    from crf_prime.teachers.pool import TeacherPool

    replies = iter([Reply(delay_s=60.0), answer()])
    with LoopbackOpenAI(lambda body: next(replies), billing=BILLING) as server:
        t = priced("a", server.base_url)
        ledger = Ledger(tmp_path / "journal.jsonl")
        backend = AsyncioBackend([t])
        pool = TeacherPool(PoolConfig(teachers=(t,)), backend, ledger)
        hung = asyncio.create_task(pool.ask(make_state(0).request()))
        await asyncio.to_thread(server.wait_for, lambda s: len(s.requests) == 1, 30)
        hung.cancel()
        with pytest.raises(asyncio.CancelledError):
            await hung
        assert ledger.spent == pytest.approx(reservation(t, make_state(0)))  # it may have been paid
        out = await pool.ask(same_question(1, 0).request())  # the question is free again: asked, answered
        await backend.close()
        ledger.close()
    assert [r.ok for r in out.sent] == [True] and len(server.requests) == 2


@pytest.mark.parametrize(
    ("sent_at_admission", "on_wire", "other_boot", "booked"),
    [
        (True, False, False, True),
        (False, True, False, True),
        (False, False, False, False),
        (False, False, True, True),  # power loss: the unsynced "sent" row may be gone with the page cache
        (True, False, True, True),
    ],
)
async def test_a_restart_books_what_may_have_reached_the_provider(
    tmp_path, sent_at_admission, on_wire, other_boot, booked
):
    """A run dies with one call in flight: admitted as sent (Ray), marked sent by the wire (asyncio), or only
    admitted. The next ledger books the first two at their reservation and asks the third again -- unless the
    machine has restarted since (another boot id in the call log): then an admitted call may have lost its unsynced
    "sent" row, and is booked too."""
    from crf_prime.teachers.journal import intents_path
    from crf_prime.teachers.ledger import Ledger
    from crf_prime.teachers.money import Ask

    ask = Ask("s0000", "a", "q" * 64, 0.004, "t0")
    first = Ledger(tmp_path / "journal.jsonl")
    assert first.boot is not None  # Linux: the "sent" row is not synced, the intent row is
    assert (await first.admit(ask, sent=sent_at_admission)).verdict == "send"
    if on_wire:
        await first.mark_sent(ask.question)
    first.close()  # no commit: the process died
    log = intents_path(tmp_path / "journal.jsonl")
    rows = log.read_text().splitlines()
    assert [json.loads(r)["event"] for r in rows] == ["open", "intent"] + ["sent"] * (sent_at_admission or on_wire)
    if other_boot:
        log.write_text(rows[0].replace(first.boot, "a-boot-before-the-power-loss") + "\n" + "\n".join(rows[1:]) + "\n")
    again = Ledger(tmp_path / "journal.jsonl")
    assert again.spent == pytest.approx(0.004 if booked else 0.0)
    assert (len(again.lost), again.unsent) == ((1, 0) if booked else (0, 1))
    verdict = (await again.admit(ask)).verdict
    assert verdict == ("done" if booked else "send")
    again.close()


# -- single flight, and a ledger whose known spend is the bill ---------------------------------------------------------


async def test_many_states_sharing_a_context_sent_at_once_pay_one_call_per_teacher(tmp_path):
    """10 states (3 traces) share one context and are all in flight at once: each teacher is paid once."""
    states = [make_state(0)] + [
        same_question(i, 0).model_copy(
            update={"source": make_state(0).source.model_copy(update={"trace_id": f"t{i % 3}"})}
        )
        for i in range(1, 10)
    ]
    with LoopbackOpenAI(lambda body: answer(delay_s=0.2), billing=BILLING) as server:
        teachers = [priced(n, server.base_url, max_concurrency=10) for n in ("a", "b", "c")]
        report = await replay_async(
            write_states(tmp_path / "s.jsonl", states), pool_config(teachers, window=10), tmp_path / "out"
        )
    assert Counter(c.model for c in server.charges) == {"model-a": 1, "model-b": 1, "model-c": 1}
    assert len(server.requests) == 3 and paid_twice(server) == {}
    assert (report.calls_sent, report.shared_calls) == (3, 27)
    assert report.known_usd == pytest.approx(server.charged_usd, abs=1e-12) and report.unresolved_calls == 0


FAULTS = {
    0: [answer("ls")],
    1: [Reply(status=429, headers={"Retry-After": "0.01"}), answer("ls")],
    2: [Reply(status=500, headers={"retry-after-ms": "1"}), answer("ls")],
    3: [Reply(delay_s=60.0)],  # hangs: billed, no id ever reaches the client
    4: [Reply(error={"message": "provider went away", "code": 502})],
    5: [Reply(malformed=True)],  # cut off: its first bytes name the generation
}
"""The fault mix of teacher "a", by state: what each request of the state gets, in order."""
STALLED = 5
"""Teacher "s" streams; its answer at this state stalls half-way: the first chunk named the generation."""
BILL_IN = Billing(price_in_per_mtok=20.0, price_out_per_mtok=50.0)
"""Prompt tokens priced too: a call's bill is below its reservation (the bytes of the request bound its tokens)."""
TIMEOUT_S = 10.0
"""Per attempt: long enough for a first request on a loaded 2-core box (~5 s seen), short enough for the hang."""


def fault_script(seen: Counter):
    def script(body: dict) -> Reply:
        sid = sid_of(body)
        seen[body["model"], sid] += 1
        if body["model"] == "model-s":
            return answer("ls", stall_s=60.0) if sid == STALLED else answer("ls")
        return FAULTS[sid][seen[body["model"], sid] - 1]

    return script


def fault_teachers(base_url: str, **kw):
    common = {"price_in_per_mtok": 20.0, "price_out_per_mtok": 50.0, "timeout_s": TIMEOUT_S, **kw}
    return [teacher("a", base_url, **common), teacher("s", base_url, stream=True, **common)]


async def test_known_spend_is_the_bill_and_the_unknown_is_listed_apart(tmp_path):
    """The fault mix: answers and refusals are booked at their reported cost; the cut body and the stalled stream
    are looked up by their generation id -- the provider has no record of them yet at the end of the run (404), so
    they are resolved by the next run -- and the hang, whose answer never named its generation, stays unresolved
    at its worst case, listed apart."""
    seen: Counter = Counter()
    states = write_states(tmp_path / "a.jsonl", [make_state(i) for i in range(6)])
    with LoopbackOpenAI(fault_script(seen), billing=BILL_IN.model_copy(update={"lookup_misses": 1})) as server:
        cfg = pool_config(fault_teachers(server.base_url, cost_lookup="openrouter"), budget={"job_usd": 10.0})
        first = await replay_async(states, cfg, tmp_path / "out")
        lookups_first = len(server.lookups)
        again = await replay_async(write_states(tmp_path / "none.jsonl", []), cfg, tmp_path / "out")
    bill = {(c.model, sid_of(c.body)): c.usd for c in server.charges}  # one charge per (teacher, state)
    hang = bill["model-a", 3]
    r3 = reservation(cfg.teachers[0], make_state(3))
    print(
        f"\nMONEY fault mix: server charged ${server.charged_usd:.6f}; ledger known ${again.known_usd:.6f}, unresolved "
        f"{again.unresolved_calls} call(s), worst case ${again.unresolved_usd:.6f} (billed ${hang:.6f}); known + worst "
        f"cases (what the cap counts) ${again.cost_journal_usd:.6f}"
    )
    assert lookups_first == 2  # the cut body's and the stall's generations, not yet on record
    assert sorted(first.unresolved_list) == ["s0003/a", "s0005/a", "s0005/s"] and first.resolved_calls == 0
    cut = (("model-a", 3), ("model-a", 5), ("model-s", 5))
    assert first.known_usd == pytest.approx(sum(v for k, v in bill.items() if k not in cut), abs=1e-12)
    # the next run resolves them: the known spend is the bill of every call but the one whose generation is unknown
    assert again.resolved_calls == 2 and again.unresolved_list == ("s0003/a",)
    assert again.known_usd == pytest.approx(server.charged_usd - hang, abs=1e-12)
    assert again.unresolved_usd == pytest.approx(r3) and hang < r3
    assert again.cost_journal_usd == pytest.approx(server.charged_usd - hang + r3, abs=1e-12)  # what the cap counts
    assert first.cost_journal_usd > again.cost_journal_usd  # the worst cases were above the bill
    asked = {sid: n for (model, sid), n in seen.items() if model == "model-a"}
    assert asked == {0: 1, 1: 2, 2: 2, 3: 1, 4: 1, 5: 1} and seen["model-s", 5] == 1  # nothing sent twice


async def test_a_resolved_cost_is_durable_and_counts_against_the_cap_as_billed(tmp_path):
    """The charge row of a lookup is read back by the next ledger: nothing is looked up twice."""
    from crf_prime.teachers.ledger import Ledger

    with LoopbackOpenAI(lambda body: Reply(malformed=True), billing=BILL_IN) as server:
        (a, _) = fault_teachers(server.base_url, cost_lookup="openrouter")
        states = write_states(tmp_path / "s.jsonl", [make_state(0)])
        report = await replay_async(states, pool_config([a], budget={"job_usd": 1.0}), tmp_path / "out")
        assert len(server.lookups) == 1
        (charge,) = server.charges
    assert (report.resolved_calls, report.unresolved_calls) == (1, 0)
    assert report.known_usd == pytest.approx(charge.usd, abs=1e-12) and charge.usd < reservation(a, make_state(0))
    again = Ledger(tmp_path / "out" / "journal.jsonl")
    assert again.spent == pytest.approx(charge.usd, abs=1e-12) and await again.lookups() == []
    again.close()


async def test_without_a_lookup_the_unknown_cost_stays_at_its_worst_case(tmp_path):
    with LoopbackOpenAI(lambda body: Reply(malformed=True), billing=BILL_IN) as server:
        (a, _) = fault_teachers(server.base_url)  # cost_lookup "auto": not OpenRouter's base_url, no lookup
        report = await replay_async(
            write_states(tmp_path / "s.jsonl", [make_state(0)]), pool_config([a]), tmp_path / "o"
        )
    assert server.lookups == [] and report.known_usd == 0.0
    assert report.unresolved_calls == 1 and report.unresolved_usd == pytest.approx(reservation(a, make_state(0)))


@pytest.mark.parametrize("still_keyed", [True, False])
async def test_a_call_lost_with_its_idempotency_key_is_re_sent_with_it(tmp_path, still_keyed):
    """A run dies with a keyed call at the provider. The next ledger holds its reservation as unresolved and hands
    the same key out again; its answer's reported cost replaces it. A teacher that no longer sends keys gets the
    call booked as lost instead (a keyless resend could be charged twice)."""
    from crf_prime.records.journal import JournalRecord
    from crf_prime.teachers.ledger import Ledger
    from crf_prime.teachers.money import Ask

    ask = Ask("s0000", "a", "q" * 64, 0.004, "t0", idempotent=True)
    first = Ledger(tmp_path / "journal.jsonl")
    sent = await first.admit(ask, sent=True)
    first.close()  # killed with the call at the provider
    assert sent.verdict == "send" and len(sent.key) == 32
    again = Ledger(tmp_path / "journal.jsonl")
    assert (again.rekeyed, again.lost, again.spent, again.known_usd) == (1, [], pytest.approx(0.004), pytest.approx(0))
    if not still_keyed:
        adm = await again.admit(Ask("s0001", "a", "q" * 64, 0.004, "t0"))
        assert adm.verdict == "shared" and [r.error_type for r in again.lost] == ["lost"]
        assert (again.known_usd, again.unresolved_usd) == (0.0, pytest.approx(0.004))
        again.close()
        return
    adm = await again.admit(Ask("s0001", "a", "q" * 64, 0.004, "t0", idempotent=True), sent=True)
    assert (adm.verdict, adm.key) == ("send", sent.key)  # the same key: the provider answers without a new charge
    answered = JournalRecord(
        state_id="s0001", teacher="a", model="m", model_family="", ok=True, action=None, input_tokens=10,
        output_tokens=10, cost_usd=0.0015, cost_source="usage", latency_s=0.1, attempt=1, ts=0.0,
    )  # fmt: skip
    await again.commit(Ask("s0001", "a", "q" * 64, 0.004, "t0", idempotent=True), answered)
    assert (again.spent, again.known_usd, again.unresolved_usd) == (pytest.approx(0.0015),) * 2 + (0,)
    again.close()
    third = Ledger(tmp_path / "journal.jsonl")  # answered: nothing left to re-send
    assert (third.rekeyed, third.spent) == (0, pytest.approx(0.0015))
    third.close()
