"""TeacherClient against a real OpenAI-compatible HTTP server on loopback, with scripted faults."""

from __future__ import annotations

import json
import pickle

import pytest
from teachers_helpers import TOOLS, answer, make_state, teacher

from crf_prime.loopback import LoopbackOpenAI, Reply
from crf_prime.records.journal import JournalRecord
from crf_prime.teachers.client import TeacherClient

pytestmark = pytest.mark.timeout(60)


async def ask(replies: list[Reply], **cfg) -> tuple[JournalRecord, LoopbackOpenAI]:
    with LoopbackOpenAI(replies) as server:
        client = TeacherClient(teacher("a", server.base_url, **cfg))
        try:
            rec = await client.ask(make_state(1).request())
        finally:
            await client.close()
    return rec, server


async def test_tool_call_answer_state_tools_sent_and_reasoning_stripped():
    rec, server = await ask([answer("pytest -x", reasoning="because")])
    assert rec.ok and rec.attempt == 1 and rec.error == ""
    assert rec.action is not None and rec.action.tool_calls[0].name == "bash"
    assert json.loads(rec.action.tool_calls[0].arguments) == {"command": "pytest -x"}
    assert rec.action.reasoning == "because"
    body = server.requests[0]
    assert body["tools"] == list(TOOLS) and body["tool_choice"] == "auto"
    assert all("reasoning_content" not in m for m in body["messages"])
    assert (rec.state_id, rec.teacher, rec.model, rec.trace_id) == ("s0001", "a", "model-a", "t0")


async def test_429_with_retry_after_is_honoured_then_succeeds():
    limited = Reply(status=429, headers={"Retry-After": "0.3"})
    rec, server = await ask([limited, limited, answer()])
    assert rec.ok and rec.attempt == 3 and len(server.requests) == 3
    assert rec.latency_s >= 0.6  # two waits of the server's Retry-After


async def test_retry_after_ms_is_preferred():
    rec, server = await ask([Reply(status=503, headers={"retry-after-ms": "50", "Retry-After": "30"}), answer()])
    assert rec.ok and rec.attempt == 2 and len(server.requests) == 2


async def test_retry_after_longer_than_accepted_fails_at_once():
    rec, server = await ask([Reply(status=429, headers={"Retry-After": "90"}), answer()], max_retry_after_s=5)
    assert not rec.ok and rec.error_type == "rate_limit" and rec.status == 429
    assert rec.attempt == 1 and len(server.requests) == 1


async def test_500_retried_until_attempts_spent():
    rec, server = await ask([Reply(status=500, headers={"retry-after-ms": "1"})] * 3)
    assert not rec.ok and rec.error_type == "server_error" and rec.status == 500
    assert rec.attempt == 3 and len(server.requests) == 3


async def test_400_is_not_retried():
    rec, server = await ask([Reply(status=400), answer()])
    assert not rec.ok and rec.error_type == "http_400" and len(server.requests) == 1


async def test_timeout_after_the_request_was_sent_is_not_retried():
    """The provider had the request: it may bill it, so a retry could pay twice for one question."""
    rec, server = await ask([Reply(delay_s=1.0), answer()], timeout_s=0.2, max_attempts=3)
    assert not rec.ok and rec.error_type == "timeout" and rec.attempt == 1 and len(server.requests) == 1
    assert rec.possibly_paid and rec.cost_usd == 0.0  # the ledger books it at the call's reservation


class RecordingWire:
    """A pool-side wire that notes, at each event, how many requests the server had received."""

    def __init__(self) -> None:
        self.server: LoopbackOpenAI | None = None
        self.events: list[tuple[str, int]] = []

    async def sent(self) -> None:
        assert self.server is not None
        self.events.append(("sent", len(self.server.requests)))

    async def refused(self) -> None:
        assert self.server is not None
        self.events.append(("refused", len(self.server.requests)))


async def test_the_wire_is_told_before_each_request_is_written_and_after_each_refusal():
    from crf_prime.teachers.client import WIRE

    wire = RecordingWire()
    token = WIRE.set(wire)
    try:
        with LoopbackOpenAI(
            [Reply(status=429, headers={"Retry-After": "0.01"}), Reply(status=500), answer()]
        ) as server:
            wire.server = server
            client = TeacherClient(teacher("a", server.base_url, max_attempts=3))
            rec = await client.ask(make_state(1).request())
            await client.close()
    finally:
        WIRE.reset(token)
    assert rec.ok and not rec.possibly_paid and rec.attempt == 3
    # "sent" comes before the server has the request; "refused" after it answered with an error status
    assert wire.events == [("sent", 0), ("refused", 1), ("sent", 1), ("refused", 2), ("sent", 2)]


async def test_200_with_error_and_no_choices_is_a_failure():
    err = {"message": "upstream provider died mid-generation", "code": 502}
    rec, server = await ask([Reply(error=err), answer()])
    assert not rec.ok and rec.error_type == "provider_error" and rec.action is None
    assert "upstream provider died" in rec.error and len(server.requests) == 1


async def test_malformed_json_is_a_failure_without_retry():
    rec, server = await ask([Reply(malformed=True), answer()])
    assert not rec.ok and rec.error_type == "malformed" and len(server.requests) == 1


async def test_stream_assembles_tool_call_deltas_and_usage():
    rec, server = await ask([answer("make test", cost=0.0031, stall_s=0.05)], stream=True)
    assert server.requests[0]["stream"] is True
    assert rec.ok and json.loads(rec.action.tool_calls[0].arguments) == {"command": "make test"}
    assert rec.cost_usd == pytest.approx(0.0031) and rec.cost_source == "usage"


async def test_slow_stream_times_out_and_is_not_retried():
    rec, server = await ask([answer(stall_s=1.5), answer()], stream=True, timeout_s=0.3)
    assert not rec.ok and rec.error_type == "timeout" and rec.possibly_paid
    # the request that reached the provider is never sent again; an attempt whose 0.3 s ran out before its request
    # was on the wire (a loaded machine) was not sent, and is retried
    assert len(server.requests) == 1


async def test_cost_from_usage_cost_when_present():
    rec, _ = await ask([answer(cost=0.0123)], price_in_per_mtok=100.0, price_out_per_mtok=100.0)
    assert rec.cost_usd == pytest.approx(0.0123) and rec.cost_source == "usage"


async def test_cost_from_price_table_without_usage_cost():
    usage = {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500}
    rec, _ = await ask([answer(usage=usage)], price_in_per_mtok=2.0, price_out_per_mtok=10.0)
    assert (rec.input_tokens, rec.output_tokens) == (1000, 500)
    assert rec.cost_usd == pytest.approx(0.002 + 0.005) and rec.cost_source == "prices"


async def test_connection_refused_becomes_a_record():
    import socket

    with socket.socket() as s:  # a port with nobody listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = TeacherClient(teacher("a", f"http://127.0.0.1:{port}/v1", max_attempts=2))
    rec = await client.ask(make_state(1).request())
    await client.close()
    assert not rec.ok and rec.error_type == "connection" and rec.attempt == 2


async def test_failure_records_pickle_across_processes():
    rec, _ = await ask([Reply(status=429, headers={"Retry-After": "0.01"})] * 3)
    back = pickle.loads(pickle.dumps(rec))
    assert back == rec and back.error_type == "rate_limit"


async def test_request_matches_the_sdk_create_call_byte_for_byte():
    """The client posts the body itself (no SDK transform): same JSON, same bearer key as chat.completions.create."""
    import httpx
    import openai

    seen: list[tuple[str, str | None, dict]] = []

    async def hook(request: httpx.Request) -> None:
        seen.append((request.url.path, request.headers.get("authorization"), json.loads(request.content)))

    sampling = {"top_p": 0.9, "extra_body": {"provider": {"order": ["x"]}, "reasoning": {"effort": "low"}}}
    with LoopbackOpenAI([answer("a"), answer("b")]) as server:
        async with httpx.AsyncClient(event_hooks={"request": [hook]}) as http:
            client = TeacherClient(teacher("a", server.base_url, sampling=sampling), api_key="sk-1", http_client=http)
            rec = await client.ask(make_state(1).request())
            sdk = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-1", max_retries=0, http_client=http)
            await sdk.chat.completions.create(**client.request(make_state(1).request()))
    assert rec.ok
    assert seen[0] == seen[1]
    assert seen[0][1] == "Bearer sk-1" and seen[0][2]["provider"] == {"order": ["x"]} and seen[0][2]["top_p"] == 0.9


@pytest.mark.parametrize(
    ("body", "error_type"),
    [
        ([1, 2], "malformed"),
        ({"choices": [{"message": {"tool_calls": [{"function": {"arguments": "{}"}}]}}]}, "malformed"),
        ({"choices": [], "error": {"message": "overloaded", "code": 529}}, "provider_error"),
    ],
)
async def test_bodies_that_are_not_chat_completions(body, error_type):
    from crf_prime.teachers.client import _Malformed, _ProviderError, classify, parse_completion

    with pytest.raises((_Malformed, _ProviderError)) as info:
        parse_completion(body)
    assert classify(info.value) == error_type
