"""Teacher-pool throughput: 3 teachers x 100 states against the loopback server with seeded latencies.

For each backend (asyncio, Ray) the replay's wall clock is compared with the ideal bound -- for each teacher, the
sum of its scripted latencies divided by its concurrency; the max over teachers -- and the per-request overhead is
the driver-side call time minus the scripted latency (HTTP + client + Ray hops), plus the ledger's journal/intent
fsyncs per call. A bare-client baseline (the same requests through AsyncOpenAI with the same semaphores, no pool,
no journal) is measured in the same run. Targets: <= 1.10x ideal, <= 2 ms overhead per request.

    .venv/bin/python benchmarks/replay.py [--states 100] [--seed 0] [--backends asyncio,ray]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from crf_prime.loopback import LoopbackOpenAI, Reply
from crf_prime.teachers.backends import AsyncioBackend, RayBackend
from crf_prime.teachers.config import PoolOptions, TeacherConfig
from crf_prime.teachers.ledger import Ledger
from crf_prime.teachers.pool import TeacherPool
from crf_prime.traces.models import Action, Source, ToolCall, TraceState

# (name, mean latency s, concurrency)
TEACHERS = (("cheap", 0.15, 4), ("mid", 0.25, 6), ("big", 0.40, 8))
SIGMA = 0.3


def make_states(n: int) -> list[TraceState]:
    ls = Action(tool_calls=(ToolCall(id="c", name="bash", arguments='{"command": "ls"}'),))
    return [
        TraceState(
            state_id=f"s{i:04d}",
            messages=({"role": "system", "content": "agent"}, {"role": "user", "content": f"state s{i:04d}"}),
            student_action=ls,
            source=Source(format="swe-gym", file="bench", line=i, trace_id=f"t{i // 100}"),
        )
        for i in range(n)
    ]


def latencies(n: int, seed: int) -> dict[tuple[str, str], float]:
    rng = random.Random(seed)
    out = {}
    for name, mean, _ in TEACHERS:
        for i in range(n):
            # lognormal with the given mean
            out[(f"model-{name}", f"s{i:04d}")] = mean * rng.lognormvariate(-(SIGMA**2) / 2, SIGMA)
    return out


def ideal_bound(lat: dict[tuple[str, str], float]) -> float:
    return max(sum(v for (m, _), v in lat.items() if m == f"model-{name}") / c for name, _, c in TEACHERS)


class Server:
    def __init__(self, lat: dict[tuple[str, str], float]) -> None:
        self.lat = lat

    def __call__(self, body: dict) -> Reply:
        sid = re.search(r"state (\S+)", body["messages"][-1]["content"]).group(1)
        return Reply(
            tool_calls=[{"name": "bash", "arguments": '{"command": "ls"}'}],
            delay_s=self.lat.get((body["model"], sid), 0.0),  # warm-up states answer at once
            cost=0.0001,
        )


def serve(lat, no_nagle: bool, urls, stop) -> None:
    if not no_nagle:  # measure the server as it was before TCP_NODELAY (for comparison only)
        from crf_prime.loopback import server as loopback_server

        loopback_server._Handler.disable_nagle_algorithm = False
    with LoopbackOpenAI(Server(lat)) as server:
        urls.put(server.base_url)
        stop.wait()


def configs(base_url: str) -> list[TeacherConfig]:
    return [
        TeacherConfig(name=n, model=f"model-{n}", base_url=base_url, api_key_var="", max_concurrency=c)
        for n, _, c in TEACHERS
    ]


class Timed:
    """Wraps a backend / ledger to time each call on the driver."""

    def __init__(self, inner, lat):
        self.inner, self.lat, self.overhead, self.teachers = inner, lat, [], inner.teachers

    def prepare(self, state):
        return state, self.inner.prepare(state)

    async def ask(self, teacher, payload):
        state, inner_payload = payload
        t0 = time.perf_counter()
        rec = await self.inner.ask(teacher, inner_payload)
        self.overhead.append(time.perf_counter() - t0 - self.lat[(f"model-{teacher}", state.state_id)])
        return rec

    async def close(self):
        await self.inner.close()


class TimedLedger:
    def __init__(self, inner):
        self.inner, self.spent_s = inner, []

    async def admit(self, *a):
        t0 = time.perf_counter()
        r = await self.inner.admit(*a)
        self.spent_s.append(time.perf_counter() - t0)
        return r

    async def commit(self, rec):
        t0 = time.perf_counter()
        await self.inner.commit(rec)
        self.spent_s[-1] += time.perf_counter() - t0

    async def snapshot(self):
        return await self.inner.snapshot()


async def run_pool(backend_name: str, base_url: str, states, lat, workdir: Path) -> dict:
    teachers = configs(base_url)
    if backend_name == "ray":
        import ray

        t0 = time.perf_counter()
        if not ray.is_initialized():
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        inner = RayBackend(teachers, api_keys={t.name: "EMPTY" for t in teachers})
        await inner.pids()  # actors up before the clock starts
        startup = time.perf_counter() - t0
    else:
        inner, startup = AsyncioBackend(teachers), 0.0
    # warm each teacher's client (first request pays lazy imports and connection setup), outside the clock
    warm = make_states(1)[0].model_copy(
        update={"state_id": "w0000", "messages": ({"role": "user", "content": "state w0000"},)}
    )
    await asyncio.gather(*(inner.ask(t.name, inner.prepare(warm)) for t in teachers))
    backend = Timed(inner, lat)
    ledger = TimedLedger(Ledger(workdir / f"{backend_name}.jsonl"))
    pool = TeacherPool(teachers, backend, ledger, PoolOptions())
    t0 = time.perf_counter()
    outcomes = await pool.replay(states)
    wall = time.perf_counter() - t0
    await backend.close()
    ok = sum(r.ok for o in outcomes for r in o.records)
    return {
        "backend": backend_name,
        "wall_s": wall,
        "startup_s": startup,
        "ok": ok,
        "overhead_ms_mean": 1000 * statistics.mean(backend.overhead),
        "overhead_ms_p50": 1000 * statistics.median(backend.overhead),
        "overhead_ms_p95": 1000 * sorted(backend.overhead)[int(0.95 * len(backend.overhead)) - 1],
        "ledger_ms_mean": 1000 * statistics.mean(ledger.spent_s),
    }


async def run_bare(base_url: str, states, lat) -> dict:
    """Baseline: AsyncOpenAI + one semaphore per teacher, no pool, no journal."""
    import openai

    overhead = []

    async def one(client, sem, t, s):
        async with sem:
            t0 = time.perf_counter()
            await client.chat.completions.create(model=t.model, messages=list(s.messages))
            overhead.append(time.perf_counter() - t0 - lat[(t.model, s.state_id)])

    teachers = configs(base_url)
    clients = {t.name: openai.AsyncOpenAI(base_url=base_url, api_key="EMPTY", max_retries=0) for t in teachers}
    sems = {t.name: asyncio.Semaphore(t.max_concurrency) for t in teachers}
    for t in teachers:
        await clients[t.name].chat.completions.create(model=t.model, messages=[{"role": "user", "content": "state w0"}])
    t0 = time.perf_counter()
    await asyncio.gather(*(one(clients[t.name], sems[t.name], t, s) for s in states for t in teachers))
    wall = time.perf_counter() - t0
    for c in clients.values():
        await c.close()
    return {
        "backend": "bare client",
        "wall_s": wall,
        "startup_s": 0.0,
        "ok": len(overhead),
        "overhead_ms_mean": 1000 * statistics.mean(overhead),
        "overhead_ms_p50": 1000 * statistics.median(overhead),
        "overhead_ms_p95": 1000 * sorted(overhead)[int(0.95 * len(overhead)) - 1],
        "ledger_ms_mean": 0.0,
    }


async def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--states", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backends", default="asyncio,ray")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    ap.add_argument(
        "--keep-nagle",
        action="store_true",
        help="turn Nagle's algorithm back on in the loopback server (slower; for comparison)",
    )
    args = ap.parse_args(argv)
    states = make_states(args.states)
    lat = latencies(args.states, args.seed)
    ideal = ideal_bound(lat)
    rows = []
    ctx = multiprocessing.get_context("spawn")
    urls: multiprocessing.Queue = ctx.Queue()
    stop = ctx.Event()
    # the server runs in its own process so its threads do not compete with the client for this process's GIL
    proc = ctx.Process(target=serve, args=(lat, not args.keep_nagle, urls, stop), daemon=True)
    proc.start()
    base_url = urls.get(timeout=60)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(await run_bare(base_url, states, lat))
            for name in args.backends.split(","):
                rows.append(await run_pool(name, base_url, states, lat, Path(tmp)))
    finally:
        stop.set()
        proc.join(timeout=10)
    n = args.states * len(TEACHERS)
    print(
        f"{len(TEACHERS)} teachers x {args.states} states = {n} requests; seed {args.seed}; ideal bound {ideal:.2f} s"
    )
    bare = rows[0]["wall_s"]
    print(
        f"{'backend':<12} {'wall s':>7} {'x ideal':>8} {'x bare':>7} {'overhead/req ms mean':>21} {'p50':>6} "
        f"{'p95':>7} {'ledger ms/call':>15} {'ok':>4}"
    )
    for r in rows:
        print(
            f"{r['backend']:<12} {r['wall_s']:>7.2f} {r['wall_s'] / ideal:>8.3f} {r['wall_s'] / bare:>7.3f} "
            f"{r['overhead_ms_mean']:>21.2f} {r['overhead_ms_p50']:>6.2f} {r['overhead_ms_p95']:>7.2f} "
            f"{r['ledger_ms_mean']:>15.2f} {r['ok']:>4}"
            + (f"   (ray init + actors {r['startup_s']:.1f} s, not counted)" if r["startup_s"] else "")
        )
    print(f"load average during the run (2-core box shared with other jobs): {os.getloadavg()}")
    if args.json:
        args.json.write_text(json.dumps({"ideal_s": ideal, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
