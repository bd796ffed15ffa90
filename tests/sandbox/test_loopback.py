"""LoopbackOpenAI: a real HTTP server on 127.0.0.1, exercised with the real ``openai`` client."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import httpx
import openai
import pytest

from crf_prime.loopback import LoopbackOpenAI, Reply

MESSAGES = [{"role": "user", "content": "hi"}]


def client(server: LoopbackOpenAI, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0, **kw)


def test_non_streaming_content_tool_calls_usage_cost() -> None:
    call = {"name": "bash", "arguments": json.dumps({"command": "ls"})}
    with LoopbackOpenAI([Reply(content="hello", tool_calls=[call], reasoning="hmm", cost=0.25)]) as server:
        r = client(server).chat.completions.create(model="m", messages=MESSAGES)
    msg = r.choices[0].message
    assert msg.content == "hello"
    assert msg.tool_calls[0].function.name == "bash"
    assert json.loads(msg.tool_calls[0].function.arguments) == {"command": "ls"}
    assert msg.tool_calls[0].id.startswith("call_")
    assert r.choices[0].finish_reason == "tool_calls"
    assert r.usage.model_extra["cost"] == 0.25
    assert msg.model_extra["reasoning_content"] == "hmm"
    assert server.requests == [{"model": "m", "messages": MESSAGES}]


def test_streaming_splits_tool_call_arguments_and_sends_usage() -> None:
    args = json.dumps({"command": "echo a long command line"})
    with LoopbackOpenAI([Reply(content="thinking aloud", tool_calls=[{"name": "bash", "arguments": args}])]) as server:
        stream = client(server).chat.completions.create(
            model="m", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        chunks = list(stream)
    arg_pieces = [
        tc.function.arguments
        for c in chunks
        if c.choices
        for tc in (c.choices[0].delta.tool_calls or [])
        if tc.function.arguments
    ]
    assert len(arg_pieces) >= 2  # delivered as several deltas
    assert "".join(arg_pieces) == args
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == "thinking aloud"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


def test_error_statuses_and_bodies() -> None:
    script = [
        Reply(status=429, headers={"Retry-After": "0.2"}),
        Reply(status=500),
        Reply(error={"message": "upstream overloaded", "code": 502}),
        Reply(malformed=True),
    ]
    with LoopbackOpenAI(script) as server:
        c = client(server)
        with pytest.raises(openai.RateLimitError) as rate:
            c.chat.completions.create(model="m", messages=MESSAGES)
        assert rate.value.response.headers["Retry-After"] == "0.2"
        with pytest.raises(openai.InternalServerError):
            c.chat.completions.create(model="m", messages=MESSAGES)
        raw = urllib.request.urlopen(
            urllib.request.Request(
                server.base_url + "/chat/completions", data=b'{"messages": []}', headers={"Content-Type": "x"}
            )
        ).read()
        assert json.loads(raw) == {"error": {"message": "upstream overloaded", "code": 502}}
        raw = urllib.request.urlopen(urllib.request.Request(server.base_url + "/chat/completions", data=b"{}")).read()
        assert raw == b"this is not json {"


def test_script_exhausted_and_callable_script() -> None:
    with LoopbackOpenAI([Reply(content="only")]) as server:
        c = client(server)
        c.chat.completions.create(model="m", messages=MESSAGES)
        with pytest.raises(openai.InternalServerError, match="script exhausted"):
            c.chat.completions.create(model="m", messages=MESSAGES)

    def echo(body: dict) -> Reply:
        return Reply(content=body["messages"][-1]["content"].upper())

    with LoopbackOpenAI(echo, model="echo-model") as server:
        r = client(server).chat.completions.create(model="x", messages=MESSAGES)
        assert r.choices[0].message.content == "HI"
        assert [m.id for m in client(server).models.list()] == ["echo-model"]


def test_stall_mid_stream_trips_client_timeout() -> None:
    with LoopbackOpenAI([Reply(content="slow answer here", stall_s=2.0)]) as server:
        c = client(server, timeout=0.5)
        with pytest.raises((openai.APITimeoutError, httpx.TimeoutException)):  # raised while iterating
            list(c.chat.completions.create(model="m", messages=MESSAGES, stream=True))


def test_unknown_route_is_404_and_server_stops() -> None:
    server = LoopbackOpenAI([]).start()
    url = server.base_url
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url + "/nope")
    assert e.value.code == 404
    server.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/models", timeout=2)
