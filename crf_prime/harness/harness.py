"""``SandboxHarness``: a verifiers 0.4.0 harness whose agent loop runs in-process and whose every tool call runs in
crf-prime's bubblewrap sandbox (local ``subprocess`` runtime) or through ``runtime.run`` (container runtimes).

verifiers' built-in ``bash`` harness bootstraps a PEP-723 chat program with ``uv`` inside the runtime and, on the
``subprocess`` runtime, executes the model's commands on the host unconfined. This one needs neither ``uv`` nor
network to start: ``Harness.launch`` may run the loop in-process as long as every model call goes to the given
interception ``endpoint`` with bearer ``secret`` (docstring of ``verifiers/v1/harness.py: Harness.launch``), so the
trace records every turn exactly as it does for the built-in harnesses.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

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

from crf_prime.harness.executors import Executor, RuntimeExecutor, SandboxExecutor
from crf_prime.harness.tools import EDIT_PROGRAM, TOOL_NAMES, TOOL_SCHEMAS, VIEW_PROGRAM, ToolOutcome, format_outcome
from crf_prime.placement import local_workdir
from crf_prime.sandbox import Sandbox, SandboxConfig, SandboxLimits

logger = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are a coding agent working in a task directory. Use the tools: bash runs a shell command (isolated, no "
    "network), view shows a file or directory, edit replaces one occurrence of a string in a file, submit finishes."
)


class SandboxHarnessConfig(HarnessConfig, SandboxConfig):
    """Knobs of the sandboxed harness (``--env.agent.harness.*`` / TOML ``[env.agent.harness]``). The sandbox
    settings (``limits``, ``unsandboxed``, ``bwrap``) are :class:`crf_prime.sandbox.SandboxConfig`'s; ``limits`` apply
    to one command, ``limits.wall_seconds`` being the default a model's call may lower or raise up to
    ``max_command_timeout_s``."""

    id: ID = "crf-sandbox"
    tools: list[str] = Field(default_factory=lambda: list(TOOL_NAMES))
    """Tools offered to the model, a subset of bash, view, edit, submit."""
    system_prompt: str = SYSTEM_PROMPT
    """Harness system prompt, placed before the task's own system prompt."""
    max_turns: int = Field(50, gt=0)
    """Model calls per rollout (the agent seat's ``max_turns`` stop condition also applies)."""
    limits: SandboxLimits = SandboxLimits(output_bytes=200_000)
    """Resource limits of one command (output capped lower than a standalone run's: it goes back to the model)."""
    max_command_timeout_s: float = Field(600.0, gt=0)
    """Upper bound on the per-command timeout the model may request (seconds)."""
    rollout_command_seconds: float = Field(1800.0, gt=0)
    """Total wall-clock seconds of commands per rollout; once spent, tools answer with an error and the loop ends."""
    max_result_chars: int = Field(16_000, ge=1)
    """Characters of a tool result sent back to the model (the middle is elided beyond this)."""
    ro_binds: list[str] = Field(default_factory=list)
    """Extra host paths visible read-only in the box (e.g. a shared venv). Tasks add their own via a
    ``sandbox_ro_binds`` field on their TaskData."""
    protected: list[str] = Field(default_factory=list)
    """Paths inside the rollout directory re-bound read-only (relative to it). Tasks add their own via a
    ``sandbox_protected`` field on their TaskData."""
    request_timeout_s: float = Field(600.0, gt=0)
    """Timeout of one model call (seconds)."""


class _Rollout:
    """Per-rollout state (the harness object is shared by concurrent rollouts)."""

    def __init__(self, executor: Executor, config: SandboxHarnessConfig) -> None:
        self.executor = executor
        self.config = config
        self.spent_s = 0.0
        self.submitted = False
        self.exhausted = False

    async def call(self, name: str, raw_args: str | None) -> str:
        """Run one tool call; every failure comes back as the tool's text (an ``error: ...`` line)."""
        if name not in self.config.tools:
            return f"error: unknown tool {name!r}; available tools: {', '.join(self.config.tools)}"
        try:
            args = json.loads(raw_args or "{}")
        except json.JSONDecodeError as e:
            return f"error: invalid JSON in tool arguments ({e}); resend the call with valid JSON"
        if not isinstance(args, dict):
            return f"error: tool arguments must be a JSON object, got {type(args).__name__}"
        if name == "submit":
            self.submitted = True
            return "submitted"
        budget = self.config.rollout_command_seconds - self.spent_s
        if budget <= 0:
            self.exhausted = True
            return f"error: this rollout's command budget of {self.config.rollout_command_seconds:g} s is spent"
        try:
            argv, timeout = self._argv(name, args)
        except (KeyError, TypeError, ValueError) as e:
            return f"error: bad arguments for {name}: {e}"
        timeout = min(timeout, budget)
        start = time.monotonic()
        outcome: ToolOutcome = await self.executor.run(argv, timeout_s=timeout)
        self.spent_s += time.monotonic() - start
        return format_outcome(outcome, max_chars=self.config.max_result_chars)

    def _argv(self, name: str, args: dict[str, Any]) -> tuple[list[str], float]:
        default = self.config.limits.wall_seconds
        if name == "bash":
            command = args["command"]
            if not isinstance(command, str) or not command.strip():
                raise ValueError("'command' must be a non-empty string")
            requested = float(args.get("timeout") or default)
            return ["bash", "-c", command], max(1.0, min(requested, self.config.max_command_timeout_s))
        payload: dict[str, Any]
        if name == "view":
            payload = {k: args.get(k) for k in ("start_line", "end_line")}
            payload |= {"path": str(args["path"]), "max_chars": self.config.max_result_chars}
            program = VIEW_PROGRAM
        else:  # edit
            payload = {"path": str(args["path"]), "old_str": str(args["old_str"]), "new_str": str(args["new_str"])}
            program = EDIT_PROGRAM
        encoded = json.dumps(payload)
        if len(encoded) > 100_000:
            raise ValueError("the edit is too large for one call; write the file in parts or with bash")
        return [self.executor.python, "-I", "-S", "-c", program, encoded], default


class SandboxHarness(Harness[SandboxHarnessConfig]):
    """In-process agent loop (bash / view / edit / submit) with every tool call confined to a sandbox."""

    APPENDS_SYSTEM_PROMPT = True
    NEEDS_CONTAINER = False  # it confines the subprocess runtime itself
    EXECUTES_CODE = True

    def __init__(self, config: SandboxHarnessConfig) -> None:
        super().__init__(config)
        unknown = sorted(set(config.tools) - set(TOOL_NAMES))
        if unknown:
            raise ValueError(f"harness.tools: unknown tool(s) {unknown}; choose from {list(TOOL_NAMES)}")
        self._sandbox: Sandbox | None = None

    def sandbox(self) -> Sandbox:
        """The local box (probed once; raises SandboxUnavailable with how to fix it)."""
        if self._sandbox is None:
            self._sandbox = Sandbox(self.config)
        return self._sandbox

    async def setup(self, runtime: Runtime) -> None:
        if local_workdir(runtime) is not None:
            self.sandbox()  # fail before the rollout starts when the box cannot isolate here

    def executor(self, runtime: Runtime, data: TaskData) -> Executor:
        env = {**runtime.process_env({}), **self.config.resolved_env}
        workdir = local_workdir(runtime)
        if workdir is None:
            return RuntimeExecutor(runtime, env=env, output_bytes=self.config.limits.output_bytes)
        ro = [Path(p) for p in [*self.config.ro_binds, *(getattr(data, "sandbox_ro_binds", None) or [])]]
        protected = [Path(p) for p in [*self.config.protected, *(getattr(data, "sandbox_protected", None) or [])]]
        return SandboxExecutor(
            self.sandbox(),
            workdir,
            limits=self.config.limits,
            ro_binds=ro,
            protected=[p for p in protected if (workdir / p).exists()],
            env=env,
        )

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
        messages: list[dict] = []
        system_text = "\n\n".join(p for p in (self.config.system_prompt, system) if p)
        if system_text:
            messages.append({"role": "system", "content": system_text})
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt is not None:
            messages.extend(message_to_wire(m) for m in prompt)
        tools = [TOOL_SCHEMAS[name] for name in self.config.tools]
        rollout = _Rollout(self.executor(runtime, data), self.config)
        client = openai.AsyncOpenAI(
            base_url=endpoint, api_key=secret, max_retries=2, timeout=self.config.request_timeout_s
        )
        turns = 0
        try:
            while turns < self.config.max_turns:
                turns += 1
                try:
                    message = await _complete(client, ctx.model, messages, tools)
                except openai.APIStatusError:
                    if trace.stop_condition is not None:  # a @vf.stop / max_turns refused the next turn
                        break
                    raise
                messages.append(message)
                calls = message.get("tool_calls") or []
                if not calls:
                    break
                for call in calls:
                    content = await rollout.call(call["function"]["name"], call["function"]["arguments"])
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
                if rollout.submitted or rollout.exhausted:
                    break
        finally:
            await client.close()
        summary = f"turns={turns} submitted={rollout.submitted} command_seconds={rollout.spent_s:.1f}"
        return ProgramResult(exit_code=0, stdout=summary, stderr="")


async def _complete(client: openai.AsyncOpenAI, model: str, messages: list[dict], tools: list[dict]) -> dict:
    """One chat completion as a wire-format assistant message. Not streamed: verifiers' TrainClient (the renderer
    client prime-rl rolls out through) refuses streaming requests."""
    kwargs: dict[str, Any] = {"model": model, "messages": messages}
    if tools:
        kwargs["tools"] = tools
    completion = await client.chat.completions.create(**kwargs)
    if not completion.choices:
        raise openai.APIConnectionError(message="model response has no choices", request=None)  # type: ignore[arg-type]  # openai's error wants an httpx.Request; there is none for a reply without choices
    reply = completion.choices[0].message
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id or f"call_{index}",
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments or ""},
            }
            for index, call in enumerate(reply.tool_calls)
            if call.type == "function"
        ]
    if message["content"] is None and not message.get("tool_calls"):
        message["content"] = ""
    return message
