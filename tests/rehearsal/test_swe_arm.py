"""The rehearsal's swebench-lite arm without prime-rl: the scripted policy's plans on the mini SWE-bench and the
check that the arm's rewards are judged by (a reward of 1 exactly when the edits produce the gold tree)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from rehearse_support import REHEARSE, load_script

from crf_prime.swe.fixture import build_mini_swebench

policy = load_script("policy", REHEARSE / "policy.py")  # report.py and inference_server.py import it by this name
load_script("weights", REHEARSE / "weights.py")  # report.py imports it by this name
report = load_script("rehearsal_report", REHEARSE / "report.py")
rehearse = load_script("rehearsal_rehearse_swe", REHEARSE / "rehearse.py")


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("swe-mini")
    build_mini_swebench(out)
    return out, json.loads((out / "instances.jsonl").read_text())


def _trace(turns: list[str]) -> dict:
    """A trace as prime-rl's file monitor writes it: each scripted turn's tool calls, each answered 'edited'."""
    nodes = []
    for i, text in enumerate(turns):
        calls = []
        for j, block in enumerate(text.split("<tool_call>")[1:]):
            call = json.loads(block.split("</tool_call>")[0])
            calls.append({"id": f"c{i}-{j}", "name": call["name"], "arguments": json.dumps(call["arguments"])})
        nodes.append({"message": {"role": "assistant", "content": text, "tool_calls": calls}})
        nodes += [{"message": {"role": "tool", "tool_call_id": c["id"], "content": "edited x"}} for c in calls]
    return {"nodes": nodes}


def _episode(script, row: dict, seed: int) -> tuple[str, list[str]]:
    """Play the scripted policy to its submit: (plan, the assistant turns)."""
    rng, said = random.Random(seed), []
    history = [("user", row["problem_statement"])]
    while True:
        turn = script.next_turn(row, history, rng)
        said.append(turn.text)
        history.append(("assistant", turn.text))
        if '"name": "submit"' in turn.text:
            return said[0], said


def test_each_plan_is_judged_by_the_gold_tree(mini: tuple[Path, dict]) -> None:
    """solve and test_then_solve end with the gold tree (expected 1), give_up with the base commit (expected 0);
    every plan is reached."""
    out, row = mini
    script = policy.SweScript(out / "instances.jsonl")
    assert script.row_for("system prompt ... " + row["problem_statement"]) == row
    seen = {}
    for seed in range(40):
        first, said = _episode(script, row, seed)
        plan = "give_up" if "submit" in first else "test_then_solve" if policy.SWE_TEST_COMMAND in first else "solve"
        seen[plan] = report.swe_expected(row, out / "repos", _trace(said))
    assert seen == {"solve": 1.0, "test_then_solve": 1.0, "give_up": 0.0}


def test_hunk_edits_apply_the_patch(mini: tuple[Path, dict]) -> None:
    """The gold patch's hunks as (path, old, new): replacing old by new once turns the base file into the fixed one."""
    out, row = mini
    edits = policy.hunk_edits(row["patch"])
    assert [p for p, _, _ in edits] == ["ministats/stats.py"]
    import subprocess

    mirror = out / "repos" / row["repo"].replace("/", "__")
    text = subprocess.run(
        ["git", "-C", str(mirror), "show", f"{row['base_commit']}:ministats/stats.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    for _, old, new in edits:
        assert text.count(old) == 1
        text = text.replace(old, new, 1)
    assert "return (s[mid - 1] + s[mid]) / 2" in text


def test_a_wrong_edit_is_expected_unresolved(mini: tuple[Path, dict]) -> None:
    out, row = mini
    ((path, old, new),) = policy.hunk_edits(row["patch"])
    wrong = policy.tool_call("edit", {"path": path, "old_str": old, "new_str": new.replace("/ 2", "/ 3")})
    assert report.swe_expected(row, out / "repos", _trace([wrong])) == 0.0


def test_swe_arm_composes_a1_with_the_overlay_and_feeds_the_policy() -> None:
    spec = rehearse.ARMS["swe"]
    assert spec.swe and spec.policy == "script"
    assert [f.name for f in spec.files] == ["a0_rlvr.toml", "a1_dr_grpo.toml", "cpu.toml", "swebench.toml"]
    import tomllib

    overlay = tomllib.loads((REHEARSE / "swebench.toml").read_text())
    (source,) = overlay["orchestrator"]["train"]["source"]
    assert source["env"]["taskset"]["id"] == "swebench-lite"
    assert source["env"]["taskset"]["dataset"] == "swe-mini/instances.jsonl"  # where prepare() writes the fixture


def test_chat_completions_round_trip_the_scripted_turns() -> None:
    """prime-rl's eval client has no renderer: the scripted turn goes out as OpenAI tool calls (broken JSON passed on
    as written) and comes back in the next request's history as the ChatML text the policy reads its plan from."""
    text = "Let me check.\n" + policy.tool_call("bash", {"command": "python3 -c 'import x'"})
    text += "\n" + policy.tool_call("edit", '{"path": "a.py", "old_str": ')
    content, calls = policy.split_tool_calls(text)
    assert content == "Let me check."
    assert calls == [
        ("bash", json.dumps({"command": "python3 -c 'import x'"})),
        ("edit", '{"path": "a.py", "old_str": '),
    ]
    wire = [
        {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": a}} for i, (n, a) in enumerate(calls)
    ]
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "task"}]},
        {"role": "assistant", "content": content, "tool_calls": wire},
        {"role": "tool", "tool_call_id": "c0", "content": "Traceback"},
    ]
    history = policy.messages_of(policy.chatml(messages))
    assert [role for role, _ in history] == ["system", "user", "assistant", "tool"]
    assert history[1][1] == "task"
    assert history[2][1] == text  # the same text the renderer path shows the policy


def test_replay_groups_hold_both_kinds_of_answer(tmp_path: Path) -> None:
    """Four answers at one state (a group) always include the unrelated command and a recorded teacher action, so
    the live arms' teachers (who all answer the unrelated command) give a group rewards that differ."""
    states = tmp_path / "states.jsonl"
    states.write_text(json.dumps({"state_id": "s", "messages": [{"role": "user", "content": "hi"}]}) + "\n")
    journal = tmp_path / "journal.jsonl"
    action = {"text": "", "tool_calls": [{"name": "bash", "arguments": '{"command": "ls"}'}]}
    journal.write_text(json.dumps({"state_id": "s", "ok": True, "action": action}) + "\n")
    script, rng = policy.ReplayScript(states, journal), random.Random(0)
    for _ in range(3):
        plans = {script.next_turn({"state_id": "s"}, rng).plan for _ in range(4)}
        assert plans == {"replay_other", "replay_teacher"}
