"""Episodes with planted error sites, as real verifiers v1 traces carrying tokens, for the detector's precision and
recall per kind (tests/hints/test_hints_planted.py, benchmarks/hint_detector.py).

Each episode says which error kinds it holds and which assistant turns produced them; negatives (clean episodes and
near misses) hold none. Tool results are worded as crf-prime's sandbox harness, verifiers' harness loop, shells,
pytest and CPython print them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import verifiers.v1 as vf
from verifiers.v1.configs.agent import AgentConfig
from verifiers.v1.trace import AgentInfo, TraceTask
from verifiers.v1.types import AssistantMessage, Tool, ToolCall, ToolMessage, UserMessage

from crf_prime.hints import FailingTest, analyse, build_hint, error_turns

BASH = Tool(
    name="bash",
    description="Run a shell command",  # required at the verifiers commit prime-rl pins
    parameters={
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
        "additionalProperties": False,
    },
)
EDIT = Tool(
    name="edit",
    description="Replace text in a file",
    parameters={
        "type": "object",
        "properties": {"path": {"type": "string"}, "old_str": {"type": "string"}, "new_str": {"type": "string"}},
        "required": ["path", "old_str", "new_str"],
    },
)
SUBMIT = Tool(name="submit", description="Submit the work", parameters={"type": "object", "properties": {}})
TOOLS = (BASH, EDIT, SUBMIT)
SCAFFOLD = 2
"""Generation-prompt tokens leading each assistant node (not sampled)."""
KINDS = ("unknown_tool", "invalid_json", "schema_violation", "tool_error", "traceback", "failing_test")
"""The planted kinds, in the order the table prints them."""

TB = (
    "Traceback (most recent call last):\n"
    '  File "/w/app.py", line 7, in <module>\n'
    "    main()\n"
    '  File "/usr/lib/python3.12/json/__init__.py", line 346, in loads\n'
    "    return _default_decoder.decode(s)\n"
    "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)\n"
)
EDIT_ARGS = '{"path": "a.py", "old_str": "raise NotImplementedError", "new_str": "return x + 1"}'
LS = ("bash", '{"command": "ls"}', "a.py\ntests/\nexit code: 0")
SUBMITTED = ("submit", "{}", "submitted")


class Builder:
    """A trace built turn by turn, each node with token ids, the trainable mask and logprobs as verifiers lays them
    out (``graph._commit_turn``): input nodes all False, assistant nodes scaffold False + completion True."""

    def __init__(self, tools: tuple[Tool, ...] = TOOLS) -> None:
        self.trace = vf.Trace(
            task=TraceTask(type="T", data=vf.TaskData(prompt="fix it")), agent=AgentInfo(config=AgentConfig())
        )
        self.trace.tools = list(tools)
        self.next_token = 100
        self._add(UserMessage(content="fix it"), 4)

    def _tokens(self, n: int) -> list[int]:
        self.next_token += n
        return list(range(self.next_token - n, self.next_token))

    def _add(self, message, n: int, sampled: int = 0) -> int:
        parent = len(self.trace.nodes) - 1 if self.trace.nodes else None
        node = vf.MessageNode(
            parent=parent,
            message=message,
            sampled=bool(sampled),
            token_ids=self._tokens(n + sampled),
            mask=[False] * n + [True] * sampled,
            logprobs=[-0.01 * (self.next_token - k) for k in range(sampled)],
        )
        self.trace.nodes.append(node)
        return len(self.trace.nodes) - 1

    def turn(self, calls: list[tuple[str, str, str]], completion: int = 5, content: str | None = None) -> int:
        """An assistant turn with ``(name, arguments, result)`` calls; returns its node index."""
        ids = [f"call_{k}" for k in range(len(calls))]  # per turn, as verifiers' renderer client numbers them
        msg = AssistantMessage(
            content=content,
            tool_calls=[ToolCall(id=i, name=n, arguments=a) for i, (n, a, _) in zip(ids, calls, strict=True)] or None,
        )
        index = self._add(msg, SCAFFOLD, completion)
        for i, (name, _, result) in zip(ids, calls, strict=True):
            self._add(ToolMessage(tool_call_id=i, content=result, name=name), 3)
        return index


@dataclass
class Planted:
    """One episode and what was planted in it: kind -> the assistant turns (node indices) that produced it."""

    name: str
    trace: vf.Trace
    kinds: dict[str, set[int]]
    failing_tests: list[FailingTest] = field(default_factory=list)


def _episode(name: str, build: Callable[[Builder], dict[str, set[int]]], **kw) -> Planted:
    tools = kw.pop("tools", TOOLS)
    failing = kw.pop("failing_tests", [])
    b = Builder(tools)
    kinds = build(b)
    return Planted(name, b.trace, kinds, failing)


def corpus() -> list[Planted]:
    """Three or more episodes per kind, then the negatives."""
    out: list[Planted] = []
    add = out.append
    fail = [FailingTest(name="tests/test_a.py::test_inc", message="E       assert None == 2")]

    # unknown tool: declared tool set, result text only, and a dotted name
    add(_episode("unknown-declared", lambda b: {"unknown_tool": {b.turn([("grep", '{"pattern": "x"}', "ok")])}}))
    add(
        _episode(
            "unknown-result-text",
            lambda b: {"unknown_tool": {b.turn([("write_file", "{}", "error: unknown tool 'write_file'")])}},
            tools=(),
        )
    )
    add(_episode("unknown-dotted", lambda b: (b.turn([LS]), {"unknown_tool": {b.turn([("fs.read", "{}", "")])}})[1]))

    # invalid JSON: truncated arguments, a non-object, the harness's own message, a call the client dropped
    add(
        _episode(
            "json-truncated",
            lambda b: {
                "invalid_json": {b.turn([("bash", '{"command": "ls"', "error: invalid JSON in tool arguments")])}
            },
        )
    )
    add(_episode("json-list", lambda b: {"invalid_json": {b.turn([("bash", '["ls"]', "error")])}}))
    add(_episode("json-dropped", lambda b: (b.turn([LS]), {"invalid_json": {b.turn([], completion=12)}})[1]))

    # schema violations: a missing required field, a wrong type, an extra property
    add(
        _episode(
            "schema-missing",
            lambda b: {"schema_violation": {b.turn([("edit", '{"path": "a.py", "old_str": "x"}', "edited a.py")])}},
        )
    )
    add(
        _episode(
            "schema-type",
            lambda b: {"schema_violation": {b.turn([("bash", '{"command": 3}', "a.py\nexit code: 0")])}},
        )
    )
    add(
        _episode(
            "schema-extra",
            lambda b: {"schema_violation": {b.turn([("bash", '{"command": "ls", "cwd": "/"}', "a.py")])}},
        )
    )

    # failing commands: a non-zero exit, an edit the harness refused, git's fatal
    add(
        _episode(
            "cmd-exit",
            lambda b: (
                b.turn([LS]),
                {"tool_error": {b.turn([("bash", '{"command": "make"}', "make: *** No rule\nexit code: 2")])}},
            )[1],
        )
    )
    add(
        _episode(
            "cmd-edit-refused",
            lambda b: {"tool_error": {b.turn([("edit", EDIT_ARGS, "error: old_str not found in a.py")])}},
        )
    )
    add(
        _episode(
            "cmd-fatal",
            lambda b: {"tool_error": {b.turn([("bash", '{"command": "git log"}', "fatal: not a git repository")])}},
        )
    )

    # tracebacks: with an exit code, without one, in a second call of a turn
    add(
        _episode(
            "tb-exit",
            lambda b: {"traceback": {b.turn([("bash", '{"command": "python app.py"}', TB + "exit code: 1")])}},
        )
    )
    add(_episode("tb-bare", lambda b: {"traceback": {b.turn([("bash", '{"command": "python app.py"}', TB)])}}))
    add(
        _episode(
            "tb-second-call",
            lambda b: {"traceback": {b.turn([LS, ("bash", '{"command": "python -c 1/0"}', TB)])}},
        )
    )

    # failing tests: attributed to the turns whose edit went through
    def wrong_body(b: Builder) -> dict[str, set[int]]:
        b.turn([LS])
        edit = b.turn([("edit", EDIT_ARGS, "edited a.py")])
        b.turn([SUBMITTED])
        return {"failing_test": {edit}}

    def two_edits(b: Builder) -> dict[str, set[int]]:
        first = b.turn([("edit", EDIT_ARGS, "edited a.py")])
        second = b.turn([("edit", EDIT_ARGS.replace("a.py", "b.py"), "edited b.py")])
        b.turn([SUBMITTED])
        return {"failing_test": {first, second}}

    def gave_up(b: Builder) -> dict[str, set[int]]:
        b.turn([LS])
        return {"failing_test": {b.turn([SUBMITTED])}}

    add(_episode("tests-wrong-body", wrong_body, failing_tests=fail))
    add(_episode("tests-two-edits", two_edits, failing_tests=fail * 2))
    add(_episode("tests-gave-up", gave_up, failing_tests=fail))

    # negatives: clean work, the word "error" in ordinary output, a text answer, exit code 0
    add(_episode("clean", lambda b: (b.turn([LS]), b.turn([("edit", EDIT_ARGS, "edited a.py")]), {})[-1]))
    add(
        _episode(
            "word-error-in-output",
            lambda b: (b.turn([("bash", '{"command": "grep -rn Error src"}', "src/e.py:3: class ParseError:")]), {})[
                -1
            ],
        )
    )
    add(_episode("text-answer", lambda b: (b.turn([], completion=9, content="The fix is in a.py."), {})[-1]))
    add(
        _episode("exit-zero", lambda b: (b.turn([("bash", '{"command": "pytest"}', "3 passed\nexit code: 0")]), {})[-1])
    )
    # a near miss the detector gets wrong: a file that merely shows an old traceback
    add(
        _episode(
            "viewed-log-with-traceback",
            lambda b: (b.turn([("bash", '{"command": "cat crash.log"}', TB + "exit code: 0")]), {})[-1],
        )
    )
    return out


@dataclass
class Score:
    """Episode-level counts of one kind, and how often the targeted turns were exactly the planted ones."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    turns_exact: int = 0

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else float("nan")

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else float("nan")


def score(episodes: list[Planted]) -> dict[str, Score]:
    """Per kind: found vs planted per episode, and episodes of that kind whose error turns are exactly the planted."""
    scores = {kind: Score() for kind in KINDS}
    for ep in episodes:
        sites = analyse(ep.trace, failing_tests=ep.failing_tests)
        found = {s.kind for s in sites}
        turns = set(error_turns(ep.trace, sites))
        planted_turns = set().union(*ep.kinds.values()) if ep.kinds else set()
        for kind, sc in scores.items():
            if kind in ep.kinds and kind in found:
                sc.tp += 1
                sc.turns_exact += turns == planted_turns
            elif kind in found:
                sc.fp += 1
            elif kind in ep.kinds:
                sc.fn += 1
    return scores


def example_hints(episodes: list[Planted]) -> dict[str, str]:
    """The first episode's hint per planted kind."""
    out: dict[str, str] = {}
    for ep in episodes:
        for kind in ep.kinds:
            out.setdefault(kind, build_hint(ep.trace, failing_tests=ep.failing_tests)[0])
    return out
