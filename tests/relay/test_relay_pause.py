"""How long inference pauses per weight update when the weights come through the relay and its admin gate.

prime-rl's orchestrator updates weights as ``/pause`` (all engines) → ``/update_weights {"weight_dir": ...}`` (all) →
``/resume`` (all), retrying 5xx and transport errors (``update_weights`` and ``_admin_post`` in
``src/prime_rl/utils/client.py``). The engine is paused from its ``/pause`` to its ``/resume``; that is what these
tests measure, on a loopback stand-in for the vLLM admin routes (no GPU here) behind the real gate, with a real
origin and a real node pulling in the background.

The default tests drive the gate with a stand-in orchestrator that issues exactly those calls; the opt-in one
(``CRF_PRIME_RL_SRC``) calls prime-rl's own ``update_weights``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from relay_testkit import same_tree, write_checkpoint

from crf_prime.relay.config import PullConfig
from crf_prime.relay.gate import AdminGate
from crf_prime.relay.layout import STABLE
from crf_prime.relay.node import RelayNode
from crf_prime.relay.origin import RelayOrigin

Update = Callable[[list[httpx.AsyncClient], Path, int], Awaitable[None]]


@dataclass
class Call:
    route: str
    query: str
    body: dict
    at: float
    stable: bool


class EngineStandIn:
    """vLLM admin routes as prime-rl's inference server exposes them (``src/prime_rl/inference/vllm/server.py``)."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else {}
                route, _, query = self.path.partition("?")
                weight_dir = body.get("weight_dir")
                stable = bool(weight_dir) and (Path(weight_dir) / STABLE).is_file()
                engine.calls.append(Call(route, query, body, time.monotonic(), stable))
                answer = {"/pause": {"status": "paused"}, "/resume": {"status": "resumed"}}.get(route, {"status": "ok"})
                payload = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def pauses(self) -> list[tuple[str, float]]:
        """(weight_dir loaded, seconds paused) for each /pause ... /resume pair."""
        out, started, loaded = [], None, ""
        for call in self.calls:
            if call.route == "/pause":
                started = call.at
            elif call.route == "/update_weights":
                loaded = call.body["weight_dir"]
            elif call.route == "/resume" and started is not None:
                out.append((loaded, call.at - started))
                started = None
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def _admin_post(client: httpx.AsyncClient, path: str, timeout_s: float = 300.0, **kwargs) -> None:
    """prime-rl's ``_admin_post``: up to 10 attempts, exponential wait 1..10 s, retry 5xx and transport errors."""
    for attempt in range(10):
        try:
            response = await client.post(
                path, timeout=httpx.Timeout(connect=10.0, read=timeout_s, write=60.0, pool=10.0), **kwargs
            )
            response.raise_for_status()
            return
        except httpx.HTTPStatusError as e:
            if e.response.status_code < 500 or attempt == 9:
                raise
        except (httpx.TimeoutException, httpx.TransportError):
            if attempt == 9:
                raise
        await asyncio.sleep(min(10, max(1, 2**attempt)))


async def standin_update_weights(admin_clients: list[httpx.AsyncClient], weight_dir: Path, step: int) -> None:
    """prime-rl's ``update_weights`` for full weights: pause all, mark NCCL_READY, update all, resume all."""
    await asyncio.gather(
        *[_admin_post(c, "/pause", params={"mode": "keep", "clear_cache": "false"}) for c in admin_clients]
    )
    try:
        # prime-rl touches <weight_dir>/NCCL_READY on the orchestrator's filesystem (the trainer's); a node's copy
        # of the step never needs it, so this stand-in, sharing one disk with the node, leaves it out
        await asyncio.gather(
            *[
                _admin_post(c, "/update_weights", json={"weight_dir": weight_dir.as_posix()}, timeout_s=720.0)
                for c in admin_clients
            ]
        )
    finally:
        await asyncio.gather(*[_admin_post(c, "/resume") for c in admin_clients])


def _run_update(update: Update, gate_url: str, weight_dir: Path, step: int) -> None:
    async def main() -> None:
        # setup_admin_clients: base URL without /v1, no global timeout
        client = httpx.AsyncClient(base_url=gate_url.removesuffix("/v1"), timeout=httpx.Timeout(None))
        try:
            await update([client], weight_dir, step)
        finally:
            await client.aclose()

    asyncio.run(main())


@dataclass
class Relay:
    trainer: Path
    node_dir: Path
    engine: EngineStandIn
    gate: AdminGate
    hold: threading.Event
    held: threading.Event
    release: threading.Event


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[Relay]:
    """Origin publishing the trainer's broadcast dir, a node pulling in the background, the gate, the engine."""
    trainer = tmp_path / "trainer" / "broadcasts"
    trainer.mkdir(parents=True)
    node_dir = (tmp_path / "node" / "broadcasts").resolve()
    hold, held, release = threading.Event(), threading.Event(), threading.Event()

    def on_request(version: str, path: str, offset: int, length: int) -> None:
        if hold.is_set():  # freeze the transfer: the orchestrator will ask before the pull is done
            held.set()
            release.wait(timeout=120)

    stop = threading.Event()
    engine = EngineStandIn()
    origin = RelayOrigin(trainer, tmp_path / "data", shard_size=1_000_000, on_request=on_request)
    node = RelayNode(PullConfig(server=[origin.url], broadcast_dir=node_dir), retry_wait=0.05)
    gate = AdminGate(engine.url, node_dir, poll_interval=0.01)
    threads = [
        threading.Thread(target=origin.run, args=(stop,), kwargs={"poll_interval": 0.02}, daemon=True),
        threading.Thread(target=node.run, args=(stop,), kwargs={"poll_interval": 0.5}, daemon=True),
    ]
    for thread in threads:
        thread.start()
    try:
        yield Relay(trainer, node_dir, engine, gate, hold, held, release)
    finally:
        release.set()
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        gate.close()
        origin.close()
        engine.close()


def _wait_until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def _check_pauses(relay: Relay, update: Update, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="crf_prime.relay.gate")

    # step 1: the node pulls it as soon as it is published, before any orchestrator call
    write_checkpoint(relay.trainer / "step_1", total_mb=8, n_files=2, seed=1)
    _wait_until(lambda: (relay.node_dir / "step_1" / STABLE).is_file(), "the node to pull step 1 on its own")
    assert relay.engine.calls == []
    _run_update(update, relay.gate.url, relay.node_dir / "step_1", 1)

    # step 2: the orchestrator asks while the transfer is frozen; the gate holds the update with the engine paused
    relay.hold.set()
    write_checkpoint(relay.trainer / "step_2", total_mb=8, n_files=2, seed=2)
    assert relay.held.wait(timeout=60)
    waiter = threading.Thread(target=_run_update, args=(update, relay.gate.url, relay.node_dir / "step_2", 2))
    waiter.start()
    _wait_until(lambda: str(relay.node_dir / "step_2") in relay.gate.held, "the gate to hold step 2")
    relay.hold.clear()
    relay.release.set()
    waiter.join(timeout=120)
    assert not waiter.is_alive()

    calls = [(c.route, c.query, c.body, c.stable) for c in relay.engine.calls]
    step_1, step_2 = (str(relay.node_dir / f"step_{n}") for n in (1, 2))
    assert calls == [
        ("/pause", "mode=keep&clear_cache=false", {}, False),
        ("/update_weights", "", {"weight_dir": step_1}, True),
        ("/resume", "", {}, False),
        ("/pause", "mode=keep&clear_cache=false", {}, False),
        ("/update_weights", "", {"weight_dir": step_2}, True),
        ("/resume", "", {}, False),
    ]
    (loaded_1, pause_1), (loaded_2, pause_2) = relay.engine.pauses()
    assert (loaded_1, loaded_2) == (step_1, step_2)
    print(f"engine pause: {pause_1:.3f} s for a step in place, {pause_2:.3f} s for a step still in transfer")
    assert pause_1 <= 1.0, f"engine paused {pause_1:.3f} s for a step already in place"
    assert relay.gate.held == [step_2]
    gate_1, gate_2 = relay.gate.pauses
    assert gate_1.weight_dir == step_1 and gate_2.weight_dir == step_2
    assert 0 < gate_2.relay_wait_s <= gate_2.paused_s and pause_2 >= gate_2.relay_wait_s
    waited = [r.getMessage() for r in caplog.records if "inference waited" in r.getMessage()]
    assert len(waited) == 1 and re.fullmatch(
        rf"inference waited \d+\.\d\d s for the relay to deliver {step_2}", waited[0]
    )
    assert same_tree(relay.trainer / "step_2", relay.node_dir / "step_2")


def test_prestaged_step_pauses_under_a_second_and_late_step_wait_is_logged(
    relay: Relay, caplog: pytest.LogCaptureFixture
) -> None:
    _check_pauses(relay, standin_update_weights, caplog)


@pytest.mark.prime_rl
def test_with_prime_rl_update_weights(relay: Relay, caplog: pytest.LogCaptureFixture) -> None:
    from prime_rl_support import prime_rl_on_path

    with prime_rl_on_path():
        from prime_rl.utils.client import update_weights

    async def real_update(clients: list[httpx.AsyncClient], weight_dir: Path, step: int) -> None:
        await update_weights(clients, weight_dir, step=step)

    _check_pauses(relay, real_update, caplog)
