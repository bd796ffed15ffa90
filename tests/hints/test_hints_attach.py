"""attach_hint on real verifiers v1 traces: every error kind is found at the right message and worded as specified."""

from __future__ import annotations

import json

import pytest
import verifiers.v1 as vf
from planted_sites import BASH, EDIT
from verifiers.v1.configs.agent import AgentConfig
from verifiers.v1.trace import AgentInfo, TraceTask
from verifiers.v1.types import AssistantMessage, ToolCall, ToolMessage, UserMessage

from crf_prime.hints import HINT_KEY, FailingTest, analyse, attach_hint
from crf_prime.hints.detect import exit_code, traceback_summary

TB = "Traceback (most recent call last):\n  File \"/w/app.py\", line 7, in <module>\n    main()\nKeyError: 'user'\n"


def make_trace(turns: list[tuple[list[tuple[str, str]], list[str]]], tools=(BASH, EDIT)) -> vf.Trace:
    """A trace whose turns are (tool calls as (name, raw args), tool results in the same order)."""
    trace = vf.Trace(task=TraceTask(type="T", data=vf.TaskData(prompt="fix it")), agent=AgentInfo(config=AgentConfig()))
    trace.tools = list(tools)
    trace.nodes.append(vf.MessageNode(message=UserMessage(content="fix it")))
    n = 0
    for calls, results in turns:
        ids = [f"c{n + k}" for k in range(len(calls))]
        n += len(calls)
        msg = AssistantMessage(
            tool_calls=[ToolCall(id=i, name=c, arguments=a) for i, (c, a) in zip(ids, calls, strict=True)]
        )
        trace.nodes.append(vf.MessageNode(parent=len(trace.nodes) - 1, message=msg, sampled=True))
        for i, (name, _), result in zip(ids, calls, results, strict=True):
            tm = ToolMessage(tool_call_id=i, content=result, name=name)
            trace.nodes.append(vf.MessageNode(parent=len(trace.nodes) - 1, message=tm))
    return trace


def test_clean_episode_gets_empty_hint_and_key_is_always_written():
    trace = make_trace([([("bash", '{"command": "ls"}')], ["app.py\nexit code: 0"])])
    assert attach_hint(trace) == ""
    assert trace.info[HINT_KEY] == ""
    assert trace.info["hint_sites"] == []


def test_unknown_tool_lists_available_tools():
    trace = make_trace([([("grep", '{"pattern": "x"}')], ["error: unknown tool 'grep'"])])
    hint = attach_hint(trace)
    assert hint == "- Reminder: the available tools are `bash`, `edit`; `grep` is not one of them."
    sites = analyse(trace)
    assert [(s.kind, s.index, s.tool) for s in sites] == [("unknown_tool", 1, "grep")]


def test_tools_override_replaces_declared_names():
    trace = make_trace([([("edit", '{"path": "a", "old_str": "x", "new_str": "y"}')], ["ok"])])
    assert attach_hint(trace, tools=["bash", "submit"]) == (
        "- Reminder: the available tools are `bash`, `submit`; `edit` is not one of them."
    )


def test_unknown_tool_from_result_text_when_no_tools_declared():
    trace = make_trace([([("search", "{}")], ["error: unknown tool 'search'"])], tools=())
    assert attach_hint(trace) == "- `search` is not an available tool; call only the tools listed in the prompt."


def test_invalid_json_and_non_object_arguments():
    trace = make_trace([([("bash", '{"command": "ls"'), ("edit", "[1, 2]")], ["error: invalid JSON", "error"])])
    sites = analyse(trace)
    assert [(s.kind, s.tool) for s in sites] == [("invalid_json", "bash"), ("invalid_json", "edit")]
    assert sites[0].detail.startswith("Expecting ',' delimiter")
    assert sites[1].detail == "arguments must be a JSON object, got list"
    hint = attach_hint(trace).splitlines()
    assert hint[0].startswith("- Tool arguments must be one valid JSON object; your call to `bash` was not (Expecting")
    assert hint[1] == (
        "- Tool arguments must be one valid JSON object; your call to `edit` was not "
        "(arguments must be a JSON object, got list)."
    )


def test_schema_violation_names_expected_signature():
    trace = make_trace(
        [([("edit", '{"path": "a.py", "old": "x"}')], ["error: 'old_str' and 'new_str' must be strings"])]
    )
    hint = attach_hint(trace)
    assert hint == (
        "- `edit` expects {path: string, old_str: string, new_str: string}; your call failed validation: "
        "'old_str' is a required property; 'new_str' is a required property."
    )


def test_nonzero_exit_and_traceback():
    trace = make_trace(
        [
            ([("bash", '{"command": "make"}')], ["make: *** No rule to make target 'x'.\nexit code: 2"]),
            ([("bash", '{"command": "python app.py"}')], [TB + "exit code: 1"]),
        ]
    )
    sites = analyse(trace)
    assert [(s.kind, s.index) for s in sites] == [("tool_error", 2), ("traceback", 4)]
    assert attach_hint(trace).splitlines() == [
        "- A `bash` run raised KeyError: 'user' (at /w/app.py:7); fix that error before moving on.",
        "- `bash` failed: exit code 2, make: *** No rule to make target 'x'.",
    ]


def test_repeated_identical_failing_command_is_counted_across_formatting():
    failing = "FAILED tests/test_app.py::test_x\nexit code: 1"
    trace = make_trace(
        [
            ([("bash", '{"command": "pytest -x"}')], [failing]),
            ([("bash", '{"command":   "pytest -x"}')], [failing]),
            ([("bash", '{"command": "pytest -x"}')], [failing]),
            ([("bash", '{"command": "ls"}')], ["app.py\nexit code: 0"]),
        ]
    )
    repeated = [s for s in analyse(trace) if s.kind == "repeated_failure"]
    assert [(s.tool, s.count, s.index, s.arguments) for s in repeated] == [("bash", 3, 2, '{"command": "pytest -x"}')]
    assert (
        '- You ran the same failing `bash` call 3 times ({"command": "pytest -x"}); repeating it will not change '
        "the result: read the error and change something first."
    ) in attach_hint(trace).splitlines()


def test_succeeding_repeats_are_not_failures():
    trace = make_trace([([("bash", '{"command": "ls"}')], ["a\nexit code: 0"])] * 3)
    assert [s.kind for s in analyse(trace)] == []


def test_failing_tests_come_first_with_their_test_file_lines():
    pytest_out = (
        "_______________________ test_parse _______________________\n\n"
        "    def test_parse():\n>       assert parse('1') == 2\n"
        "E       AssertionError: assert 1 == 2\nE        +  where 1 = parse('1')\n\n"
        "tests/test_p.py:4: AssertionError\n"
    )
    sources = {"tests/test_p.py": "from p import parse\n\ndef test_parse():\n    assert parse('1') == 2\n"}
    tests = [FailingTest(name=f"tests/test_p.py::test_{i}", message=pytest_out) for i in range(5)]
    trace = make_trace([([("bash", '{"command": "ls"}')], ["ok"])])
    assert attach_hint(trace, failing_tests=tests, test_sources=sources).splitlines() == [
        "- Test `tests/test_p.py::test_0` failed at tests/test_p.py:4: `assert parse('1') == 2`.",
        "- Test `tests/test_p.py::test_1` failed at tests/test_p.py:4: `assert parse('1') == 2`.",
        "- Test `tests/test_p.py::test_2` failed at tests/test_p.py:4: `assert parse('1') == 2`.",
        "- 2 more test(s) failed.",
    ]
    assert [x["tool"] for x in trace.info["hint_sites"]] == [t.name for t in tests]
    assert "detail" not in trace.info["hint_sites"][0]
    # without the grader's copy of the test file, the failure text is never quoted: the test id alone
    assert attach_hint(trace, failing_tests=tests[:1]) == "- Test `tests/test_p.py::test_0` failed."
    many = [FailingTest(name=f"t{i}") for i in range(40)]
    attach_hint(trace, failing_tests=many)
    assert len(trace.info["hint_sites"]) == 32


def test_hint_is_capped_and_survives_json_roundtrip_of_the_record():
    tests = [FailingTest(name=f"t{i}", note="x" * 500) for i in range(3)]
    trace = make_trace([([("bash", '{"command": "ls"}')], ["ok"])])
    hint = attach_hint(trace, failing_tests=tests, max_chars=300)
    assert len(hint) == 300 and hint.endswith("…")
    record = json.loads(json.dumps(trace.to_record()))
    assert record["info"]["hint"] == hint
    # the record form (traces.jsonl row) analyses the same way as the live trace
    record["info"] = {}
    assert attach_hint(record, failing_tests=tests, max_chars=300) == hint


def test_openai_message_dicts_are_accepted():
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "tool_calls": [{"id": "1", "type": "function", "function": {"name": "bash", "arguments": "{oops"}}],
        },
        {"role": "tool", "tool_call_id": "1", "content": "error: invalid JSON in tool arguments"},
    ]
    sites = analyse(messages)
    assert [(s.kind, s.index, s.tool) for s in sites] == [("invalid_json", 1, "bash")]


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("exit code: 3", 3),
        ("[exit_code=127]", 127),
        ("Process exited with code 1", 1),
        ("returncode 0", 0),
        ("x", None),
    ],
)
def test_exit_code_formats(text, code):
    assert exit_code(text) == code


def test_traceback_summary_takes_last_traceback_and_chained_exceptions():
    text = (
        TB
        + "\nDuring handling of the above exception, another exception occurred:\n\n"
        + TB.replace("KeyError: 'user'", "RuntimeError: config missing").replace("line 7", "line 9")
    )
    assert traceback_summary(text) == "RuntimeError: config missing (at /w/app.py:9)"
    assert traceback_summary("all good") is None
    lib = (
        'Traceback (most recent call last):\n  File "/w/run.py", line 3, in <module>\n    json.loads("{")\n'
        '  File "/usr/lib/python3.11/json/__init__.py", line 346, in loads\n'
        '  File "/usr/lib/python3.11/json/decoder.py", line 353, in raw_decode\n'
        "json.decoder.JSONDecodeError: Expecting property name: line 1 column 2 (char 1)\n"
    )
    assert (
        traceback_summary(lib)
        == "json.decoder.JSONDecodeError: Expecting property name: line 1 column 2 (char 1) (at /w/run.py:3)"
    )
    only_lib = lib.replace("/w/run.py", "/venv/lib/python3.11/site-packages/x.py")
    assert traceback_summary(only_lib).endswith("(at /usr/lib/python3.11/json/decoder.py:353)")


def test_sandbox_harness_tool_results_and_schemas():
    """The results and OpenAI tool schemas crf-prime's SandboxHarness produces are analysed as such."""
    from crf_prime.harness.tools import TOOL_SCHEMAS, ToolOutcome, format_outcome

    failed = format_outcome(ToolOutcome(exit_code=2, stdout="", stderr="ls: cannot access 'x'"), max_chars=10_000)
    killed = format_outcome(
        ToolOutcome(exit_code=None, stdout="", stderr="", limit_hit="wall", limit_value=5), max_chars=10_000
    )
    trace = make_trace(
        [
            (
                [("bash", '{"command": "ls x"}'), ("bash", '{"command": "sleep 99"}'), ("view", '{"file": "a.py"}')],
                [failed, killed, "x"],
            )
        ],
        tools=(),
    )
    tools = [vf.types.Tool.model_validate(t["function"]) for t in TOOL_SCHEMAS.values()]
    if "tools" in type(trace.nodes[0]).model_fields:  # verifiers 0.4.0 records the tools on the root node
        trace.tools = []
        trace.nodes[0].tools = tools
    else:  # the commit prime-rl pins records them on the trace
        trace.tools = tools
    sites = analyse(trace)
    assert [(s.kind, s.tool, s.detail) for s in sites] == [
        ("schema_violation", "view", "'path' is a required property"),
        ("tool_error", "bash", "exit code 2, ls: cannot access 'x'"),
        ("tool_error", "bash", "error: the command hit the sandbox's wall-clock limit of 5 s"),
    ]


def test_cli_over_a_traces_jsonl(tmp_path, capsys):
    from verifiers.v1.episode import EnvInfo, Episode

    from crf_prime.cli import main

    bad = make_trace([([("grep", "{}")], ["error: unknown tool 'grep'"])])
    good = make_trace([([("bash", '{"command": "ls"}')], ["ok"])])
    path = tmp_path / "traces.jsonl"
    path.write_text(
        "".join(
            json.dumps(Episode(env=EnvInfo(id="x"), task=t.task, traces=[t]).to_record()) + "\n" for t in (bad, good)
        )
    )
    out = tmp_path / "hints.jsonl"
    assert main(["hints", "--traces", str(path), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "1 of 2 traces get a non-empty hint" in printed and "unknown_tool" in printed
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["hint"] for r in rows] == [
        "- Reminder: the available tools are `bash`, `edit`; `grep` is not one of them.",
        "",
    ]
    assert rows[0]["sites"][0]["kind"] == "unknown_tool" and rows[1]["sites"] == []
    path.write_text("not json\n")
    assert main(["hints", "--traces", str(path)]) == 2
    assert f"{path}:1: not a verifiers episode record" in capsys.readouterr().err


def test_parametrized_cases_failing_at_one_line_are_grouped():
    sources = {"t.py": "def test_p(c):\n    assert f(c)\n\n\ndef test_q():\n    assert g() == 1\n"}
    tests = [FailingTest(name=f"t.py::test_p[{c}]", message="t.py:2: NotImplementedError") for c in "abcd"]
    tests += [FailingTest(name="t.py::test_p[e]", message="t.py:99: unknown line")]
    tests += [FailingTest(name=f"t.py::test_{i}", message=f"t.py:6: KeyError {i}") for i in range(3)]
    trace = make_trace([([("bash", '{"command": "ls"}')], ["ok"])])
    assert attach_hint(trace, failing_tests=tests, test_sources=sources).splitlines() == [
        "- Test `t.py::test_p` (5 parametrized cases) failed at t.py:2: `assert f(c)`.",  # [e]: the body's assert
        "- Test `t.py::test_0` failed at t.py:6: `assert g() == 1`.",
        "- Test `t.py::test_1` failed at t.py:6: `assert g() == 1`.",
        "- 1 more test(s) failed.",
    ]


def test_bare_exit_marker_is_the_whole_detail():
    trace = make_trace([([("bash", '{"command": "false"}')], ["[exit code: 1]"])])
    assert attach_hint(trace) == "- `bash` failed: exit code 1"
