"""Error sites from a REAL trace: the real vf-eval CLI runs crf-prime's SandboxHarness on a one-task taskset
(tests/sandbox/harness_fixture), the model is a scripted agent on LoopbackOpenAI making the mistakes channel 2
targets; `crf-prime hints` then reads the traces.jsonl vf-eval wrote."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from vf_cli_support import vf_eval

from crf_prime.cli import main
from crf_prime.loopback import LoopbackOpenAI, Reply

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

FIXTURE = Path(__file__).parents[1] / "sandbox" / "harness_fixture"
FAILING = "python3 -c 'raise ValueError(\"bad input\")'"


def call(name: str, arguments: str) -> dict:
    return {"name": name, "arguments": arguments}


def test_hints_from_a_vf_eval_trace(tmp_path: Path, capsys):
    replies = [
        Reply(tool_calls=[call("grep", '{"pattern": "hi"}')]),
        Reply(tool_calls=[call("bash", '{"command": "ls"')]),
        Reply(tool_calls=[call("bash", json.dumps({"command": FAILING}))]),
        Reply(tool_calls=[call("bash", json.dumps({"command": FAILING}))]),
        Reply(tool_calls=[call("edit", '{"path": "hello.txt"}')]),
        Reply(tool_calls=[call("bash", '{"command": "false"}')]),
        Reply(content="done", tool_calls=[call("submit", '{"summary": "gave up"}')]),
    ]
    with LoopbackOpenAI(lambda body: replies.pop(0)) as server:
        env = {"PYTHONPATH": os.pathsep.join([str(FIXTURE), os.environ.get("PYTHONPATH", "")])}
        traces = vf_eval("crf-tiny-box", server.base_url, tmp_path / "outputs", env=env, timeout=240)

    rows_path = tmp_path / "hints.jsonl"
    assert main(["hints", "--traces", str(traces), "--out", str(rows_path)]) == 0
    (row,) = [json.loads(line) for line in rows_path.read_text().splitlines()]
    kinds = [(s["kind"], s["tool"]) for s in row["sites"]]
    assert kinds == [
        ("unknown_tool", "grep"),
        ("invalid_json", "bash"),
        ("traceback", "bash"),
        ("traceback", "bash"),
        ("schema_violation", "edit"),
        ("tool_error", "bash"),
        ("repeated_failure", "bash"),
    ]
    assert row["hint"].splitlines() == [
        "- Reminder: the available tools are `bash`, `edit`, `submit`, `view`; `grep` is not one of them.",
        "- Tool arguments must be one valid JSON object; your call to `bash` was not "
        "(Expecting ',' delimiter: line 1 column 17 (char 16)).",
        "- `edit` expects {path: string, old_str: string, new_str: string}; your call failed validation: "
        "'old_str' is a required property; 'new_str' is a required property.",
        f"- You ran the same failing `bash` call 2 times ({json.dumps({'command': FAILING})}); repeating it will not "
        "change the result: read the error and change something first.",
        "- A `bash` run raised ValueError: bad input (at <string>:1); fix that error before moving on.",
        "- `bash` failed: exit code 1",
    ]
    assert "1 of 1 traces get a non-empty hint" in capsys.readouterr().out
