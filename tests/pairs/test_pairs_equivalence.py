"""Action normalisation and the tiered equivalence function."""

from __future__ import annotations

import json

import pytest

from crf_prime.pairs import Tier, canonical_action, canonical_call, match_tier, same_action
from crf_prime.pairs.normalize import embedded_calls, normalise_path
from crf_prime.records.models import Action, ToolCall


def call(name: str, args: dict | str, text: str = "") -> Action:
    raw = args if isinstance(args, str) else json.dumps(args)
    return Action(text=text, tool_calls=(ToolCall(name=name, arguments=raw),))


def test_canonical_call_drops_cosmetics_sorts_keys_and_normalises_paths() -> None:
    a = canonical_call("Bash", '{"description": "run tests", "timeout": 120000, "command": "pytest   -q\\n"}')
    b = canonical_call("execute_bash", '{"command": "pytest -q", "security_risk": "LOW"}')
    assert a == b
    assert a.name == "bash" and a.args == '{"command": "pytest -q"}'
    assert (
        canonical_call("str_replace_editor", '{"command": "view", "path": "/testbed/src/../src/a.py"}').name == "read"
    )
    assert (
        canonical_call("str_replace_editor", '{"command": "create", "path": "x.py", "file_text": "1"}').name == "write"
    )
    assert canonical_call("Read", '{"file_path": "/workspace/proj/src/a.py"}').args == '{"file_path": "src/a.py"}'
    assert canonical_call("mcp__repo__grep", '{"pattern": "x"}').name == "search"
    bad = canonical_call("bash", '{"command": ')
    assert bad.name == "bash" and bad.args == '{"command":'


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/testbed/a/b.py", "a/b.py"),
        ("/workspace/repo/x/../y.py", "y.py"),
        ("./z.py", "z.py"),
        ("/home/u/p.py", "/home/u/p.py"),
    ],
)
def test_normalise_path(path: str, expected: str) -> None:
    assert normalise_path(path) == expected


def test_embedded_swe_agent_actions() -> None:
    xml = "Looking.\n<function=str_replace_editor>\n<parameter=command>view</parameter>\n<parameter=path>/testbed/w.py</parameter>\n</function>"
    assert embedded_calls(xml) == [("str_replace_editor", json.dumps({"command": "view", "path": "/testbed/w.py"}))]
    assert embedded_calls("Run it.\n```bash\npython -m pytest -q\n```") == [
        ("bash", '{"command": "python -m pytest -q"}')
    ]
    assert embedded_calls("Done.\n```\nsubmit\n```") == [("submit", "{}")]
    assert embedded_calls("no action here") == []
    assert embedded_calls("Here is the fix:\n```python\nx = 1\n```\n") == []  # code in prose is not a command
    assert embedded_calls("Run:\n```\nls\n```\nthen tell me.") == []
    assert canonical_action(Action(text=xml)).calls[0].name == "read"


@pytest.mark.parametrize(
    ("a", "b", "tier"),
    [
        # exact: same canonical calls across harness spellings
        (
            call("Bash", {"command": "pytest -q", "description": "x"}),
            call("bash", {"command": "pytest  -q"}),
            Tier.EXACT,
        ),
        (call("Read", {"file_path": "/testbed/a.py"}), call("read_file", {"file_path": "a.py"}), Tier.EXACT),
        (Action(text="All tests pass."), Action(text="all   tests pass."), Tier.EXACT),
        # key_args: same intent + key arguments
        (
            call("bash", {"command": "cd /testbed && python -m pytest t.py"}),
            call("bash", {"command": "pytest t.py"}),
            Tier.KEY_ARGS,
        ),
        (
            call("Read", {"file_path": "/testbed/a.py", "offset": 10, "limit": 20}),
            call("str_replace_editor", {"command": "view", "path": "/testbed/a.py", "view_range": [1, 5]}),
            Tier.KEY_ARGS,
        ),
        (call("Read", {"file_path": "/testbed/a.py"}), call("bash", {"command": "cat /testbed/a.py"}), Tier.KEY_ARGS),
        (call("bash", {"command": "sed -n 1,40p a.py"}), call("Read", {"file_path": "a.py"}), Tier.KEY_ARGS),
        (
            call("Edit", {"file_path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}),
            call(
                "str_replace_editor",
                {"command": "str_replace", "path": "/testbed/a.py", "old_str": "x = 1", "new_str": "x=2"},
            ),
            Tier.KEY_ARGS,
        ),
        (call("finish", {"message": "done"}), call("submit", {}), Tier.KEY_ARGS),
        (
            Action(
                tool_calls=(
                    ToolCall(name="bash", arguments='{"command": "ls"}'),
                    ToolCall(name="Read", arguments='{"file_path": "a"}'),
                )
            ),
            Action(
                tool_calls=(
                    ToolCall(name="cat", arguments='{"file_path": "a"}'),
                    ToolCall(name="bash", arguments='{"command": "ls"}'),
                )
            ),
            Tier.KEY_ARGS,
        ),
        # text: similar prose
        (
            Action(text="The fix is complete; all tests pass now."),
            Action(text="The fix is complete and all tests pass now."),
            Tier.TEXT,
        ),
        # different
        (call("bash", {"command": "pytest a.py"}), call("bash", {"command": "pytest b.py"}), Tier.NONE),
        (
            call("Edit", {"file_path": "a.py", "old_string": "x"}),
            call("Edit", {"file_path": "b.py", "old_string": "x"}),
            Tier.NONE,
        ),
        (call("bash", {"command": "ls"}), Action(text="ls"), Tier.NONE),
        (Action(text="Run the tests next."), Action(text="I will open the config file."), Tier.NONE),
        (
            call("bash", {"command": "ls"}),
            Action(tool_calls=(ToolCall(name="bash", arguments='{"command": "ls"}'),) * 2),
            Tier.NONE,
        ),
    ],
)
def test_match_tier(a: Action, b: Action, tier: Tier) -> None:
    assert match_tier(a, b) == tier
    assert match_tier(b, a) == tier


def test_same_action_thresholds() -> None:
    a = call("bash", {"command": "cd /testbed && pytest t.py"})
    b = call("bash", {"command": "pytest t.py"})
    assert same_action(a, b)  # default key_args
    assert not same_action(a, b, min_tier="exact")
    t1, t2 = (
        Action(text="The fix is complete; all tests pass now."),
        Action(text="The fix is complete and all tests pass now."),
    )
    assert same_action(t1, t2, min_tier="text")
    assert not same_action(t1, t2, min_tier="text", text_similarity=0.99)
    assert not same_action(t1, t2)  # text similarity alone is weaker than key_args


def test_think_calls_do_not_make_steps_differ() -> None:
    a = Action(
        tool_calls=(
            ToolCall(name="think", arguments='{"thought": "hmm"}'),
            ToolCall(name="bash", arguments='{"command": "ls"}'),
        )
    )
    assert match_tier(a, call("bash", {"command": "ls"})) == Tier.EXACT
