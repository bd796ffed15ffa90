"""A replay journal over the Claude Code fixture's states, written with the teachers team's Journal writer."""

from __future__ import annotations

import json
from pathlib import Path

from crf_prime.records import TraceState
from crf_prime.records.journal import JournalRecord
from crf_prime.records.models import Action, ToolCall
from crf_prime.teachers.journal import Journal
from crf_prime.traces import ingest

FIX = Path(__file__).parent / "fixtures"
TEACHERS = {
    "gpt": ("gpt-5", "openai"),
    "qwen": ("qwen3-coder", "qwen"),
    "gemini": ("gemini-2.5-pro", "google"),
    "claude": ("claude-opus-4", "anthropic"),
}


def act(name: str, args: dict, text: str = "") -> Action:
    return Action(text=text, tool_calls=(ToolCall(id="t", name=name, arguments=json.dumps(args)),))


def record(state_id: str, teacher: str, action: Action | None, ok: bool = True) -> JournalRecord:
    model, fam = TEACHERS[teacher]
    return JournalRecord(
        state_id=state_id, teacher=teacher, model=model, model_family=fam, ok=ok, action=action,
        error="" if ok else "HTTP 500", input_tokens=100, output_tokens=10, cost_usd=0.001, latency_s=0.1, attempt=1, ts=1.0,
    )  # fmt: skip


def fixture_states() -> list[TraceState]:
    return list(ingest([FIX / "claude_code_session.jsonl"]))


def write_replay_inputs(tmp: Path) -> tuple[Path, Path, list[TraceState]]:
    """states.jsonl + journal.jsonl: consensus at states 0, 1 and 4; none at 2 (one voter) and 3 (three-way split)."""
    states = fixture_states()
    s = [x.state_id for x in states]
    states_path = tmp / "states.jsonl"
    states_path.write_text("".join(x.model_dump_json() + "\n" for x in states))
    journal_path = tmp / "journal.jsonl"
    j = Journal(journal_path)
    for r in [
        record(
            s[0], "gpt", act("str_replace_editor", {"command": "view", "path": "/home/dev/proj/tests/test_parse.py"})
        ),
        record(s[0], "qwen", act("bash", {"command": "cat /home/dev/proj/tests/test_parse.py"})),
        record(s[0], "gemini", act("bash", {"command": "ls -R"})),
        record(s[0], "claude", act("bash", {"command": "ls -R"})),
        record(s[1], "gpt", act("execute_bash", {"command": "python -m pytest tests/test_parse.py -q"})),
        record(s[1], "qwen", act("bash", {"command": "cd /home/dev/proj && pytest tests/test_parse.py -q"})),
        record(s[1], "gemini", states[1].student_action),
        record(s[2], "gpt", None, ok=False),
        record(s[2], "qwen", act("Edit", {"file_path": "/home/dev/proj/proj/parse.py", "old_string": "x"})),
        record(s[3], "gpt", act("bash", {"command": "pytest -q"})),
        record(s[3], "qwen", act("bash", {"command": "tox"})),
        record(s[3], "gemini", act("bash", {"command": "make test"})),
        record(s[4], "gpt", Action(text="All 12 tests pass; the empty-input bug is fixed.")),
        record(s[4], "qwen", Action(text="all 12 tests pass;  the empty-input bug is fixed.")),
    ]:
        j.append(r)
    j.close()
    return states_path, journal_path, states
