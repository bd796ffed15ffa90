"""Ingesters on fixtures in the real on-disk formats (tests/traces/fixtures), incl. malformed lines."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from crf_prime.records import read_states
from crf_prime.traces import IngestError, IngestReport, detect_format, ingest
from crf_prime.traces.chat import SYNTHETIC_SYSTEM_PROMPT
from crf_prime.traces.ingest import FormatSpec, ingest_to_jsonl

FIX = Path(__file__).parent / "fixtures"


def run(path: Path, fmt: str = "auto") -> tuple[list, IngestReport]:
    report = IngestReport()
    return list(ingest([path], fmt, report)), report


def calls(state) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in state.student_action.tool_calls]


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("claude_code_session.jsonl", "claude-code"),
        ("claude_code_agent-a1b2c3.jsonl", "claude-code"),
        ("openhands_v0_trajectory.json", "openhands"),
        ("openhands_v0_output.jsonl", "openhands"),
        ("openhands_v1_events.jsonl", "openhands"),
        ("swe_smith.jsonl", "swe-smith"),
        ("swe_gym.jsonl", "swe-gym"),
    ],
)
def test_detect_format(name: str, fmt: str) -> None:
    assert detect_format(FIX / name) == fmt


def test_claude_code_session() -> None:
    path = FIX / "claude_code_session.jsonl"
    states, report = run(path)
    assert [s.step for s in states] == [0, 1, 2, 3, 4]
    assert [s.source.line for s in states] == [5, 11, 17, 22, 25]
    s0, s1, s2, s3, s4 = states
    # reply split over three lines (thinking / text / tool_use) merged by message.id; thinking kept for the student
    assert s0.student_action.text == "Let me look at the failing test."
    assert s0.student_action.reasoning == "I should look at the test first."
    assert calls(s0) == [("Read", {"file_path": "/home/dev/proj/tests/test_parse.py"})]
    # no system prompt in the file -> synthetic one; the isMeta caveat is not in the context
    assert s0.messages == (
        {"role": "system", "content": SYNTHETIC_SYSTEM_PROMPT},
        {"role": "user", "content": "The test tests/test_parse.py::test_empty fails. Please fix it."},
    )
    # parallel tool calls written as two lines (and a torn line between them) form one turn
    assert [c[0] for c in calls(s1)] == ["Bash", "Grep"]
    # thinking is stripped from the teacher context
    assert s1.messages[2] == {
        "role": "assistant",
        "content": "Let me look at the failing test.",
        "tool_calls": [
            {
                "id": "toolu_01",
                "type": "function",
                "function": {"name": "Read", "arguments": '{"file_path": "/home/dev/proj/tests/test_parse.py"}'},
            }
        ],
    }
    assert "reasoning" not in json.dumps(s1.messages)
    assert "I should look at the test first." not in json.dumps(s1.messages)
    # tool results: is_error marked, list content flattened, in call order after the assistant turn
    assert [m["role"] for m in s2.messages] == ["system", "user", "assistant", "tool", "assistant", "tool", "tool"]
    assert s2.messages[5]["tool_call_id"] == "toolu_02"
    assert s2.messages[5]["content"].startswith("[tool error]\nFAILED tests/test_parse.py::test_empty")
    assert s2.messages[6] == {"role": "tool", "tool_call_id": "toolu_03", "content": "proj/parse.py:3:def parse(text):"}
    # the later fork wins; the abandoned "rewrite" reply is not a state
    assert calls(s2)[0][0] == "Edit"
    assert all("rewrite the whole module" not in s.student_action.text for s in states)
    # after /compact the context restarts at the summary
    assert [m["role"] for m in s3.messages] == ["system", "user", "user"]
    assert s3.messages[1]["content"].startswith("This session is being continued")
    assert s3.student_action.reasoning == "Run everything."
    # the <synthetic> API-error message is neither a state nor context
    assert s4.student_action.text == "All 12 tests pass; the empty-input bug is fixed."
    assert "API Error" not in json.dumps(s4.messages)
    assert {s.source_model for s in states} == {"claude-sonnet-4-5-20250929"}
    assert {s.model_family for s in states} == {"anthropic"}
    assert {s.source.trace_id for s in states} == {"8f0c3a52-1b7e-4c55-9d7e-2f1a6b0c9e11"}
    assert [t["function"]["name"] for t in s0.tools] == ["Bash", "Edit", "Grep", "Read"]
    assert report.skipped == {
        "non_conversational": 1,
        "snapshot": 1,
        "meta": 1,
        "sidechain": 2,
        "malformed_json": 1,
        "synthetic": 1,
        "off_main_branch": 1,
    }
    assert report.malformed == [f"{path}:12: JSONDecodeError: Invalid control character at: line 1 column 81 (char 80)"]
    assert report.states == 5 and report.traces == 1 and report.files == 1


def test_state_ids_stable_and_location_independent(tmp_path: Path) -> None:
    first = [s.state_id for s in run(FIX / "claude_code_session.jsonl")[0]]
    again = [s.state_id for s in run(FIX / "claude_code_session.jsonl")[0]]
    copy = tmp_path / "elsewhere.jsonl"
    shutil.copy(FIX / "claude_code_session.jsonl", copy)
    moved = [s.state_id for s in run(copy)[0]]
    assert first == again == moved
    assert len(set(first)) == 5


def test_claude_code_subagent_file_has_no_states() -> None:
    states, report = run(FIX / "claude_code_agent-a1b2c3.jsonl")
    assert states == [] and report.skipped == {"sidechain": 2}


def test_openhands_v0_function_calling() -> None:
    states, report = run(FIX / "openhands_v0_trajectory.json")
    assert [s.source.line for s in states] == [5, 7, 11, 13]  # JSON array: 1-based element index
    s0, s1, s2, s3 = states
    assert s0.messages[0]["content"].startswith("You are OpenHands agent")  # recorded system prompt kept
    assert s0.messages[1] == {"role": "user", "content": "Fix the bug in parse.py: parse('') raises IndexError."}
    assert [t["function"]["name"] for t in s0.tools] == ["execute_bash", "str_replace_editor", "finish"]
    assert s0.student_action.text == "I'll first look at the repository layout."
    assert calls(s0) == [("execute_bash", {"command": "ls /workspace/proj"})]
    # two actions of one model_response = one turn with both parallel calls
    assert calls(s1) == [
        ("str_replace_editor", {"command": "view", "path": "/workspace/proj/parse.py"}),
        ("str_replace_editor", {"command": "view", "path": "/workspace/proj/tests/test_parse.py"}),
    ]
    assert s2.messages[5]["tool_call_id"] == "toolu_2"
    assert s2.messages[6]["tool_call_id"] == "toolu_3"
    assert s2.messages[6]["content"].startswith("[tool error]\nInvalid `path` parameter")
    assert calls(s3) == [("finish", {"message": "Fixed the empty-input case.", "task_completed": "true"})]
    assert s0.source_model == "litellm_proxy/claude-3-5-sonnet-20241022" and s0.model_family == "anthropic"
    assert report.skipped == {"non_llm_event": 3}  # recall + 2x agent_state_changed


def test_openhands_v0_output_rows_without_function_calling() -> None:
    path = FIX / "openhands_v0_output.jsonl"
    states, report = run(path)
    assert len(states) == 2
    s0, s1 = states
    assert s0.source.trace_id == "demo__add-1"
    assert s0.student_action.text == "Let me read add.py"
    assert calls(s0) == [("execute_bash", {"command": "cat add.py"})]
    assert s1.messages[3] == {"role": "tool", "tool_call_id": "call_1", "content": "def add(a, b):\n    return a + b"}
    assert s1.student_action.text == "I will treat None as 0." and not s1.student_action.tool_calls
    assert s0.model_family == "openai"
    assert report.skipped == {"malformed_json": 1}
    assert report.malformed[0].startswith(f"{path}:2: JSONDecodeError")


def test_openhands_v1_events() -> None:
    states, report = run(FIX / "openhands_v1_events.jsonl")
    s0, s1 = states
    assert s0.messages == (
        {"role": "system", "content": "You are OpenHands agent."},
        {"role": "user", "content": "Count the lines of README.md"},
    )
    assert s0.student_action.text == "I'll use wc."
    assert s0.student_action.reasoning == "wc -l is the simplest"
    assert calls(s0) == [
        ("execute_bash", {"command": "wc -l README.md"}),
        ("str_replace_editor", {"command": "view", "path": "/workspace/README.md"}),
    ]
    assert s1.messages[3] == {
        "role": "tool",
        "tool_call_id": "call_a",
        "content": "42 README.md",
        "name": "execute_bash",
    }
    assert s1.messages[4]["content"] == "[tool error]\nFile too large to view"
    assert s1.student_action.text == "README.md has 42 lines."
    assert s0.model_family == s1.model_family == "qwen"
    assert report.skipped == {"non_llm_event": 1}


def test_swe_smith_tool_and_xml_styles() -> None:
    path = FIX / "swe_smith.jsonl"
    states, report = run(path)
    assert [(s.source.line, s.step) for s in states] == [(1, 0), (1, 1), (3, 0), (3, 1)]
    assert calls(states[0]) == [("bash", {"command": "grep -rn 'def tokenize' /testbed"})]
    assert states[0].messages[1] == {
        "role": "user",
        "content": "<uploaded_files>\n/testbed\n</uploaded_files>\nFix: tokenize('') crashes.",
    }
    assert states[1].messages[3]["role"] == "tool" and states[1].messages[3]["tool_call_id"] == "call_1"
    # xml style: the action stays text (messages stored as a JSON string in this row)
    assert states[2].student_action.text.endswith("<parameter=path>/testbed/words.py</parameter>\n</function>")
    assert states[2].source.trace_id == "py__words.0a1b.func__y2.77aa"
    assert report.skipped == {"malformed_json": 1}
    assert report.malformed[0].startswith(f"{path}:2:")


def test_swe_gym_rows() -> None:
    states, report = run(FIX / "swe_gym.jsonl")
    assert len(states) == 2
    assert states[0].source_model == "gpt-4o-2024-08-06" and states[0].model_family == "openai"
    assert states[0].source.trace_id == "getmoto__moto-5865/gpt-4o-2024-08-06_maxiter_30_N_v2.1-no-hint-train-t04-run_1"
    assert len(states[0].tools) == 3
    assert calls(states[1]) == [
        ("execute_bash", {"command": "cd /workspace/getmoto__moto__4.1 && python -m pytest tests/test_dynamodb -q -x"})
    ]
    assert report.skipped == {"empty_action": 1}


def test_entirely_unparsable_file_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "garbage.jsonl"
    bad.write_text("not json\n{still not\n")
    with pytest.raises(IngestError, match=r"garbage\.jsonl: no parsable"):
        list(ingest([bad], "claude-code"))
    with pytest.raises(IngestError, match=r"garbage\.jsonl: cannot detect"):
        list(ingest([bad]))


def test_truncated_json_array_reports_element(tmp_path: Path) -> None:
    events = json.loads((FIX / "openhands_v0_trajectory.json").read_text())
    text = json.dumps(events)
    cut = tmp_path / "cut.json"
    cut.write_text(text[: text.index('"id": 10') - 3])  # killed mid-write inside element 11
    report = IngestReport()
    states = list(ingest([cut], "openhands", report))
    assert len(states) == 2  # the two turns before the cut; the edit turn (element 11) was never written
    assert report.malformed == [f"{cut}:11: unterminated JSON array"]


def test_ingest_to_jsonl_roundtrip_and_atomic(tmp_path: Path) -> None:
    out = tmp_path / "states.jsonl"
    report = ingest_to_jsonl([FIX], out)
    rows = list(read_states(out))
    assert len(rows) == report.states == 5 + 4 + 2 + 2 + 4 + 2
    assert report.files == 7
    bad = tmp_path / "bad.jsonl"
    bad.write_text("}}}\n")
    out2 = tmp_path / "never.jsonl"
    with pytest.raises(IngestError, match=r"bad\.jsonl: no parsable swe-gym record"):  # forced format, unreadable
        ingest_to_jsonl([FIX, bad], out2, FormatSpec.parse(["*/bad.jsonl=swe-gym"]))
    assert not out2.exists() and not list(tmp_path.glob(".never*"))


def test_unanswered_calls_and_orphan_results_are_repaired(tmp_path: Path) -> None:
    """Interrupted calls get a placeholder result and stray results become user text, so teacher APIs accept the context."""
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "execute_bash", "arguments": '{"command": "sleep 999"}'},
    }
    row = {
        "instance_id": "x",
        "run_id": "gpt-4o_maxiter_30",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "user", "content": "[interrupted]"},
            {"role": "tool", "tool_call_id": "zz", "content": "stray"},
            {"role": "assistant", "content": "ok"},
        ],
    }
    path = tmp_path / "gym.jsonl"
    path.write_text(json.dumps(row) + "\n")
    _, last = run(path, "swe-gym")[0]
    assert last.messages[2:] == (
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "[no tool result was recorded]"},
        {"role": "user", "content": "[interrupted]"},
        {"role": "user", "content": "Tool result:\nstray"},
    )


def _as_session(lines: list[str], n: int) -> list[str]:
    """The fixture session re-keyed as session ``n`` (fresh sessionId and uuids), as Claude Code writes another one."""
    out = []
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            out.append(line)
            continue
        for key in ("uuid", "parentUuid", "logicalParentUuid", "leafUuid"):
            if rec.get(key):
                rec[key] = f"{rec[key]}-s{n}"
        if "sessionId" in rec:
            rec["sessionId"] = f"session-{n}"
        out.append(json.dumps(rec))
    return out


def test_claude_code_concatenated_sessions_become_one_trace_each(tmp_path: Path) -> None:
    """Session files concatenated into one JSONL: every session's main branch is ingested, none is lost."""
    lines = (FIX / "claude_code_session.jsonl").read_text().splitlines()
    path = tmp_path / "all_sessions.jsonl"
    path.write_text("\n".join(line for n in range(3) for line in _as_session(lines, n)) + "\n")
    states, report = run(path)
    one, _ = run(FIX / "claude_code_session.jsonl")
    assert [s.source.trace_id for s in states] == [f"session-{n}" for n in range(3) for _ in range(5)]
    assert report.traces == 3 and report.states == 15
    assert report.skipped["off_main_branch"] == 3  # one abandoned fork per session, as in the single file
    for n in range(3):
        got = [s for s in states if s.source.trace_id == f"session-{n}"]
        assert [s.student_action for s in got] == [s.student_action for s in one]
        assert [s.messages for s in got] == [s.messages for s in one]
    assert len({s.state_id for s in states}) == 15


def test_claude_code_compact_summary_kept_when_visible_in_transcript_only(tmp_path: Path) -> None:
    """Claude Code marks the /compact summary isVisibleInTranscriptOnly: true; it is still the context after /compact."""
    text = (FIX / "claude_code_session.jsonl").read_text()
    assert text.count('"isVisibleInTranscriptOnly": false') == 1
    path = tmp_path / "compacted.jsonl"
    path.write_text(text.replace('"isVisibleInTranscriptOnly": false', '"isVisibleInTranscriptOnly": true'))
    states, report = run(path)
    s3 = states[3]
    assert [m["role"] for m in s3.messages] == ["system", "user", "user"]
    assert s3.messages[1]["content"].startswith("This session is being continued")
    assert report.skipped["meta"] == 1  # only the isMeta caveat


def test_swe_smith_tool_style_rows_get_the_schemas_their_calls_use() -> None:
    states, _ = run(FIX / "swe_smith.jsonl")
    # tool style: one schema per tool name called anywhere in the row, with the argument names its calls used
    assert [s.tools for s in states[:2]] == [
        (
            {
                "type": "function",
                "function": {
                    "name": "bash",
                    "description": "Tool bash (schema not recorded in the trace; derived from its calls).",
                    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
                },
            },
            {
                "type": "function",
                "function": {
                    "name": "submit",
                    "description": "Tool submit (schema not recorded in the trace; derived from its calls).",
                    "parameters": {"type": "object", "properties": {}},
                },
            },
        )
    ] * 2
    assert states[2].tools == states[3].tools == ()  # xml style: the actions are text, no tool is called


def test_recorded_tool_schemas_win_over_derived_ones() -> None:
    states, _ = run(FIX / "swe_gym.jsonl")
    assert [t["function"]["name"] for t in states[0].tools] == ["execute_bash", "str_replace_editor", "finish"]


OPENHANDS_METADATA = {
    "agent_class": "CodeActAgent",
    "llm_config": {"model": "litellm_proxy/claude-3-5-sonnet-20241022", "temperature": 0.0, "max_output_tokens": 4096},
    "max_iterations": 30,
    "eval_output_dir": "evaluation/evaluation_outputs/outputs/SWE-bench_Lite-test/CodeActAgent/run_1",
    "start_time": "2026-10-01 10:00:00",
    "git_commit": "3a4b5c6d",
    "dataset": "princeton-nlp/SWE-bench_Lite",
    "data_split": None,
    "details": {},
}


def test_undetectable_file_beside_trajectories_is_skipped_and_counted(tmp_path: Path) -> None:
    run_dir = tmp_path / "run_1"
    run_dir.mkdir()
    shutil.copy(FIX / "openhands_v0_trajectory.json", run_dir / "trajectory.json")
    (run_dir / "metadata.json").write_text(json.dumps(OPENHANDS_METADATA, indent=2))
    out = tmp_path / "states.jsonl"
    report = ingest_to_jsonl([run_dir], out)
    assert report.states == len(list(read_states(out))) == 4
    assert report.files == 1 and report.skipped["undetected_file"] == 1
    meta = run_dir / "metadata.json"
    assert report.unread == [
        f"{meta}: cannot detect the trace format from its first records (pass --format "
        f"claude-code|openhands|swe-smith|swe-gym|verifiers); first malformed line: {meta}:1: JSONDecodeError: "
        "Expecting property name enclosed in double quotes: line 2 column 1 (char 2)"
    ]
    assert report.skipped["malformed_json"] == 0  # the detection peek is not counted as malformed trace lines


def test_format_per_glob_reads_a_mixed_directory(tmp_path: Path) -> None:
    """SWE-smith rows without traj_id/patch look like SWE-Gym rows; a GLOB=FORMAT rule reads them as swe-smith."""
    (tmp_path / "smith").mkdir()
    rows = [json.loads(line) for line in (FIX / "swe_smith.jsonl").read_text().splitlines() if line.startswith('{"')]
    (tmp_path / "smith" / "rows.jsonl").write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k not in ("traj_id", "patch")}) + "\n" for r in rows)
    )
    shutil.copy(FIX / "claude_code_session.jsonl", tmp_path / "session.jsonl")
    auto = IngestReport()
    list(ingest([tmp_path], "auto", auto))
    assert auto.formats == {"swe-gym": 1, "claude-code": 1}
    spec = FormatSpec.parse(["smith/*.jsonl=swe-smith"])
    report = IngestReport()
    states = list(ingest([tmp_path], spec, report))
    assert report.formats == {"swe-smith": 1, "claude-code": 1}
    assert [s.source.format for s in states] == ["claude-code"] * 5 + ["swe-smith"] * 4


def test_format_spec_parse() -> None:
    assert FormatSpec.parse([]) == FormatSpec("auto", ())
    assert FormatSpec.parse(["swe-gym", "a/*.json=openhands"]) == FormatSpec("swe-gym", (("a/*.json", "openhands"),))
    spec = FormatSpec.parse(["runs/*.json=openhands", f"{FIX / 'swe_gym.jsonl'}=swe-smith", "swe-gym"])
    assert spec.for_path(Path("runs/a/output.json")) == "openhands"  # '*' also matches '/'
    assert spec.for_path(Path("/data/runs/traj.json")) == "openhands"  # matched from the right, like Path.match
    assert spec.for_path(FIX / "swe_gym.jsonl") == "swe-smith"  # a plain path is a rule for that file
    assert spec.for_path(Path("runs/a/output.jsonl")) == "swe-gym"  # no rule matches: the default
    with pytest.raises(ValueError, match="unknown trace format 'openhand'"):
        FormatSpec.parse(["x=openhand"])
    with pytest.raises(ValueError, match="already given"):
        FormatSpec.parse(["swe-gym", "openhands"])


def test_nothing_readable_is_an_error_and_writes_nothing(tmp_path: Path) -> None:
    src = tmp_path / "run"
    src.mkdir()
    (src / "metadata.json").write_text(json.dumps(OPENHANDS_METADATA))
    (src / "empty.jsonl").write_text("")
    out = tmp_path / "new_dir" / "states.jsonl"
    with pytest.raises(IngestError, match=r"nothing could be ingested from 2 file\(s\): .*empty\.jsonl: empty file; "):
        ingest_to_jsonl([src], out)
    assert not out.parent.exists()
    (tmp_path / "no_traces").mkdir()
    with pytest.raises(IngestError, match=r"no \*\.jsonl / \*\.json file"):
        list(ingest([tmp_path / "no_traces"]))


def test_claude_code_resumed_session_with_copied_history_is_one_trace(tmp_path: Path) -> None:
    """``--resume`` copies the old session's records (old sessionId) before the new ones: one trace, no duplicates."""
    lines = (FIX / "claude_code_session.jsonl").read_text().splitlines()
    recs = [json.loads(line) for line in lines if line.startswith('{"sessionId"')]
    leaf = [r for r in recs if r["type"] in ("user", "assistant") and not r["isSidechain"] and not r.get("isMeta")][-1]
    new = {"sessionId": "resumed-B", "isSidechain": False, "cwd": "/home/dev/proj", "version": "2.0.14"}
    resumed = [
        {
            **new,
            "type": "user",
            "uuid": "b-1",
            "parentUuid": leaf["uuid"],
            "message": {"role": "user", "content": "Commit it."},
        },
        {
            **new,
            "type": "assistant",
            "uuid": "b-2",
            "parentUuid": "b-1",
            "message": {
                "id": "msg_b1",
                "role": "assistant",
                "model": "claude-sonnet-4-5-20250929",
                "content": [
                    {"type": "tool_use", "id": "toolu_b1", "name": "Bash", "input": {"command": "git commit -am fix"}}
                ],
            },
        },
    ]
    path = tmp_path / "resumed-B.jsonl"
    path.write_text("\n".join(lines + [json.dumps(r) for r in resumed]) + "\n")
    states, report = run(path)
    one, _ = run(FIX / "claude_code_session.jsonl")
    assert report.traces == 1 and {s.source.trace_id for s in states} == {"resumed-B"}
    assert [s.student_action for s in states[:5]] == [s.student_action for s in one]
    assert calls(states[5]) == [("Bash", {"command": "git commit -am fix"})]
    assert states[5].messages[-1] == {"role": "user", "content": "Commit it."}
    assert report.skipped["off_main_branch"] == 1
