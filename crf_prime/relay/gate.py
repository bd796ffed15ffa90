"""Admin gate on a remote inference node: hold a weight update until the relay has put that step in place.

prime-rl's orchestrator posts ``/update_weights {"weight_dir": "<output_dir>/broadcasts/step_<n>"}`` (or
``/load_lora_adapter {"lora_path": ...}`` with LoRA) to every admin URL as soon as the trainer's ``STABLE`` shows up on
*its* filesystem (``update_weights`` in ``src/prime_rl/utils/client.py``). On a node fed by the relay that step may
still be in flight. Pointing ``orchestrator.client.admin_base_url`` at this gate closes the race: every admin request
(``/pause``, ``/resume``, ``/health``, ``/v1/models``, ...) is forwarded unchanged to the local inference server,
except that a weight update inside the relay's broadcast directory waits until ``<weight_dir>/STABLE`` exists
locally (or a newer complete step exists, which is then loaded instead). After ``wait_timeout`` it answers 504,
which prime-rl's admin client retries (5xx is retryable there).

prime-rl pauses the engine (``/pause``) before it posts the update and resumes it (``/resume``) after, so every
second the gate holds an update is a second of paused inference. The relay node therefore pulls each step the
moment it is published; an update for a step already in place is forwarded at once. The gate measures each pause
(``/pause`` to ``/resume``) and logs how much of it was spent waiting for the relay.

Admin traffic only: generation keeps going straight to the inference server (``client.base_url``).
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from crf_prime.relay.layout import STABLE, local_stable_steps, parse_step

log = logging.getLogger(__name__)

WAIT_KEYS: dict[str, str] = {"/update_weights": "weight_dir", "/load_lora_adapter": "lora_path"}
"""Admin routes that name a weight directory, and the JSON field that carries it (prime-rl's client.py)."""


@dataclass(frozen=True)
class PauseRecord:
    """One engine pause as the gate saw it, from the forwarded ``/pause`` to the forwarded ``/resume``."""

    weight_dir: str | None
    """The weight directory updated during the pause (None when no update came)."""
    paused_s: float
    """Seconds the engine was paused."""
    relay_wait_s: float
    """Seconds of the pause spent holding the update until the relay had the step in place."""


_HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "host", "content-length", "upgrade"})


class AdminGate:
    """Forward admin requests from ``host:port`` to ``upstream``; weight updates wait for their step's ``STABLE``."""

    def __init__(
        self,
        upstream: str,
        broadcast_dir: Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        wait_timeout: float = 600.0,
        poll_interval: float = 0.05,
    ) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"gate upstream {upstream!r} must be an http://host:port URL of the inference server")
        self.upstream = (parts.hostname, parts.port or 80)
        self.broadcast_dir = Path(broadcast_dir).resolve()
        self.wait_timeout = wait_timeout
        self.poll_interval = poll_interval
        self.held: list[str] = []
        """Weight directories whose update had to wait (for logs and tests)."""
        self.pauses: list[PauseRecord] = []
        """Every completed engine pause, oldest first."""
        self._state_lock = threading.Lock()
        self._paused_at: float | None = None
        self._pause_dir: str | None = None
        self._pause_wait = 0.0
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self.host = host
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def wait_for(self, weight_dir: str) -> str | None:
        """The directory the engine should load for ``weight_dir``, once the relay has one; None after the timeout.

        That is ``weight_dir`` itself when its ``STABLE`` exists, or the oldest newer complete step: the origin
        publishes only the newest step, so a step the orchestrator asks for may be skipped on the way and would
        otherwise be waited for forever (prime-rl's own watcher jumps to the newest step the same way). Paths
        outside the relay's broadcast directory pass unchanged at once; a relative path is taken relative to the
        gate's working directory (start it in the inference server's).
        """
        path = Path(weight_dir)
        resolved = path.resolve()
        step = parse_step(resolved.name)
        if not resolved.is_relative_to(self.broadcast_dir) or step is None:
            return weight_dir
        deadline = time.monotonic() + self.wait_timeout
        while True:
            if (path / STABLE).is_file():
                return weight_dir
            newer = [s for s in local_stable_steps(resolved.parent) if s > step]
            if newer:
                replacement = str(path.parent / f"step_{newer[0]}")
                log.info("step %s was skipped by the relay; loading %s instead", weight_dir, replacement)
                return replacement
            if weight_dir not in self.held:
                self.held.append(weight_dir)
                if self._paused_at is not None:
                    log.warning(
                        "inference on this node is paused until the relay delivers %s: the orchestrator asked for it "
                        "before the pull finished",
                        weight_dir,
                    )
                else:
                    log.info("holding weight update for %s until the relay has it", weight_dir)
            if time.monotonic() >= deadline:
                return None
            time.sleep(self.poll_interval)

    def _held(self, weight_dir: str, seconds: float) -> None:
        """Account ``seconds`` of holding an update for ``weight_dir`` to the current pause, with a log line."""
        with self._state_lock:
            self._pause_dir = weight_dir
            paused = self._paused_at is not None
            if paused:
                self._pause_wait += seconds
        if seconds >= self.poll_interval:
            if paused:
                log.warning("inference waited %.2f s for the relay to deliver %s", seconds, weight_dir)
            else:
                log.info("weight update for %s waited %.2f s for the relay", weight_dir, seconds)

    def _forwarded(self, route: str, status: int) -> None:
        """Track engine pauses from the admin calls that reached the engine."""
        now = time.monotonic()
        with self._state_lock:
            if route == "/pause" and status < 300 and self._paused_at is None:
                self._paused_at, self._pause_dir, self._pause_wait = now, None, 0.0
                return
            if route != "/resume" or self._paused_at is None:
                return
            record = PauseRecord(self._pause_dir, now - self._paused_at, self._pause_wait)
            self._paused_at = None
            self.pauses.append(record)
        log.info(
            "engine paused %.2f s for %s (%.2f s of it waiting for the relay)",
            record.paused_s,
            record.weight_dir,
            record.relay_wait_s,
        )

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        gate = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                log.debug("gate %s - %s", self.address_string(), format % args)

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                route = urlsplit(self.path).path
                if self.command == "POST" and route in WAIT_KEYS:
                    key = WAIT_KEYS[route]
                    try:
                        payload = json.loads(body or b"{}")
                        weight_dir = payload.get(key)
                    except (ValueError, AttributeError):
                        payload, weight_dir = None, None
                    if isinstance(weight_dir, str):
                        started = time.monotonic()
                        target = gate.wait_for(weight_dir)
                        gate._held(weight_dir, time.monotonic() - started)
                        if target is None:
                            self._reply(504, b'{"error": "relay has not delivered this step yet"}')
                            return
                        if target != weight_dir:
                            body = json.dumps({**payload, key: target}).encode()
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
                conn = http.client.HTTPConnection(*gate.upstream, timeout=None)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    response = conn.getresponse()
                    payload = response.read()
                    reply_headers = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP_HEADERS]
                    status = response.status
                except OSError as e:
                    self._reply(502, json.dumps({"error": f"inference server unreachable: {e}"}).encode())
                    return
                finally:
                    conn.close()
                gate._forwarded(route, status)
                self._reply(status, payload, reply_headers)

            def _reply(self, status: int, payload: bytes, headers: list[tuple[str, str]] | None = None) -> None:
                self.send_response(status)
                for key, value in headers or [("Content-Type", "application/json")]:
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = _forward

        return Handler

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> AdminGate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
