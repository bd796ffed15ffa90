"""The Ray backend and live mode: faults across processes, actor death, detached pool shared by two processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading

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

from crf_prime.loopback import Billing, LoopbackOpenAI, Reply
from crf_prime.records.journal import read_journal
from crf_prime.records.states import read_states
from crf_prime.teachers.backends import RayBackend
from crf_prime.teachers.journal import intents_path, read_intents
from crf_prime.teachers.ledger import Ledger
from crf_prime.teachers.pool import TeacherPool

pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]
NAMESPACE = "crf-teachers-tests"  # the pools' actors; the Ray is tests/conftest.py's ray_cluster, shared


def _pool(cfg, journal, **backend_kw):
    backend = RayBackend(cfg.teachers, api_keys={t.name: "sk-test" for t in cfg.teachers}, **backend_kw)
    ledger = Ledger(journal, cfg.budget)
    return TeacherPool(cfg, backend, ledger), backend, ledger


async def test_faults_become_records_across_ray_processes_and_the_ledger_matches_the_bill(ray_cluster, tmp_path):
    plan = {
        "s0000": [answer("ls")],
        "s0001": [Reply(status=429, headers={"Retry-After": "0.1"}), answer("ls")],
        "s0002": [Reply(status=500, headers={"retry-after-ms": "1"})] * 2,
        "s0003": [Reply(delay_s=60.0)],  # hangs: billed, times out, not retried
        "s0004": [Reply(error={"message": "provider went away", "code": 502})],
        "s0005": [Reply(malformed=True)],
        "s0006": [answer("ls", stall_s=60.0)],  # the stream stops half-way: billed, times out, not retried
    }

    router = Router(lambda model, sid, n: plan[sid][n - 1])

    with LoopbackOpenAI(router, billing=Billing(price_out_per_mtok=50.0)) as server:
        streamed = teacher(
            "streamed",
            server.base_url,
            stream=True,
            timeout_s=8.0,  # the hang and the stall time out; an answer, even on a loaded box, does not
            max_attempts=2,
            price_out_per_mtok=50.0,
            sampling={"max_tokens": 100},
        )
        cfg = pool_config([streamed], budget={"job_usd": 1.0})
        pool, backend, ledger = _pool(cfg, tmp_path / "journal.jsonl")
        states = [make_state(i) for i in range(7)]
        outcomes = await pool.replay(states)
        await backend.close()
        ledger.close()
    recs = {o.state_id: o.records[0] for o in outcomes}
    got = {sid: (r.ok, r.error_type, r.attempt, r.possibly_paid) for sid, r in recs.items()}
    # the provider's view: a request it received is never sent again (the hang and the stall were bought once)
    calls = {sid: n for (_, sid), n in router.calls.items()}
    assert {sid: calls[sid] for sid in ("s0000", "s0003", "s0004", "s0005", "s0006")} == dict.fromkeys(
        ("s0000", "s0003", "s0004", "s0005", "s0006"), 1
    )
    # the client's view: an attempt that timed out before reaching the wire (a loaded box) is retried by design, so
    # the hang's and the stall's attempt counts are 1, or 2 when the first never left. On a box loaded enough that a
    # loopback answer takes over the 8-s timeout, s0001 and s0002 reach the provider once: their first answer came
    # too late (bought, so not retried) or their retry timed out before the wire (unpaid). Everything else is exact
    timed_out = {sid: got.pop(sid) for sid in ("s0003", "s0006")}
    assert all(v in {(False, "timeout", 1, True), (False, "timeout", 2, True)} for v in timed_out.values()), timed_out
    retried = {"s0001": (True, "", 2, False), "s0002": (False, "server_error", 2, False)}
    assert all(calls[sid] in (1, 2) for sid in retried), calls
    late = {sid: got.pop(sid) for sid in retried if calls[sid] == 1}
    assert all(v in {(False, "timeout", 1, True), (False, "timeout", 2, False)} for v in late.values()), late
    assert got == {
        "s0000": (True, "", 1, False),
        **{sid: v for sid, v in retried.items() if sid not in late},
        "s0004": (False, "provider_error", 1, False),
        "s0005": (False, "malformed", 1, True),
    }
    assert len(server.requests) == 5 + calls["s0001"] + calls["s0002"]
    rows = list(read_journal(tmp_path / "journal.jsonl"))
    assert {r.key for r in rows} == {(s.state_id, "streamed") for s in states}
    assert sum(r.cost_usd for r in rows) == pytest.approx(server.charged_usd, abs=1e-12) and server.charged_usd > 0


async def test_killed_actor_restarts_and_only_its_calls_in_flight_are_possibly_paid(ray_cluster, tmp_path):
    killed = threading.Event()
    lock = threading.Lock()
    seen: list[str] = []  # states in the order their requests reached the server

    def reply(model, sid, n):
        with lock:
            seen.append(sid)
            k = len(seen)
        # the 4th and 5th requests are at the provider when the actor is killed (nothing finishes meanwhile)
        return answer(delay_s=60.0 if k > 3 and not killed.is_set() else 0.05)

    router = Router(reply)
    with LoopbackOpenAI(router) as server:
        t = teacher("a", server.base_url, max_concurrency=2, price_out_per_mtok=100.0, sampling={"max_tokens": 100})
        cfg = pool_config([t], budget={"job_usd": 1.0})  # 2 slots + a queue of 2: 4 calls admitted at once
        pool, backend, ledger = _pool(cfg, tmp_path / "journal.jsonl", max_restarts=2)
        first_pid = (await backend.pids())["a"]
        done: list[str] = []
        pool.on_record = lambda rec, _: done.append(rec.state_id)
        events: list[str] = []  # in event-loop order: admissions, and the restart seen and over
        admit, come_back = ledger.admit, backend._come_back

        async def logged_admit(ask, *, sent=False):
            events.append(f"admit {ask.state_id}")  # asked: the pool has decided to admit it
            return await admit(ask, sent=sent)

        async def logged_come_back(teacher):
            events.append("restart seen")
            await come_back(teacher)
            events.append("restarted actor answered")

        ledger.admit, backend._come_back = logged_admit, logged_come_back
        run = asyncio.create_task(pool.replay([make_state(i) for i in range(12)]))
        while not (len(done) == 3 and len(seen) == 5):
            await asyncio.sleep(0.02)
        os.kill(first_pid, signal.SIGKILL)
        killed.set()
        outcomes = await asyncio.wait_for(run, 120)
        second_pid = (await backend.pids())["a"]
        await backend.close()
        ledger.close()
    records = {o.state_id: o.records[0] for o in outcomes}
    died = {sid for sid, r in records.items() if not r.ok}
    assert len(records) == 12 and second_pid != first_pid
    # the calls in the dead actor (the two at the provider, and those queued there) die with it, possibly paid,
    # booked at their reservation; the teacher's later calls wait for the restarted actor and are answered
    assert set(seen[3:5]) <= died and len(died) <= 4 and backend.actor_deaths == len(died)
    assert all(records[sid].error_type == "actor_died" and records[sid].possibly_paid for sid in died)
    assert all(records[sid].cost_usd == pytest.approx(0.01) for sid in died)
    assert router.duplicates() == {} and sum(r.ok for r in records.values()) == 12 - len(died)
    # its calls that died free their slots, but nothing is admitted for the teacher (its reservation held, counted
    # as sent on Ray) from the first failure seen until the restarted actor has answered its health call
    first, back = events.index("restart seen"), events.index("restarted actor answered")
    assert [e for e in events[first:back] if e.startswith("admit")] == [] and events.count("restart seen") == 1
    admitted = [sum(e.startswith("admit") for e in part) for part in (events[:first], events[back:])]
    assert sum(admitted) == 12 and admitted[1] > 0


async def test_an_actor_that_does_not_come_back_stops_the_job_without_booking_unsent_calls(ray_cluster, tmp_path):
    from crf_prime.teachers.backends import ActorGone

    seen: list[str] = []

    def reply(model, sid, n):
        seen.append(sid)
        return answer(delay_s=60.0)  # at the provider when the actor is killed

    with LoopbackOpenAI(Router(reply)) as server:
        t = teacher("a", server.base_url, max_concurrency=1, price_out_per_mtok=100.0, sampling={"max_tokens": 100})
        cfg = pool_config([t], budget={"job_usd": 1.0}, queue=0)
        pool, backend, ledger = _pool(cfg, tmp_path / "journal.jsonl", max_restarts=0)
        pid = (await backend.pids())["a"]
        run = asyncio.create_task(pool.replay([make_state(i) for i in range(3)]))
        while not seen:
            await asyncio.sleep(0.02)
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(ActorGone, match="max_restarts is 0"):
            await asyncio.wait_for(run, 120)
        spent = ledger.spent
        await backend.close()
        ledger.close()
    # the call at the provider is booked at its reservation; the next ones are not even admitted (the teacher admits
    # nothing while its actor is down: no intent row, nothing booked), so a resume simply asks them
    assert seen == ["s0000"] and spent == pytest.approx(0.01)
    rows = list(read_journal(tmp_path / "journal.jsonl"))
    assert [(r.state_id, r.error_type, r.possibly_paid) for r in rows] == [("s0000", "actor_died", True)]
    intents = [i.state_id for i in read_intents(intents_path(tmp_path / "journal.jsonl")) if i.event == "intent"]
    assert intents == ["s0000"]
    again = Ledger(tmp_path / "journal.jsonl")
    assert again.spent == pytest.approx(0.01) and len(again.lost) == 0 and again.unsent == 0
    assert again.unresolved_usd == pytest.approx(0.01) and again.known_usd == pytest.approx(0.0)
    again.close()


@pytest.mark.slow
async def test_live_pool_shared_by_two_processes(ray_cluster, tmp_path):
    from crf_prime.teachers import live

    router = Router(lambda model, sid, n: answer(cost=0.01))
    states_a = write_states(tmp_path / "a.jsonl", [make_state(i) for i in range(10)])
    states_b = write_states(tmp_path / "b.jsonl", [make_state(i) for i in range(5, 15)])
    journal = tmp_path / "journal.jsonl"
    with LoopbackOpenAI(router) as server:
        # 4 calls at once per process, $0.01 reserved per call: the shared ledger actor holds the cap across both
        t = teacher("a", server.base_url, max_concurrency=4, price_out_per_mtok=100.0, sampling={"max_tokens": 100})
        cfg = pool_config([t], budget={"job_usd": 0.125})
        pool = live.serve(cfg, journal, name="live-test", namespace=NAMESPACE, api_keys={"a": "sk-test"})
        try:
            first = await pool.replay(read_states(states_a))
            assert sum(len(o.sent) for o in first) == 10
            script = textwrap.dedent(
                f"""
                import asyncio, json, ray
                from crf_prime.teachers import live
                from crf_prime.records.states import read_states
                ray.init(address={ray_cluster.address_info["address"]!r}, namespace={NAMESPACE!r}, log_to_driver=False)
                pool = live.attach("live-test", namespace={NAMESPACE!r})
                outs = asyncio.run(pool.replay(read_states({str(states_b)!r})))
                print(json.dumps({{"sent": sum(len(o.sent) for o in outs),
                                   "reused": sum(len(o.records) - len(o.sent) for o in outs),
                                   "stopped": pool.stopped}}))
                """
            )
            proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
            assert proc.returncode == 0, proc.stderr[-3000:]
            other = json.loads(proc.stdout.strip().splitlines()[-1])
        finally:
            killed = live.shutdown("live-test", namespace=NAMESPACE)
    # states 5-9 come from the shared journal; each call reserves $0.01: 10 and 11 fit under $0.125, 12 does not
    assert other["reused"] == 5 and other["sent"] == 2
    assert other["stopped"].startswith("job budget reached: spent $0.1200 of $0.1250;")
    assert router.duplicates() == {} and len(server.requests) == 12
    assert len(list(read_journal(journal))) == 12 and killed == 2
    spent = sum(r.cost_usd for r in read_journal(journal))
    assert spent == pytest.approx(0.12) and spent <= 0.125


def test_cli_replay_on_the_ray_backend(ray_cluster, tmp_path, monkeypatch):
    from crf_prime.cli import main

    router = Router(lambda model, sid, n: answer(cost=0.001))
    states = write_states(tmp_path / "states.jsonl", [make_state(i) for i in range(6)])
    with LoopbackOpenAI(router) as server:
        toml = write_teachers_toml(tmp_path / "teachers.toml", server.base_url, ("a", "b"))
        monkeypatch.setenv("CRF_TEST_KEY", "sk-test")
        argv = replay_argv(toml, states, tmp_path / "out", "--backend", "ray")
        assert main([*argv, "--no-progress"]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert (report["backend"], report["states"], report["calls_sent"]) == ("ray", 6, 12)
    assert report["usd_per_state"] == pytest.approx(0.002) and router.duplicates() == {}


async def test_small_states_travel_inline_large_ones_by_one_shared_ref(ray_cluster, tmp_path):
    import ray

    from crf_prime.teachers.backends import INLINE_LIMIT

    big_text = "x" * (INLINE_LIMIT + 1)
    small = make_state(0)
    big = make_state(1).model_copy(
        update={"messages": ({"role": "user", "content": "state s0001: " + big_text}, *make_state(1).messages)}
    )
    router = Router(lambda model, sid, n: answer())
    with LoopbackOpenAI(router) as server:
        cfg = pool_config([teacher("a", server.base_url), teacher("b", server.base_url)])
        pool, backend, ledger = _pool(cfg, tmp_path / "journal.jsonl")
        small_request = small.request()
        assert backend.prepare(small_request) is small_request
        assert isinstance(backend.prepare(big.request()), ray.ObjectRef)
        outcomes = await pool.replay([small, big])
        await backend.close()
        ledger.close()
    assert sorted((o.state_id, len(o.records), all(r.ok for r in o.records)) for o in outcomes) == [
        ("s0000", 2, True),
        ("s0001", 2, True),
    ]
    sent_big = [b for b in server.requests if big_text in b["messages"][0]["content"]]
    assert len(sent_big) == 2 and router.duplicates() == {}


@pytest.mark.parametrize(("queue", "admitted"), [(None, 4), (3, 5), (0, 2)])
async def test_calls_queue_in_the_actor_and_the_provider_never_sees_more_than_max_concurrency(
    ray_cluster, tmp_path, queue, admitted
):
    answered, admitted_at_once, at_server_at_once = await queued_run(
        lambda teachers: RayBackend(teachers, api_keys={"a": "sk-test"}), tmp_path / "journal.jsonl", queue, 0.3
    )
    assert answered == [f"s{i:04d}" for i in range(8)]
    # default queue max(2, 2 // 2) = 2: 4 calls reserved and admitted at once, 2 of them at the provider
    assert admitted_at_once == admitted and at_server_at_once == 2


def _shared_context(n: int) -> list:
    """``n`` states (other ids, other traces) whose context is that of ``make_state(0)``: one question per teacher."""
    base = make_state(0)
    return [base] + [
        base.model_copy(
            update={"state_id": f"dup{i:04d}", "source": base.source.model_copy(update={"trace_id": f"t{i}"})}
        )
        for i in range(1, n)
    ]


async def test_states_sharing_a_context_at_once_pay_one_call_per_teacher_on_ray(ray_cluster, tmp_path):
    with LoopbackOpenAI(lambda body: answer(delay_s=0.3), billing=Billing(price_out_per_mtok=50.0)) as server:
        cfg = pool_config([teacher(n, server.base_url, max_concurrency=10) for n in ("a", "b", "c")], window=10)
        pool, backend, ledger = _pool(cfg, tmp_path / "journal.jsonl")
        outcomes = await pool.replay(_shared_context(10))
        await backend.close()
        ledger.close()
    assert sorted(c.model for c in server.charges) == ["model-a", "model-b", "model-c"]
    assert sum(len(o.sent) for o in outcomes) == 3 and sum(len(o.shared) for o in outcomes) == 27


async def test_a_killed_actor_loses_no_call_when_its_endpoint_takes_idempotency_keys(ray_cluster, tmp_path):
    """The actor dies with calls at the provider and queued: each is re-sent with its key once the restarted actor
    answers its health call; the provider charges each question once, every state is answered, the known spend is
    the bill."""
    killed = threading.Event()
    lock = threading.Lock()
    seen: list[str] = []

    def reply(model, sid, n):
        with lock:
            seen.append(sid)
            k = len(seen)
        return answer(delay_s=60.0 if k > 3 and not killed.is_set() else 0.05)

    router = Router(reply)
    billing = Billing(price_out_per_mtok=100.0, idempotency_header="Idempotency-Key")
    with LoopbackOpenAI(router, billing=billing) as server:
        t = teacher(
            "a",
            server.base_url,
            max_concurrency=2,
            price_out_per_mtok=100.0,
            sampling={"max_tokens": 100},
            idempotency_header="Idempotency-Key",
        )
        cfg = pool_config([t], budget={"job_usd": 1.0})
        pool, backend, ledger = _pool(cfg, tmp_path / "journal.jsonl", max_restarts=2)
        first_pid = (await backend.pids())["a"]
        done: list[str] = []
        pool.on_record = lambda rec, _: done.append(rec.state_id)
        run = asyncio.create_task(pool.replay([make_state(i) for i in range(12)]))
        while not (len(done) == 3 and len(seen) == 5):  # two calls at the provider, two queued in the actor
            await asyncio.sleep(0.02)
        os.kill(first_pid, signal.SIGKILL)
        killed.set()
        outcomes = await asyncio.wait_for(run, 120)
        known = (await ledger.snapshot())["known_usd"]
        await backend.close()
        ledger.close()
        charges = list(server.charges)
    records = {o.state_id: o.records[0] for o in outcomes}
    assert len(records) == 12 and all(r.ok for r in records.values())
    assert backend.actor_deaths >= 2 and backend.resent == backend.actor_deaths
    assert set(seen[3:5]) <= {sid for (_, sid), n in router.calls.items() if n == 2}  # re-sent ...
    assert sorted(state_of_charge(c) for c in charges) == [f"s{i:04d}" for i in range(12)]  # ... charged once
    assert known == pytest.approx(sum(c.usd for c in charges), abs=1e-12)


def state_of_charge(charge) -> str:
    from teachers_helpers import state_of

    return state_of(charge.body)


@pytest.mark.slow
async def test_a_question_in_flight_is_awaited_by_another_process_of_a_live_pool(ray_cluster, tmp_path):
    """Process 1 asks a context; while its request is held at the provider, process 2 asks the same context at
    another state: it waits in the ledger actor for the answer, and each teacher is paid once."""
    from crf_prime.teachers import live

    release = threading.Event()

    def reply(body):
        release.wait(170)  # set by the test once the other process waits (or when it fails): not a timing guess
        return answer()

    states_b = write_states(tmp_path / "b.jsonl", _shared_context(3)[1:])
    with LoopbackOpenAI(reply, billing=Billing(price_out_per_mtok=50.0)) as server:
        # the held requests must not time out while the other process starts (seconds on a loaded box)
        cfg = pool_config([teacher(n, server.base_url, timeout_s=170.0) for n in ("a", "b")])
        pool = live.serve(cfg, tmp_path / "journal.jsonl", name="live-flight", namespace=NAMESPACE)
        ledger = pool.ledger
        try:
            first = asyncio.create_task(pool.ask(make_state(0).request()))
            assert await asyncio.to_thread(server.wait_for, lambda s: len(s.requests) == 2, 120), first
            script = textwrap.dedent(
                f"""
                import asyncio, json, ray
                from crf_prime.teachers import live
                from crf_prime.records.states import read_states
                ray.init(address={ray_cluster.address_info["address"]!r}, namespace={NAMESPACE!r}, log_to_driver=False)
                pool = live.attach("live-flight", namespace={NAMESPACE!r})
                outs = asyncio.run(pool.replay(read_states({str(states_b)!r})))
                print(json.dumps({{"sent": sum(len(o.sent) for o in outs), "shared": sum(len(o.shared) for o in outs),
                                   "ok": sum(r.ok for o in outs for r in o.records)}}))
                """
            )
            proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
            try:
                while (await ledger.snapshot())["waiting"] < 4:  # both states x both teachers wait in the ledger
                    assert proc.poll() is None, f"the attached process exited before asking: {proc.stdout.read()}"
                    await asyncio.sleep(0.05)
                release.set()
                out, _ = await asyncio.to_thread(proc.communicate, timeout=120)
            finally:
                if proc.poll() is None:
                    proc.kill()
            outcome = await first
        finally:
            release.set()
            live.shutdown("live-flight", namespace=NAMESPACE)
    other = json.loads(out.strip().splitlines()[-1])
    assert [r.ok for r in outcome.sent] == [True, True]
    assert other == {"sent": 0, "shared": 4, "ok": 4}
    assert sorted(c.model for c in server.charges) == ["model-a", "model-b"]
