"""Optional LLM-written hints: a teacher model turns the detected error sites into one short piece of advice.

The writer talks to any OpenAI-compatible endpoint described by a teacher entry of ``configs/teachers.toml``
(``crf_prime.teachers.TeacherConfig``: model, base_url, api_key_var, timeout_s, max_attempts, sampling), so the
same pool that replays traces can write hints. Only episodes with at least one error site are sent; a clean episode
keeps the empty hint without a call. When the call fails the templated hint is kept and the failure is recorded in
``trace.info["hint_error"]`` (``trace.info["hint_source"]`` says which hint was stored): a hint is training
context, not a score, so a flaky writer must not fail the rollout, but it must not hide either.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crf_prime.hints.attach import HINT_KEY, SITES_KEY, build_hint, sites_record
from crf_prime.hints.detect import condense, episode_messages
from crf_prime.hints.models import FailingTest
from crf_prime.hints.templates import MAX_CHARS

if TYPE_CHECKING:
    from crf_prime.teachers import TeacherConfig

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You coach a coding agent. Given the task, the end of its attempt and the errors found in it, write at most "
    "three short imperative sentences telling the agent what to do differently. Name concrete tools, files, tests "
    "or commands. Do not solve the task, do not mention graders or hidden tests, no preamble."
)


class LLMHintWriter:
    """Writes a hint with one chat completion against a teacher endpoint."""

    def __init__(self, teacher: TeacherConfig, *, api_key: str | None = None, transcript_chars: int = 4000) -> None:
        import openai

        self.teacher = teacher
        self.transcript_chars = transcript_chars
        self._client = openai.AsyncOpenAI(
            base_url=teacher.base_url,
            api_key=api_key if api_key is not None else teacher.api_key(),
            timeout=teacher.timeout_s,
            max_retries=teacher.max_attempts - 1,
        )

    @classmethod
    def from_teachers_toml(cls, path: str | Path, name: str, **kwargs: Any) -> LLMHintWriter:
        """The writer for teacher ``name`` of a ``teachers.toml`` (crf_prime.teachers, imported lazily)."""
        from crf_prime.teachers import ConfigError, load_pool_config

        pool = load_pool_config(path)
        for teacher in pool.teachers:
            if teacher.name == name:
                return cls(teacher, **kwargs)
        raise ConfigError(f"{path}: no [[teachers]] entry named {name!r} (have {[t.name for t in pool.teachers]})")

    def prompt(self, trace: Any, evidence: str) -> list[dict[str, str]]:
        messages = episode_messages(trace)
        task = next((m.text for m in messages if m.role == "user"), "")
        tail: list[str] = []
        budget = self.transcript_chars
        for m in reversed(messages[1:]):
            calls = " ".join(f"{name}({args})" for _, name, args in m.tool_calls)
            line = f"[{m.role}] {condense(' '.join(filter(None, [m.text, calls])), 600)}"
            if len(line) > budget:
                break
            tail.append(line)
            budget -= len(line)
        user = (
            f"TASK:\n{condense(task, 1500)}\n\nEND OF THE ATTEMPT:\n"
            + "\n".join(reversed(tail))
            + f"\n\nERRORS FOUND:\n{evidence}"
        )
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]

    async def write(self, trace: Any, evidence: str) -> str:
        s = self.teacher.sampling
        kwargs: dict[str, Any] = {"temperature": s.temperature, "max_tokens": min(s.max_tokens, 512)}
        if s.top_p is not None:
            kwargs["top_p"] = s.top_p
        if s.extra_body:
            kwargs["extra_body"] = dict(s.extra_body)
        response = await self._client.chat.completions.create(
            model=self.teacher.model, messages=self.prompt(trace, evidence), **kwargs
        )
        if not response.choices or not (text := (response.choices[0].message.content or "").strip()):
            raise ValueError(f"teacher {self.teacher.name!r} returned no hint text")
        return text

    async def close(self) -> None:
        await self._client.close()


async def attach_hint_async(
    trace: Any,
    *,
    failing_tests: Sequence[FailingTest] = (),
    tools: Sequence[str] | None = None,
    writer: LLMHintWriter | None = None,
    max_chars: int = MAX_CHARS,
) -> str:
    """``attach_hint`` with an optional LLM writer; without one it stores exactly the templated hint."""
    hint, sites = build_hint(trace, failing_tests=failing_tests, tools=tools, max_chars=max_chars)
    info = trace["info"] if isinstance(trace, dict) else trace.info
    source = "template"
    if writer is not None and sites:
        try:
            written = await writer.write(trace, hint)
        except Exception as e:  # the templated hint stays; the failure is recorded on the trace
            info["hint_error"] = f"{type(e).__name__}: {e}"
            log.warning("LLM hint writer %s failed, keeping the templated hint: %s", writer.teacher.name, e)
        else:
            hint, source = condense_lines(written, max_chars), "llm"
    info[HINT_KEY] = hint
    info["hint_source"] = source
    info[SITES_KEY] = sites_record(sites)
    return hint


def condense_lines(text: str, max_chars: int) -> str:
    """Strip blank lines and cap the length (the hint is prepended to every scored branch)."""
    out = "\n".join(ln.rstrip() for ln in text.strip().splitlines() if ln.strip())
    return out if len(out) <= max_chars else out[: max_chars - 1].rstrip() + "…"
