"""``ReplayHarness``: one model call at the replayed state, in-process, with the state's own tools.

A replay task asks for exactly one next action; nothing is executed (the recorded trace's environment is gone), so
the harness needs no runtime program, no ``uv`` bootstrap and no network beyond the interception ``endpoint``:
``Harness.launch`` may run in-process as long as the model call goes to ``endpoint`` with bearer ``secret``
(``verifiers/v1/harness.py``), which records the turn (tokens and logprobs for prime-rl) in the trace.
"""

from __future__ import annotations

import json
import ssl
from functools import cache
from typing import Any

import httpx
import openai
from pydantic import Field
from verifiers.v1.clients import ModelContext
from verifiers.v1.configs.harness import HarnessConfig
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.harness import Harness
from verifiers.v1.runtimes import ProgramResult, Runtime
from verifiers.v1.task import TaskData
from verifiers.v1.trace import Trace
from verifiers.v1.types import ID


class ReplayHarnessConfig(HarnessConfig):
    """Knobs of the replay harness (``--env.agent.harness.*`` / TOML ``[env.agent.harness]``)."""

    id: ID = "trace-replay"
    request_timeout_s: float = Field(600.0, gt=0)
    """Timeout of the one model request (seconds)."""
    offer_tools: bool = True
    """Offer the state's recorded tool schemas to the policy (off: the policy answers in text)."""


@cache
def _ssl_context() -> ssl.SSLContext:
    """httpx's default client context, built once per process: each episode makes its own client, and building the
    context (loading the CA bundle) took 43 % of an env-server worker's CPU in the CPU rehearsal (py-spy)."""
    return httpx.create_ssl_context()


class ReplayHarness(Harness[ReplayHarnessConfig]):
    """Send the state's messages and tools once; the reply is the proposed action."""

    APPENDS_SYSTEM_PROMPT = True
    NEEDS_CONTAINER = False
    EXECUTES_CODE = False

    async def launch(
        self,
        ctx: ModelContext,
        trace: Trace,
        runtime: Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: TaskData,
    ) -> ProgramResult:
        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt is not None:
            messages.extend(message_to_wire(m) for m in prompt)
        tools = list(getattr(data, "tools", None) or []) if self.config.offer_tools else []
        client = openai.AsyncOpenAI(
            base_url=endpoint,
            api_key=secret,
            max_retries=2,
            timeout=self.config.request_timeout_s,
            http_client=openai.DefaultAsyncHttpxClient(verify=_ssl_context()),
        )
        kwargs: dict[str, Any] = {"model": ctx.model, "messages": messages}
        if tools:
            kwargs["tools"] = tools
        try:
            completion = await client.chat.completions.create(**kwargs)
        finally:
            await client.close()
        message = completion.choices[0].message if completion.choices else None
        calls = [c.function.name for c in (message.tool_calls or [])] if message is not None else []
        return ProgramResult(exit_code=0, stdout=json.dumps({"tool_calls": calls}), stderr="")
