"""The admin gate holds prime-rl's ``/update_weights`` until the relay has the step; everything else passes through.

The inference server (vLLM on a GPU) cannot run here, so its admin routes are played by a real HTTP server on
loopback that records each request and whether the step's ``STABLE`` existed when the request arrived.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from relay_testkit import same_tree, write_checkpoint

from crf_prime.relay.config import PullConfig
from crf_prime.relay.gate import AdminGate
from crf_prime.relay.node import RelayNode
from crf_prime.relay.origin import RelayOrigin


class AdminRecorder:
    """Loopback stand-in for the inference server's admin routes (``/health``, ``/update_weights``, ...)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict, bool]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}") if length else {}
                weight_dir = body.get("weight_dir") if isinstance(body, dict) else None
                stable = bool(weight_dir) and (Path(weight_dir) / "STABLE").is_file()
                recorder.calls.append((self.command, self.path, body, stable))
                payload = json.dumps({"status": "ok", "path": self.path}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_gate_holds_update_until_relay_delivers(tmp_path: Path) -> None:
    broadcasts = tmp_path / "trainer" / "broadcasts"
    write_checkpoint(broadcasts / "step_3", total_mb=2, n_files=1, seed=3)
    node_dir = (tmp_path / "node" / "broadcasts").resolve()
    node_dir.mkdir(parents=True)
    weight_dir = str(node_dir / "step_3")
    upstream = AdminRecorder()
    try:
        with AdminGate(upstream.url, node_dir, poll_interval=0.01) as gate:
            with urllib.request.urlopen(f"{gate.url}/health", timeout=30) as response:
                assert response.status == 200 and json.loads(response.read())["path"] == "/health"

            result: list[tuple[int, dict]] = []
            waiter = threading.Thread(
                target=lambda: result.append(_post(f"{gate.url}/update_weights", {"weight_dir": weight_dir}))
            )
            waiter.start()
            deadline = time.monotonic() + 30
            while not gate.held and time.monotonic() < deadline:
                time.sleep(0.01)
            assert gate.held == [weight_dir]
            assert [c[1] for c in upstream.calls] == ["/health"]  # the update is being held

            with RelayOrigin(broadcasts, tmp_path / "data", shard_size=500_000) as origin:
                origin.poll_once()
                assert RelayNode(PullConfig(server=[origin.url], broadcast_dir=node_dir)).pull_once().step == 3
            waiter.join(timeout=60)
    finally:
        upstream.close()
    assert result == [(200, {"status": "ok", "path": "/update_weights"})]
    assert upstream.calls[-1] == ("POST", "/update_weights", {"weight_dir": weight_dir}, True)
    assert same_tree(broadcasts / "step_3", node_dir / "step_3")


def test_gate_times_out_with_retryable_status_and_ignores_foreign_paths(tmp_path: Path) -> None:
    node_dir = (tmp_path / "node" / "broadcasts").resolve()
    node_dir.mkdir(parents=True)
    upstream = AdminRecorder()
    try:
        with AdminGate(upstream.url, node_dir, wait_timeout=0.1, poll_interval=0.02) as gate:
            status, body = _post(f"{gate.url}/update_weights", {"weight_dir": str(node_dir / "step_9")})
            assert status == 504 and "not delivered" in body["error"]
            assert upstream.calls == []
            # nccl/nixl updates carry no weight_dir; paths outside the relay's directory are not ours to hold
            assert _post(f"{gate.url}/update_weights", {"weight_dir": None})[0] == 200
            assert _post(f"{gate.url}/update_weights", {"weight_dir": str(tmp_path / "elsewhere")})[0] == 200
    finally:
        upstream.close()
    assert [c[2]["weight_dir"] for c in upstream.calls] == [None, str(tmp_path / "elsewhere")]


def test_gate_rejects_bad_upstream(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must be an http://host:port URL"):
        AdminGate("ftp://x", tmp_path)


def test_gate_loads_newer_step_when_requested_one_was_skipped(tmp_path: Path) -> None:
    broadcasts = tmp_path / "trainer" / "broadcasts"
    write_checkpoint(broadcasts / "step_2", total_mb=1, n_files=1, seed=2)
    write_checkpoint(broadcasts / "step_3", total_mb=1, n_files=1, seed=3)
    node_dir = (tmp_path / "node" / "broadcasts").resolve()
    node_dir.mkdir(parents=True)
    upstream = AdminRecorder()
    try:
        with AdminGate(upstream.url, node_dir, poll_interval=0.01) as gate:
            result: list[tuple[int, dict]] = []
            body = {"weight_dir": str(node_dir / "step_2")}
            waiter = threading.Thread(target=lambda: result.append(_post(f"{gate.url}/update_weights", body)))
            waiter.start()
            deadline = time.monotonic() + 30
            while not gate.held and time.monotonic() < deadline:
                time.sleep(0.01)
            with RelayOrigin(broadcasts, tmp_path / "data", shard_size=500_000) as origin:
                assert origin.poll_once().step == 3  # the origin publishes only the newest complete step
                assert RelayNode(PullConfig(server=[origin.url], broadcast_dir=node_dir)).pull_once().step == 3
            waiter.join(timeout=60)
    finally:
        upstream.close()
    assert result == [(200, {"status": "ok", "path": "/update_weights"})]
    assert upstream.calls == [("POST", "/update_weights", {"weight_dir": str(node_dir / "step_3")}, True)]
