"""One teacher behind an OpenAI-compatible endpoint, asked for the next action at a recorded trace state.

Exactly one retry layer: the ``openai`` client is built with ``max_retries=0`` and tenacity retries what provably
cost nothing -- 408/409/429/5xx answers (the provider refused the request) and connection errors raised before the
request was written -- waiting what ``retry-after-ms`` / ``Retry-After`` asks (else exponential backoff with jitter).
An attempt whose request reached the provider and whose outcome is unknown (a timeout, a cut or unreadable
response) is not retried: it may have been billed, and a retry could pay for the same question twice; the record
says ``possibly_paid`` and the ledger books it at its reservation. The ``WIRE`` context variable, when set by the
pool, is told (and waited for) before each attempt's request is written, and told when an attempt was refused. Everything the API can throw is turned into a failed :class:`JournalRecord`: openai exceptions do not
pickle, so they must never cross a Ray process boundary (teachers-and-traces.md §1.5). An HTTP 200 whose body holds
``error`` and no ``choices`` (OpenRouter, mid-generation failure) is a failure, not an empty answer. The record
keeps the provider's generation id when the answer named one (also the head of a body cut off later), so that a
cost left unknown can be looked up (:meth:`TeacherClient.lookup_cost`); a teacher with an ``idempotency_header``
sends the pool's per-call key in it with every attempt.

Non-streamed requests go through the SDK's raw ``post`` with the body ``chat.completions.create`` would send (see
:func:`_body`) and the JSON answer is read as a plain dict (:func:`parse_completion`): same wire bytes, same errors
and status handling, without the SDK's per-request transform and model construction.
"""

from __future__ import annotations

import asyncio
import contextvars
import email.utils
import json
import re
import time
from typing import Any, Protocol

import httpx
import openai
from pydantic import ValidationError
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential, wait_random

from crf_prime.records.journal import JournalRecord
from crf_prime.records.models import Action, TeacherRequest, ToolCall
from crf_prime.teachers.config import TeacherConfig

_REASONING_KEYS = ("reasoning_content", "reasoning", "thinking", "reasoning_details")
_RETRY_STATUS = {408, 409, 429}


class _AttemptTimeout(Exception):
    """The whole attempt (streaming included) exceeded the teacher's timeout."""


class _Malformed(Exception):
    """The response could not be read as the protocol (e.g. a stream without a single event)."""


class _ProviderError(Exception):
    """HTTP 200 with an ``error`` body and no choices."""

    def __init__(self, error: Any, usage: Any) -> None:
        super().__init__(_error_text(error))
        self.usage = usage


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        code = error.get("code")
        return f"{error.get('message', error)}" + (f" (code {code})" if code is not None else "")
    return str(error)


class Wire(Protocol):
    """Told about every attempt of the current call (set per call by the pool in ``WIRE``)."""

    async def sent(self) -> None:
        """The request is about to be written (before the connection opens); returns once that is durable."""

    async def refused(self) -> None:
        """The attempt ended with an HTTP error status: the provider did not take the request."""

    @property
    def key(self) -> str:
        """The call's idempotency key (sent in the teacher's ``idempotency_header`` when it has one)."""


WIRE: contextvars.ContextVar[Wire | None] = contextvars.ContextVar("crf_teacher_wire", default=None)


class _Call:
    """Per-call attempt state, shared with the request hook through ``_CALL``."""

    __slots__ = ("generation_id", "infra_error", "key_header", "on_wire", "possibly_paid")

    def __init__(self, key_header: str = "") -> None:
        self.on_wire = False
        self.possibly_paid = False
        self.infra_error: BaseException | None = None
        self.key_header = key_header
        self.generation_id = ""


_CALL: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("crf_teacher_call", default=None)


async def _on_request(request: httpx.Request) -> None:
    """httpx request hook: runs before the connection is taken and anything is written."""
    call = _CALL.get()
    if call is None:
        return
    call.on_wire = True
    wire = WIRE.get()
    if wire is not None:
        if call.key_header and wire.key:
            request.headers[call.key_header] = wire.key
        try:
            await wire.sent()
        except BaseException as e:  # journal I/O: an infrastructure error, re-raised by ``ask`` (never a record)
            call.infra_error = e
            raise


_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)
"""Transport errors raised before any byte of the request was written."""


def refused_or_unsent(exc: BaseException) -> bool:
    """The attempt cost nothing: an HTTP error status, or a failure before the request was written."""
    if isinstance(exc, openai.APIStatusError):
        return True
    cause = exc.__cause__ if isinstance(exc, openai.APIConnectionError) else exc
    return isinstance(cause, _NOT_SENT)


def teacher_messages(request: TeacherRequest) -> list[dict[str, Any]]:
    """The context as sent to a teacher: reasoning/thinking fields dropped (other models cannot use them)."""
    return [{k: v for k, v in m.items() if k not in _REASONING_KEYS} for m in request.messages]


def _status(exc: BaseException) -> int | None:
    return exc.status_code if isinstance(exc, openai.APIStatusError) else None


def is_transient(exc: BaseException) -> bool:
    """Retry on 408/409/429/5xx, timeouts and connection errors; never on 4xx, malformed bodies or 200-with-error."""
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in _RETRY_STATUS or exc.status_code >= 500
    return isinstance(exc, openai.APIConnectionError | httpx.TransportError | _AttemptTimeout)


def retry_after_s(exc: BaseException | None) -> float | None:
    """Seconds the server asked to wait (``retry-after-ms`` preferred, then ``Retry-After`` seconds or HTTP date)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return float(ms) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def classify(exc: BaseException) -> str:
    """Short error class for the journal and the report."""
    if isinstance(exc, _ProviderError):
        return "provider_error"
    if isinstance(exc, openai.RateLimitError):
        return "rate_limit"
    if isinstance(exc, openai.APIStatusError):
        return "server_error" if exc.status_code >= 500 else f"http_{exc.status_code}"
    if isinstance(exc, openai.APITimeoutError | httpx.TimeoutException | _AttemptTimeout):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError | httpx.TransportError):
        return "connection"
    if isinstance(exc, json.JSONDecodeError | openai.APIResponseValidationError | _Malformed):
        return "malformed"
    return type(exc).__name__


_REQUEST_OPTIONS: dict[str, Any] = {"security": {"bearer_auth": True}}
"""Per-request options of the raw ``post``: the API key as a bearer token, as ``chat.completions.create`` sends it."""


def _body(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The JSON body ``chat.completions.create(**kwargs)`` would send, built without the SDK's request transform.

    ``create`` walks every message through ``async_transform`` against the ``CompletionCreateParams`` TypedDicts
    (~1-2 ms of event-loop CPU per request, the largest per-request cost of the pool); the chat-completion params
    declare no aliases or formats, so for the JSON-ready dicts of a trace state the transform is the identity.
    ``extra_body`` is merged at the top level, as ``create`` does.
    """
    body = {k: v for k, v in kwargs.items() if k != "extra_body"}
    body.update(kwargs.get("extra_body") or {})
    return body


def parse_completion(data: Any) -> tuple[Action, dict[str, Any] | None]:
    """A non-streamed chat-completion body (already JSON-decoded) -> (action, usage dict).

    Read from the plain dict rather than the SDK's ``ChatCompletion`` model (same fields, no model construction
    per response). An ``error`` body without choices is a :class:`_ProviderError`; any other shape that is not a
    chat completion is :class:`_Malformed`.
    """
    if not isinstance(data, dict):
        raise _Malformed(f"response body is a JSON {type(data).__name__}, not an object")
    usage = data.get("usage")
    usage = usage if isinstance(usage, dict) else None
    if not data.get("choices"):
        raise _ProviderError(data.get("error") or "response has no choices", usage)
    try:
        msg = data["choices"][0]["message"] or {}
        calls = tuple(
            ToolCall(id=c.get("id") or "", name=fn["name"], arguments=fn.get("arguments") or "{}")
            for c in (msg.get("tool_calls") or [])
            if (fn := c.get("function")) is not None
        )
        reasoning = msg.get("reasoning_content") or msg.get("reasoning") or ""
        return Action(text=msg.get("content") or "", reasoning=str(reasoning), tool_calls=calls), usage
    except (KeyError, IndexError, TypeError, AttributeError, ValidationError) as e:
        raise _Malformed(f"not a chat completion: {type(e).__name__}: {e}") from None


_GENERATION_ID = re.compile(rb'^\s*\{\s*"id"\s*:\s*"([^"\\]{1,200})"')
"""The ``id`` at the head of a chat-completion body (OpenRouter writes it first): readable in a body cut off later."""


def generation_id(content: bytes, data: Any = None) -> str:
    """The provider's generation id of a response: its decoded body's ``id``, else the head of an unreadable one."""
    if isinstance(data, dict):
        value = data.get("id")
        return value if isinstance(value, str) else ""
    found = _GENERATION_ID.match(content)
    return found.group(1).decode(errors="replace") if found else ""


def _usage_dict(usage: Any) -> dict[str, Any] | None:
    """Usage as a plain dict (extra keys such as OpenRouter's ``cost`` kept) from an SDK model or a dict."""
    if usage is None or isinstance(usage, dict):
        return usage
    return usage.model_dump()


KEEPALIVE_S = 30.0
"""Seconds an idle keep-alive connection is kept (httpx default: 5). A teacher asked only now and then -- the
expensive tier under tiered querying -- would otherwise reconnect (TCP + TLS) on most calls; a connection the server
has closed meanwhile is noticed by httpcore before reuse, and a lost race is a connection error the retry covers."""


def connection_limits(max_concurrency: int) -> httpx.Limits:
    """httpx pool limits for one teacher: keep-alive room for every concurrent request (the SDK keeps 100)."""
    return httpx.Limits(
        max_connections=max(1000, max_concurrency),
        max_keepalive_connections=max(100, max_concurrency),
        keepalive_expiry=KEEPALIVE_S,
    )


def question_params(config: TeacherConfig, has_tools: bool) -> dict[str, Any]:
    """The request body's fields other than messages and tools (``extra_body`` merged): the teacher's part of a
    question (see :mod:`crf_prime.teachers.money`)."""
    return _body({k: v for k, v in request_kwargs(config, [], [{}] if has_tools else []).items() if k not in _CONTENT})


_CONTENT = ("messages", "tools")


def request_kwargs(config: TeacherConfig, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict:
    """Keyword arguments of ``chat.completions.create`` for a teacher and a context."""
    s = config.sampling
    kwargs: dict[str, Any] = {
        "model": config.model,
        "messages": messages,
        "temperature": s.temperature,
        "max_tokens": s.max_tokens,
    }
    if s.top_p is not None:
        kwargs["top_p"] = s.top_p
    if tools:
        kwargs["tools"] = tools
        kwargs["tool_choice"] = "auto"
    if s.extra_body:
        kwargs["extra_body"] = dict(s.extra_body)
    if config.stream:
        kwargs["stream"] = True
        kwargs["stream_options"] = {"include_usage": True}
    return kwargs


class TeacherClient:
    """Asks one teacher for the next action at a state; at most ``max_concurrency`` requests in flight.

    ``ask`` never raises for API or transport problems: it returns a :class:`JournalRecord` with ``ok=False``.
    """

    def __init__(
        self, config: TeacherConfig, *, api_key: str | None = None, http_client: httpx.AsyncClient | None = None
    ) -> None:
        self.config = config
        if http_client is None:
            http_client = openai.DefaultAsyncHttpxClient(limits=connection_limits(config.max_concurrency))
        http_client.event_hooks = {
            **http_client.event_hooks,
            "request": [*http_client.event_hooks.get("request", []), _on_request],
        }
        self._client = openai.AsyncOpenAI(
            base_url=config.base_url,
            api_key=api_key if api_key is not None else config.api_key(),
            max_retries=0,  # the only retry layer is tenacity below
            timeout=config.timeout_s,
            http_client=http_client,
        )
        self._sem = asyncio.Semaphore(config.max_concurrency)

    async def close(self) -> None:
        await self._client.close()

    def request(self, request: TeacherRequest) -> dict[str, Any]:
        """Keyword arguments of ``chat.completions.create`` for this request."""
        return request_kwargs(self.config, teacher_messages(request), list(request.tools))

    async def lookup_cost(self, generation_id: str) -> float | None:
        """The charge of one generation from OpenRouter's generation lookup (``GET /generation?id=``): its
        ``total_cost`` in USD, or None while the provider has no record of it (404) or cannot be reached."""
        try:
            response = await self._client.get(  # type: ignore[call-overload]  # options: openai types it as RequestOptions, a TypedDict only its private openai._types exports
                "/generation",
                cast_to=httpx.Response,
                options={"params": {"id": generation_id}, **_REQUEST_OPTIONS},
            )
            cost = json.loads(response.content)["data"]["total_cost"]
        except (openai.APIError, httpx.HTTPError, ValueError, KeyError, TypeError):
            return None
        return float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None

    async def ask(self, request: TeacherRequest) -> JournalRecord:
        async with self._sem:
            call = _Call(self.config.idempotency_header)
            token = _CALL.set(call)
            try:
                rec = await self._ask(request, call)
            finally:
                _CALL.reset(token)
            if call.infra_error is not None:
                raise call.infra_error
            return rec

    async def _ask(self, request: TeacherRequest, call: _Call) -> JournalRecord:
        cfg = self.config
        start = time.perf_counter()
        attempts = 0
        kwargs = self.request(request)
        # 0.5·2^(n-1) s capped at 8 s, plus up to 0.5 s of jitter; spelled with names tenacity 8.2–9.2 all have
        # (prime-rl locks 9.1.4, whose wait_exponential_jitter has no ``multiplier``)
        backoff = wait_exponential(multiplier=0.5, max=8.0) + wait_random(0, 0.5)

        def wait(retry_state: Any) -> float:
            after = retry_after_s(retry_state.outcome.exception())
            return after if after is not None else backoff(retry_state)

        def stop(retry_state: Any) -> bool:
            # give up when attempts are spent, or when the server asks for a longer wait than we accept
            after = retry_after_s(retry_state.outcome.exception())
            return stop_after_attempt(cfg.max_attempts)(retry_state) or (
                after is not None and after > cfg.max_retry_after_s
            )

        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(lambda e: is_transient(e) and not call.possibly_paid),
                wait=wait,
                stop=stop,
                reraise=True,
            ):
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    action, usage = await self._once(kwargs, call)
        except Exception as exc:  # every API/transport failure becomes a record; nothing crosses a process boundary
            usage = getattr(exc, "usage", None)
            return self._record(request, start, attempts, None, usage, error=exc, call=call)
        return self._record(request, start, attempts, action, usage, call=call)

    async def _once(self, kwargs: dict[str, Any], call: _Call) -> tuple[Action, Any]:
        call.on_wire = False
        call.generation_id = ""
        try:
            try:
                async with asyncio.timeout(self.config.timeout_s):
                    if kwargs.get("stream"):
                        return await self._streamed(kwargs, call)
                    response = await self._client.post(  # type: ignore[call-overload]  # options: as in lookup_cost
                        "/chat/completions", body=_body(kwargs), cast_to=httpx.Response, options=_REQUEST_OPTIONS
                    )
            except TimeoutError as e:
                raise _AttemptTimeout(f"no complete response within {self.config.timeout_s:g} s") from e
            try:
                data = json.loads(response.content)
            except ValueError:
                call.generation_id = generation_id(response.content)
                raise
            call.generation_id = generation_id(b"", data)
            return parse_completion(data)
        except Exception as exc:
            if call.on_wire:
                if refused_or_unsent(exc):
                    call.on_wire = False
                    wire = WIRE.get()
                    if wire is not None:
                        await wire.refused()
                else:  # it reached the provider and we do not know what it cost
                    call.possibly_paid = True
            raise

    async def _streamed(self, kwargs: dict[str, Any], call: _Call) -> tuple[Action, Any]:
        text: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        usage = None
        got_choice = got_chunk = False
        raw = await self._client.chat.completions.with_raw_response.create(**kwargs)
        if "text/event-stream" not in raw.headers.get("content-type", ""):
            # a plain JSON body where SSE was asked for: an error object (OpenRouter) or a broken server
            data = json.loads(await raw.http_response.aread())
            call.generation_id = generation_id(b"", data)
            if isinstance(data, dict) and data.get("error") and not data.get("choices"):
                raise _ProviderError(data["error"], data.get("usage"))
            raise _Malformed("asked for a stream, got a non-SSE body")
        stream = raw.parse()
        async for chunk in stream:
            if not got_chunk and isinstance(chunk.id, str):
                call.generation_id = chunk.id
            got_chunk = True
            extra = chunk.model_extra or {}
            if extra.get("error"):
                raise _ProviderError(extra["error"], chunk.usage or usage)
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices or []:
                got_choice = True
                delta = choice.delta
                if delta.content:
                    text.append(delta.content)
                r = (delta.model_extra or {}).get("reasoning_content") or (delta.model_extra or {}).get("reasoning")
                if r:
                    reasoning.append(str(r))
                for tc in delta.tool_calls or []:
                    slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                    if tc.id:
                        slot["id"] = tc.id
                    if tc.function is not None:
                        slot["name"] += tc.function.name or ""
                        slot["arguments"] += tc.function.arguments or ""
        if not got_chunk:
            raise _Malformed("stream ended without a single server-sent event")
        if not got_choice:
            raise _ProviderError("stream ended without choices", usage)
        tool_calls = tuple(
            ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"] or "{}") for _, c in sorted(calls.items())
        )
        return Action(text="".join(text), reasoning="".join(reasoning), tool_calls=tool_calls), usage

    def _record(
        self,
        request: TeacherRequest,
        start: float,
        attempts: int,
        action: Action | None,
        usage: Any,
        error: BaseException | None = None,
        call: _Call | None = None,
    ) -> JournalRecord:
        cfg = self.config
        usage = _usage_dict(usage)
        # a request that reached the provider without a usage block back: its cost is unknown, maybe not zero
        possibly_paid = call is not None and usage is None and (call.possibly_paid or call.on_wire)
        inp = int((usage or {}).get("prompt_tokens") or 0)
        out = int((usage or {}).get("completion_tokens") or 0)
        reported = (usage or {}).get("cost")
        if reported is not None:
            cost, source = float(reported), "usage"
        elif usage is not None:
            cost, source = cfg.price_cost(inp, out), "prices"
        else:
            cost, source = 0.0, ""
        return JournalRecord(
            state_id=request.key,
            teacher=cfg.name,
            model=cfg.model,
            model_family=cfg.model_family,
            ok=error is None,
            action=action,
            error="" if error is None else f"{type(error).__name__}: {error}"[:2000],
            error_type="" if error is None else classify(error),
            status=None if error is None else _status(error),
            input_tokens=inp,
            output_tokens=out,
            cost_usd=cost,
            cost_source=source,
            possibly_paid=possibly_paid,
            generation_id=call.generation_id if call is not None else "",
            latency_s=time.perf_counter() - start,
            attempt=max(1, attempts),
            ts=time.time(),
            trace_id=request.trace_id,
        )
