"""What a teacher call is and what it may cost, decided before it is sent.

A *question* is the content of a request -- teacher model, messages, tools and sampling parameters -- hashed over
canonical JSON: two states (or two runs, or two processes) that would send the same bytes to the same model ask the
same question, and it is paid for once. Its *reservation* is the most the call can cost at the teacher's prices:
every prompt token is at least one byte of the serialised request (byte-level BPE and byte-fallback tokenizers
never merge less than a byte), plus the chat template's own tokens (``reserve_prompt_overhead_tokens``), and at most
``max_tokens`` are generated. The ledger sends a call only when its reservation fits under every cap, so a cap is
never crossed as long as the teacher's price table is not below the provider's bill.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from crf_prime.teachers.config import TeacherConfig

_NOT_CONTENT = ("stream", "stream_options")
"""Request fields that change how the answer travels, not what it is."""


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8: the same content always gives the same bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class Content:
    """The state-side part of a question (messages + tools), serialised once per state and shared by its teachers."""

    digest: str
    """sha256 of the canonical JSON of ``{"messages": ..., "tools": ...}``."""
    size: int
    """Bytes of that JSON: the upper bound on its prompt tokens."""

    @classmethod
    def of(cls, messages: Any, tools: Any) -> Content:
        data = canonical_json({"messages": messages, "tools": tools})
        return cls(digest=hashlib.sha256(data).hexdigest(), size=len(data))


@dataclass(frozen=True)
class Ask:
    """A call the pool wants to send, as the ledger sees it: who asks, which question, what it may cost."""

    state_id: str
    teacher: str
    question: str
    """Content hash of the request (:func:`question_key`)."""
    reserve_usd: float
    """Worst-case cost (:func:`worst_case_usd`)."""
    trace_id: str = ""
    idempotent: bool = False
    """The call's requests carry an idempotency key (the teacher's ``idempotency_header``, on a backend that sends
    it): repeating them cannot be charged twice."""


def params_json(teacher_params: dict[str, Any]) -> bytes:
    """Canonical JSON of a teacher's request fields other than messages and tools (how it streams left out)."""
    return canonical_json({k: v for k, v in teacher_params.items() if k not in _NOT_CONTENT})


def question_key(params: bytes, content: Content) -> str:
    """Hash of (model, sampling, tool choice, messages, tools): every request field except how it is streamed."""
    return hashlib.sha256(params + b"\0" + content.digest.encode()).hexdigest()


def worst_case_usd(config: TeacherConfig, params: bytes, content: Content) -> float:
    """Most this request can cost at the teacher's prices (see the module docstring)."""
    prompt = content.size + len(params) + config.reserve_prompt_overhead_tokens
    return config.price_cost(prompt, config.sampling.max_tokens)


def plan(config: TeacherConfig, params: bytes, content: Content) -> tuple[str, float]:
    """(question, reservation) of one teacher's request; ``params`` from :func:`params_json`."""
    return question_key(params, content), worst_case_usd(config, params, content)
