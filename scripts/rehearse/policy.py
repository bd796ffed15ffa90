"""The rehearsal's scripted policy: what the stand-in inference server "samples" for a rendered prompt.

It reads the conversation back from the prompt text (ChatML as the qwen3 renderer writes it) and answers like an agent
that sometimes solves the task and sometimes errs. Feature Deletion episodes follow one plan each, picked at the first
turn and read back from the history at later turns:

- ``solve``: edit the deleted function back from the gold patch, then submit (reward 1);
- ``traceback``: run a command that raises (error site: traceback), then solve (reward 1);
- ``wrong``: write a wrong body (error turn), run the tests (failing command), submit (failing tests, reward 0);
- ``unknown_tool``: call a tool that does not exist (error turn; the renderer drops the call, the episode ends);
- ``bad_json``: a tool call whose arguments are not JSON (error turn; dropped, the episode ends).

SWE-bench-lite episodes (the mini fixture) follow one plan each too: ``solve`` (the gold patch's hunks as edit calls,
then submit: resolved), ``test_then_solve`` (run the tests first: a failing command, then solve), ``give_up`` (submit
the untouched repo: unresolved).

Trace-replay episodes answer with one teacher's recorded action for the state (every third answer at a state: an unrelated
command), so the replay reward (share of agreeing teachers) varies within a group. Every completion is logged with
whether it is an error turn, so the trainer stand-in can measure where the distillation signal lands (issue 12).
"""

from __future__ import annotations

import ast
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

PLANS = ("solve", "traceback", "wrong", "unknown_tool", "bad_json")
PLAN_WEIGHTS = (0.35, 0.15, 0.2, 0.15, 0.15)
MISSING_MODULE = "crf_rehearsal_missing_module"
WRONG_MARK = "return None  # draft"

_MESSAGE = re.compile(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", re.S)


@dataclass(frozen=True)
class Turn:
    """One scripted completion: its text (tool calls in Qwen's ``<tool_call>`` form) and what it is."""

    text: str
    plan: str
    error: str | None
    """Error-site kind this turn produces (None: not an error turn)."""


def messages_of(prompt_text: str) -> list[tuple[str, str]]:
    """(role, content) of every ChatML message in a rendered prompt."""
    return [(m.group(1), m.group(2)) for m in _MESSAGE.finditer(prompt_text)]


def chatml(messages: list[dict]) -> str:
    """OpenAI chat messages as the ChatML text the scripted policy reads (tool calls in Qwen's ``<tool_call>`` form,
    as the qwen3 renderer writes them): what prime-rl's eval client sends, with no renderer, on /v1/chat/completions."""
    parts = []
    for m in messages:
        content = m.get("content") or ""
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        calls = [tool_call(c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls") or []]
        parts.append(f"<|im_start|>{m['role']}\n" + "\n".join([content, *calls]).strip() + "<|im_end|>")
    return "\n".join(parts)


_CALL = re.compile(r'<tool_call>\n\{"name": "([^"]*)", "arguments": (.*?)\}\n</tool_call>', re.S)


def split_tool_calls(text: str) -> tuple[str, list[tuple[str, str]]]:
    """A scripted turn as chat-completions fields: the text outside the tool calls, and each call's (name, raw
    arguments); the arguments are passed on as written, broken JSON included."""
    return _CALL.sub("", text).strip(), [(m.group(1), m.group(2)) for m in _CALL.finditer(text)]


def tool_call(name: str, arguments: dict | str) -> str:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def _function_segment(text: str, qualname: str) -> str:
    """Source lines of the function ``qualname`` (def line through its last line) in ``text``."""
    tree = ast.parse(text)
    parts = qualname.split(".")
    body = tree.body
    node = None
    for part in parts:
        node = next(
            n for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n.name == part
        )
        body = node.body
    assert node is not None and node.end_lineno is not None
    lines = text.splitlines(keepends=True)
    return "".join(lines[node.lineno - 1 : node.end_lineno])


class FeatdelScript:
    """Plans over the generated Feature Deletion tasks (``tasks.jsonl`` rows)."""

    def __init__(self, tasks_jsonl: Path) -> None:
        from crf_prime.featdel.deletion import apply_unified_diff
        from crf_prime.featdel.models import FeatdelTask

        self.rows = [FeatdelTask.model_validate_json(line) for line in tasks_jsonl.read_text().splitlines() if line]
        self.gold = {row.task_id: apply_unified_diff(row.broken_files, row.gold_patch) for row in self.rows}

    def row_for(self, text: str):
        return next((r for r in self.rows if r.prompt.strip() and r.prompt.strip()[:200] in text), None)

    def edits(self, row, *, wrong: bool) -> list[str]:
        calls = []
        for target in row.targets:
            broken = row.broken_files[target.path]
            old = _function_segment(broken, target.qualname)
            if wrong:
                new = old.replace("raise NotImplementedError", WRONG_MARK, 1)
            else:
                new = _function_segment(self.gold[row.task_id][target.path], target.qualname)
            calls.append(tool_call("edit", {"path": target.path, "old_str": old, "new_str": new}))
        return calls

    def next_turn(self, row, history: list[tuple[str, str]], rng: random.Random) -> Turn:
        said = [content for role, content in history if role == "assistant"]
        if not said:
            plan = rng.choices(PLANS, PLAN_WEIGHTS)[0]
            if plan == "solve":
                return Turn("I will restore the function.\n" + "\n".join(self.edits(row, wrong=False)), plan, None)
            if plan == "wrong":
                return Turn("A first draft.\n" + "\n".join(self.edits(row, wrong=True)), plan, "wrong_impl")
            if plan == "traceback":
                cmd = {"command": f"python3 -c 'import {MISSING_MODULE}'"}
                return Turn("Let me check the environment.\n" + tool_call("bash", cmd), plan, "traceback")
            if plan == "unknown_tool":
                return Turn(
                    tool_call("write_file", {"path": row.targets[0].path, "text": "pass"}), plan, "unknown_tool"
                )
            return Turn(tool_call("edit", '{"path": "' + row.targets[0].path + '", "old_str": '), plan, "bad_json")
        first = said[0]
        if MISSING_MODULE in first:
            plan = "traceback"
            if len(said) == 1:
                return Turn("Now the fix.\n" + "\n".join(self.edits(row, wrong=False)), plan, None)
        elif WRONG_MARK in first:
            plan = "wrong"
            if len(said) == 1:
                return Turn(tool_call("bash", {"command": "python3 -m pytest -q -x"}), plan, "failing_command")
        else:
            plan = "solve"
        return Turn(tool_call("submit", {"summary": "done"}), plan, None)


SWE_PLANS = ("solve", "test_then_solve", "give_up")
SWE_PLAN_WEIGHTS = (0.4, 0.3, 0.3)
SWE_TEST_COMMAND = "python -m pytest -q -p no:cacheprovider"


def hunk_edits(patch: str) -> list[tuple[str, str, str]]:
    """(path, old text, new text) of every hunk of a unified diff: what an ``edit`` call must replace to apply it."""
    edits: list[tuple[str, str, str]] = []
    path, old, new = "", [], []

    def flush() -> None:
        if old or new:
            edits.append((path, "\n".join(old), "\n".join(new)))
        old.clear()
        new.clear()

    for line in patch.splitlines():
        if line.startswith("+++ "):
            flush()
            path = line[4:].removeprefix("b/")
        elif line.startswith(("--- ", "diff ", "index ", "@@")):
            flush()
        elif line.startswith((" ", "-", "+")) and path:
            if line[0] != "+":
                old.append(line[1:])
            if line[0] != "-":
                new.append(line[1:])
    flush()
    return edits


class SweScript:
    """Plans over SWE-bench rows (``instances.jsonl``, e.g. the mini fixture): the gold patch as edit calls, or not."""

    def __init__(self, instances_jsonl: Path) -> None:
        self.rows = [json.loads(line) for line in instances_jsonl.read_text().splitlines() if line]

    def row_for(self, text: str) -> dict | None:
        return next((r for r in self.rows if r["problem_statement"].strip()[:200] in text), None)

    def next_turn(self, row: dict, history: list[tuple[str, str]], rng: random.Random) -> Turn:
        said = [content for role, content in history if role == "assistant"]
        solve = "\n".join(
            tool_call("edit", {"path": p, "old_str": o, "new_str": n}) for p, o, n in hunk_edits(row["patch"])
        )
        if not said:
            plan = rng.choices(SWE_PLANS, SWE_PLAN_WEIGHTS)[0]
            if plan == "solve":
                return Turn("I will fix it.\n" + solve, plan, None)
            if plan == "test_then_solve":
                return Turn("First the tests.\n" + tool_call("bash", {"command": SWE_TEST_COMMAND}), plan, None)
            return Turn(tool_call("submit", {"summary": "nothing to change"}), plan, None)
        if SWE_TEST_COMMAND in said[0] and len(said) == 1:
            return Turn("Now the fix.\n" + solve, "test_then_solve", None)
        return Turn(tool_call("submit", {"summary": "done"}), "swe_submit", None)


UNRELATED = "echo unrelated"
"""The replay policy's off-teacher command (and the live arms' loopback teachers' answer)."""


class ReplayScript:
    """Answers a replayed state with one recorded teacher action (or an unrelated command)."""

    def __init__(self, states_jsonl: Path, journal_jsonl: Path) -> None:
        self.states = [json.loads(line) for line in states_jsonl.read_text().splitlines() if line]
        self.actions: dict[str, list[dict]] = {}
        self.asked: dict[str, int] = {}
        for line in journal_jsonl.read_text().splitlines():
            rec = json.loads(line) if line else None
            if rec and rec.get("ok") and rec.get("action"):
                self.actions.setdefault(rec["state_id"], []).append(rec["action"])

    def state_for(self, history: list[tuple[str, str]]) -> dict | None:
        best, best_len = None, 0
        text = "\n".join(content for _, content in history)
        for state in self.states:
            last = next((m for m in reversed(state["messages"]) if isinstance(m.get("content"), str)), None)
            key = (last or {}).get("content") or ""
            if key and key[:300] in text and len(key) > best_len:
                best, best_len = state, len(key)
        return best

    def next_turn(self, state: dict, rng: random.Random) -> Turn:
        actions = self.actions.get(state["state_id"], [])
        # every third answer at a state is the unrelated command, so a group of rollouts at one state always holds
        # both kinds of answer, whatever the teachers say (live arms: the loopback teachers all say exactly that)
        self.asked[state["state_id"]] = turn = self.asked.get(state["state_id"], 0) + 1
        if not actions or turn % 3 == 0:
            return Turn(tool_call("bash", {"command": UNRELATED}), "replay_other", None)
        action = rng.choice(actions)
        parts = [action.get("text") or ""]
        parts += [tool_call(c["name"], c["arguments"] or "{}") for c in action.get("tool_calls") or []]
        return Turn("\n".join(p for p in parts if p) or "ok", "replay_teacher", None)
