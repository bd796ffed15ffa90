"""Shared builders for the teacher-pool tests: trace states, teacher configs, a per-model loopback script."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crf_prime.loopback import LoopbackOpenAI, Reply
from crf_prime.records.models import Action, Source, ToolCall, TraceState
from crf_prime.teachers.config import PoolConfig, TeacherConfig
from crf_prime.teachers.ledger import Ledger
from crf_prime.teachers.pool import TeacherPool

TOOLS = (
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "run a shell command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    },
)


def bash(cmd: str) -> Action:
    return Action(tool_calls=(ToolCall(id="c1", name="bash", arguments=json.dumps({"command": cmd})),))


def make_state(i: int, *, trace: str = "t0", family: str = "", student: str = "ls") -> TraceState:
    return TraceState(
        state_id=f"s{i:04d}",
        messages=(
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": f"state s{i:04d}: fix the bug"},
            {"role": "assistant", "content": "", "reasoning_content": "secret thoughts"},
        ),
        tools=TOOLS,
        student_action=bash(student),
        source=Source(format="swe-gym", file="traces.jsonl", line=i + 1, trace_id=trace),
        source_model="claude-x" if family == "anthropic" else "",
        model_family=family,
        step=i,
    )


def write_states(path: Path, states: list[TraceState]) -> Path:
    path.write_text("".join(s.model_dump_json() + "\n" for s in states))
    return path


def write_teachers_toml(path: Path, base_url: str, names: tuple[str, ...], max_concurrency: int | None = None) -> Path:
    """A teachers TOML for the CLI: teacher ``n`` asks ``model-n`` at ``base_url`` with the key in ``CRF_TEST_KEY``."""
    cap = f"max_concurrency = {max_concurrency}\n" if max_concurrency is not None else ""
    path.write_text(
        "".join(
            f'[[teachers]]\nname = "{n}"\nmodel = "model-{n}"\nbase_url = "{base_url}"\napi_key_var = "CRF_TEST_KEY"\n{cap}'
            for n in names
        )
    )
    return path


def replay_argv(toml: Path, states: Path, out: Path, *extra: str) -> list[str]:
    """``crf-prime teachers replay @ TOML --states STATES --out OUT EXTRA...``, as ``crf_prime.cli.main`` takes it."""
    return ["teachers", "replay", "@", str(toml), "--states", str(states), "--out", str(out), *extra]


def state_of(body: dict) -> str:
    for m in body.get("messages", []):
        found = re.search(r"state (s\d+)", str(m.get("content") or ""))
        if found:
            return found.group(1)
    raise AssertionError(f"no state id in request {body}")


def teacher(name: str, base_url: str, **kw) -> TeacherConfig:
    kw.setdefault("model", f"model-{name}")
    kw.setdefault("api_key_var", "")
    kw.setdefault("max_attempts", 3)
    kw.setdefault("timeout_s", 10.0)
    return TeacherConfig(name=name, base_url=base_url, **kw)


def pool_config(teachers: list[TeacherConfig], **kw) -> PoolConfig:
    budget = kw.pop("budget", {})
    votes = {k: kw.pop(k) for k in ("exclude_same_family", "tier") if k in kw}
    return PoolConfig(teachers=tuple(teachers), budget=budget, pool={**kw, "votes": votes})


class Router:
    """A loopback script: per request, call ``reply(model, state_id, n)`` where n counts that (model, state) pair."""

    def __init__(self, reply: Callable[[str, str, int], Reply]) -> None:
        self.reply = reply
        self.calls: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def __call__(self, body: dict) -> Reply:
        key = (body["model"], state_of(body))
        with self._lock:
            self.calls[key] += 1
            n = self.calls[key]
        return self.reply(key[0], key[1], n)

    def duplicates(self) -> dict[tuple[str, str], int]:
        return {k: v for k, v in self.calls.items() if v > 1}


def answer(cmd: str = "ls", **kw) -> Reply:
    return Reply(tool_calls=[{"name": "bash", "arguments": json.dumps({"command": cmd})}], **kw)


class CountingLedger(Ledger):
    """A ledger that records how many admitted calls were unsettled at once."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.open = self.peak = 0

    async def admit(self, ask, *, sent=False):
        adm = await super().admit(ask, sent=sent)
        if adm.verdict == "send":
            self.open += 1
            self.peak = max(self.peak, self.open)
        return adm

    async def commit(self, ask, record):
        self.open -= 1
        return await super().commit(ask, record)


def peak_overlap(spans: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    peak = n = 0
    for _, step in events:
        n += step
        peak = max(peak, n)
    return peak


async def queued_run(
    make_backend: Callable[[tuple[TeacherConfig, ...]], Any], journal: Path, queue: int | None, delay: float
) -> tuple[list[str], int, int | None]:
    """8 states through one teacher with 2 slots and ``queue``: (states answered, calls admitted at once at most,
    requests at the server at once at most)."""
    spans: list[tuple[float, float]] = []  # per request: arrival at the server, plus its scripted latency

    def reply(model, sid, n):
        t = time.monotonic()
        spans.append((t, t + delay))  # the answer leaves after this, the client's next request only after that
        return answer(delay_s=delay)

    with LoopbackOpenAI(Router(reply)) as server:
        opts = {} if queue is None else {"queue": queue}
        cfg = pool_config([teacher("a", server.base_url, max_concurrency=2)], **opts)
        backend = make_backend(cfg.teachers)
        ledger = CountingLedger(journal, cfg.budget)
        pool = TeacherPool(cfg, backend, ledger)
        outcomes = await pool.replay([make_state(i) for i in range(8)])
        await backend.close()
        ledger.close()
    answered = sorted(o.state_id for o in outcomes if o.records[0].ok)
    return answered, ledger.peak, peak_overlap(spans) if len(spans) == 8 else None
