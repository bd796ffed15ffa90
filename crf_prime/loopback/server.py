"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for tests.

It is a real HTTP server (stdlib ``ThreadingHTTPServer`` on a background thread), so anything that speaks the OpenAI
protocol -- the ``openai`` client, verifiers' interception proxy, a harness in a child process -- can talk to it.
Every answer comes from a script: a list of :class:`Reply` consumed in order, or a callable that maps the request
body to a :class:`Reply`. Streaming answers are SSE ``chat.completion.chunk`` events with content and tool-call
argument deltas split over several chunks, like vLLM and OpenAI send them.

With ``billing`` the server bills like a provider and keeps the bill (:attr:`LoopbackOpenAI.charges`): a request
is charged when it has been read and the server starts answering it with HTTP 200 -- a normal answer, a stream, a
cut or unreadable body, an error body, a reply that hangs -- whether or not the client is still there to read the
answer; an HTTP error status (429, 500, ...) is not charged. Prompt tokens are the server's rough count (characters
/ 4); completion tokens are the reply's, or ``max_tokens`` of the request for a reply that is cut off (hang,
stall, unreadable body): the model generated up to the limit before the client stopped listening.

A billed answer carries the charge's generation id (``gen-...``, the body's ``id``; a stream's chunk ids; the first
bytes of an unreadable body, as a body cut off mid-way has them), and ``GET /v1/generation?id=...`` answers
``{"data": {"id": ..., "total_cost": ...}}`` for it, as OpenRouter's generation lookup does (404 for an unknown id,
or for the first ``Billing.lookup_misses`` lookups of an id: the record is not there yet). With
``Billing.idempotency_header`` a request repeating a key already charged is answered without a second charge,
reporting the first charge's usage and id.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import BaseModel, Field


class Reply(BaseModel):
    """One scripted response of the server."""

    content: str | None = None
    """Assistant text."""
    tool_calls: list[dict] = Field(default_factory=list)
    """Tool calls as ``{"name": ..., "arguments": "<json str>"}``; ids are generated unless ``id`` is given."""
    reasoning: str | None = None
    """Reasoning text, sent as ``reasoning_content``."""
    usage: dict | None = None
    """Usage block; default: rough prompt/completion token counts (characters / 4)."""
    cost: float | None = None
    """If set, reported as ``usage.cost`` (OpenRouter style), in USD."""
    delay_s: float = 0.0
    """Latency before the first byte, in seconds."""
    status: int = 200
    """HTTP status (e.g. 429, 500); a non-200 status sends an OpenAI-style error body."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra response headers (e.g. ``{"Retry-After": "0.2"}``)."""
    error: dict | None = None
    """Send HTTP 200 with body ``{"error": {...}}`` and no choices."""
    malformed: bool = False
    """Send a body that is not JSON."""
    stall_s: float = 0.0
    """Streaming only: pause this many seconds in the middle of the stream."""


class Billing(BaseModel):
    """Prices the server bills at (see the module docstring); each answer then reports ``usage.cost``."""

    price_in_per_mtok: float = 0.0
    """USD per 1M prompt tokens."""
    price_out_per_mtok: float = 0.0
    """USD per 1M completion tokens."""
    idempotency_header: str = ""
    """Request header holding an idempotency key; empty: keys are not honoured (every request is charged)."""
    lookup_misses: int = 0
    """Generation lookups of an id answered 404 before its record is there (a usage record that arrives late)."""


class Charge(BaseModel):
    """One request the server billed."""

    model: str
    prompt_tokens: int
    completion_tokens: int
    usd: float
    body: dict
    """The request body."""
    id: str = ""
    """Generation id (what ``GET /v1/generation?id=`` looks up)."""
    key: str = ""
    """The request's idempotency key, when the server honours keys and the request had one."""
    usage: dict = Field(default_factory=dict)
    """The usage block reported for it."""


Script = Callable[[dict], Reply] | Sequence[Reply]


class ScriptExhausted(RuntimeError):
    """The list script has no reply left for a request."""


HANG_S = 30.0
"""A ``delay_s`` at least this long is a hang: in billing mode it is billed as generating up to ``max_tokens``."""


def _rough_tokens(value: Any) -> int:
    return max(1, len(json.dumps(value, default=str)) // 4) if value else 0


def _split(text: str, parts: int) -> list[str]:
    """Split ``text`` into at most ``parts`` non-empty pieces (at least one, possibly empty)."""
    if not text:
        return [text]
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


class LoopbackOpenAI:
    """Serve scripted chat completions on ``http://127.0.0.1:PORT/v1`` from a background thread.

    Use as a context manager (or ``start()``/``stop()``). ``requests`` lists every chat-completion request body in
    arrival order.
    """

    def __init__(
        self,
        script: Script,
        *,
        model: str = "scripted",
        host: str = "127.0.0.1",
        port: int = 0,
        billing: Billing | None = None,
    ) -> None:
        self.model = model
        self.requests: list[dict] = []
        self.billing = billing
        self.charges: list[Charge] = []
        """Every billed request, in the order it was billed (``billing`` only)."""
        self.lookups: list[str] = []
        """Every generation id looked up, in order."""
        self._by_id: dict[str, Charge] = {}
        self._by_key: dict[str, Charge] = {}
        self._script = script
        self._next = 0
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._host = host
        self._port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("LoopbackOpenAI is not started")
        return f"http://{self._host}:{self._server.server_address[1]}/v1"

    def start(self) -> LoopbackOpenAI:
        if self._server is not None:
            return self
        owner = self

        class Handler(_Handler):
            server_owner = owner

        self._stopping.clear()
        self._server = _Server((self._host, self._port), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="loopback-openai", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._stopping.set()  # replies that hang give up
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> LoopbackOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- bill ----------------------------------------------------------------------------------------------------
    @property
    def charged_usd(self) -> float:
        """Sum of every charge so far."""
        with self._lock:
            return sum(c.usd for c in self.charges)

    def wait_for(self, predicate: Callable[[LoopbackOpenAI], bool], timeout: float) -> bool:
        """Block until ``predicate(self)`` holds (checked at each request's arrival and charge); False on timeout."""
        with self._arrived:
            return self._arrived.wait_for(lambda: predicate(self), timeout)

    def _charge(self, reply: Reply, body: dict, key: str = "") -> tuple[dict, str] | None:
        """Bill a request the server answers with HTTP 200; returns the usage block it reports and the generation id
        (None: no billing). A key already charged is not charged again: its first charge is reported."""
        if self.billing is None:
            return None
        key = key if self.billing.idempotency_header else ""
        with self._lock:
            first = self._by_key.get(key) if key else None
            if first is not None:
                return dict(first.usage), first.id
        usage = _usage(reply.model_copy(update={"cost": None}), body)
        if reply.delay_s >= HANG_S or reply.malformed or reply.stall_s:
            usage["completion_tokens"] = int(body.get("max_tokens") or usage["completion_tokens"])
        if reply.error is not None:
            usage["completion_tokens"] = 0
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        b = self.billing
        usd = (usage["prompt_tokens"] * b.price_in_per_mtok + usage["completion_tokens"] * b.price_out_per_mtok) / 1e6
        usage["cost"] = usd
        charge = Charge(
            model=str(body.get("model", "")),
            prompt_tokens=usage["prompt_tokens"],
            completion_tokens=usage["completion_tokens"],
            usd=usd,
            body=body,
            id=f"gen-{uuid.uuid4().hex[:20]}",
            key=key,
            usage=dict(usage),
        )
        with self._arrived:
            first = self._by_key.get(key) if key else None
            if first is not None:  # the same key arrived twice at once: one charge
                return dict(first.usage), first.id
            if key:
                self._by_key[key] = charge
            self._by_id[charge.id] = charge
            self.charges.append(charge)
            self._arrived.notify_all()
        return usage, charge.id

    def _lookup(self, generation_id: str) -> Charge | None:
        """The charge of a generation id, once its record is there (see ``Billing.lookup_misses``)."""
        with self._lock:
            self.lookups.append(generation_id)
            charge = self._by_id.get(generation_id)
            misses = self.billing.lookup_misses if self.billing is not None else 0
            if charge is None or self.lookups.count(generation_id) <= misses:
                return None
            return charge

    # -- script --------------------------------------------------------------------------------------------------
    def _reply_for(self, body: dict) -> Reply:
        with self._arrived:
            self.requests.append(body)
            self._arrived.notify_all()
            if not callable(self._script):
                if self._next >= len(self._script):
                    raise ScriptExhausted(
                        f"loopback script exhausted: request #{len(self.requests)} but only {len(self._script)} replies"
                    )
                self._next += 1
                return self._script[self._next - 1]
        return self._script(body)


class _Server(ThreadingHTTPServer):
    # the default backlog of 5 overflows on a burst of new connections and the client retries only after ~1 s
    request_queue_size = 256
    daemon_threads = True


class _Handler(BaseHTTPRequestHandler):
    server_owner: LoopbackOpenAI
    protocol_version = "HTTP/1.1"
    # headers and body go out in separate small writes: with Nagle on, each response waits ~40 ms for a delayed ACK
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        return

    # -- helpers -------------------------------------------------------------------------------------------------
    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _read_body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        return json.loads(raw or b"{}")

    # -- routes --------------------------------------------------------------------------------------------------
    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        if url.path.rstrip("/").endswith("/generation"):
            ids = urllib.parse.parse_qs(url.query).get("id") or [""]
            charge = self.server_owner._lookup(ids[0])
            if charge is None:
                self._send_json(404, {"error": {"message": f"generation {ids[0]!r} not found", "code": 404}})
                return
            data = {
                "id": charge.id,
                "model": charge.model,
                "total_cost": charge.usd,
                "tokens_prompt": charge.prompt_tokens,
                "tokens_completion": charge.completion_tokens,
            }
            self._send_json(200, {"data": data})
        elif self.path.rstrip("/").endswith("/models"):
            model = self.server_owner.model
            self._send_json(200, {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "crf"}]})
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        try:
            body = self._read_body()
        except (ValueError, json.JSONDecodeError) as e:
            self._send_json(400, {"error": {"message": f"request body is not JSON: {e}", "type": "invalid_request"}})
            return
        owner = self.server_owner
        try:
            reply = owner._reply_for(body)
        except ScriptExhausted as e:
            self._send_json(500, {"error": {"message": str(e), "type": "script_exhausted"}})
            return
        billing = owner.billing
        key = self.headers.get(billing.idempotency_header, "") if billing and billing.idempotency_header else ""
        charged = owner._charge(reply, body, key) if reply.status == 200 else None
        usage, gen_id = charged if charged is not None else (None, None)
        try:
            self._answer(reply, body, usage, gen_id)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (or died): the bill stands
            self.close_connection = True

    def _answer(self, reply: Reply, body: dict, usage: dict | None, gen_id: str | None = None) -> None:
        if reply.delay_s:
            self.server_owner._stopping.wait(reply.delay_s)
        if reply.malformed:
            # cut off mid-way: a billed body's first bytes name its generation, as a real cut-off body's would
            data = f'{{"id": "{gen_id}", "object": "chat.com'.encode() if gen_id else b"this is not json {"
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if reply.status != 200:
            err = reply.error or {"message": f"scripted HTTP {reply.status}", "type": "scripted", "code": reply.status}
            self._send_json(reply.status, {"error": err}, reply.headers)
            return
        if reply.error is not None:
            payload: dict[str, Any] = {"error": reply.error}
            if usage is not None:
                payload["usage"] = usage
            self._send_json(200, payload, reply.headers)
            return
        model = body.get("model") or self.server_owner.model
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._stream(reply, body, model, include_usage, usage, gen_id)
        else:
            self._send_json(200, _completion(reply, body, model, usage, gen_id), reply.headers)

    def _stream(
        self, reply: Reply, body: dict, model: str, include_usage: bool, usage: dict | None, gen_id: str | None
    ) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        for key, value in reply.headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.close_connection = True
        chunks = list(_chunks(reply, body, model, include_usage, usage, gen_id))
        stall_at = len(chunks) // 2
        try:
            for i, chunk in enumerate(chunks):
                if reply.stall_s and i == stall_at:
                    self.wfile.flush()
                    self.server_owner._stopping.wait(reply.stall_s)
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            return


def _tool_calls(reply: Reply) -> list[dict]:
    calls = []
    for i, call in enumerate(reply.tool_calls):
        args = call.get("arguments", "{}")
        if not isinstance(args, str):
            args = json.dumps(args)
        calls.append(
            {
                "id": call.get("id") or f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "index": i,
                "function": {"name": call["name"], "arguments": args},
            }
        )
    return calls


def _usage(reply: Reply, body: dict) -> dict:
    if reply.usage is not None:
        usage = dict(reply.usage)
    else:
        prompt = _rough_tokens(body.get("messages"))
        completion = _rough_tokens(reply.content) + _rough_tokens(reply.reasoning) + _rough_tokens(reply.tool_calls)
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if reply.cost is not None:
        usage["cost"] = reply.cost
    return usage


def _finish_reason(reply: Reply) -> str:
    return "tool_calls" if reply.tool_calls else "stop"


def _completion(reply: Reply, body: dict, model: str, usage: dict | None = None, gen_id: str | None = None) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.reasoning is not None:
        message["reasoning_content"] = reply.reasoning
    calls = _tool_calls(reply)
    if calls:
        message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in calls]
    return {
        "id": gen_id or f"chatcmpl-{uuid.uuid4().hex[:16]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": _finish_reason(reply), "logprobs": None}],
        "usage": usage if usage is not None else _usage(reply, body),
    }


def _chunks(
    reply: Reply, body: dict, model: str, include_usage: bool, usage: dict | None = None, gen_id: str | None = None
) -> Iterator[dict]:
    gen_id = gen_id or f"chatcmpl-{uuid.uuid4().hex[:16]}"
    base = {"id": gen_id, "object": "chat.completion.chunk", "created": int(time.time())}
    base["model"] = model

    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    yield chunk({"role": "assistant", "content": ""})
    if reply.reasoning:
        for piece in _split(reply.reasoning, 3):
            yield chunk({"reasoning_content": piece})
    if reply.content:
        for piece in _split(reply.content, 3):
            yield chunk({"content": piece})
    for call in _tool_calls(reply):
        head = {"index": call["index"], "id": call["id"], "type": "function"}
        yield chunk({"tool_calls": [{**head, "function": {"name": call["function"]["name"], "arguments": ""}}]})
        for piece in _split(call["function"]["arguments"], 3):
            yield chunk({"tool_calls": [{"index": call["index"], "function": {"arguments": piece}}]})
    yield chunk({}, _finish_reason(reply))
    if include_usage:
        yield {**base, "choices": [], "usage": usage if usage is not None else _usage(reply, body)}
