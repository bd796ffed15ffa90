"""Pair construction from a real journal (teachers' Journal writer) over states ingested from fixtures."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from crf_prime.cli import main
from crf_prime.pairs import FilterConfig, PairConfig, PreferencePair, build_pairs, compute_stats, normalise_pairs
from crf_prime.pairs.io import read_pairs_jsonl, to_hf_dataset
from crf_prime.records.journal import JournalRecord, read_journal
from crf_prime.records.models import Action, ToolCall
from crf_prime.teachers.journal import Journal
from crf_prime.traces import ingest

FIX = Path(__file__).parents[1] / "traces" / "fixtures"
TEACHERS = {
    "gpt": ("gpt-5", "openai"),
    "qwen": ("qwen3-coder", "qwen"),
    "gemini": ("gemini-2.5-pro", "google"),
    "claude": ("claude-opus-4", "anthropic"),
}


def act(name: str, args: dict, text: str = "") -> Action:
    return Action(text=text, tool_calls=(ToolCall(id="t", name=name, arguments=json.dumps(args)),))


def rec(state_id: str, teacher: str, action: Action | None, *, ok: bool = True, ts: float = 1.0) -> JournalRecord:
    model, fam = TEACHERS[teacher]
    return JournalRecord(
        state_id=state_id, teacher=teacher, model=model, model_family=fam, ok=ok, action=action,
        error="" if ok else "HTTP 500", input_tokens=100, output_tokens=10, cost_usd=0.001, latency_s=0.1, attempt=1, ts=ts,
    )  # fmt: skip


@pytest.fixture
def states():
    return list(ingest([FIX / "claude_code_session.jsonl"]))


@pytest.fixture
def journal(tmp_path: Path, states) -> Path:
    """Votes at the 5 Claude Code states (student family: anthropic, so 'claude' is excluded everywhere)."""
    s = [x.state_id for x in states]
    path = tmp_path / "journal.jsonl"
    j = Journal(path)
    rows = [
        # s0: student Read tests/test_parse.py; gpt + qwen agree (other spellings), gemini lists files -> student > minority
        rec(s[0], "gpt", act("str_replace_editor", {"command": "view", "path": "/home/dev/proj/tests/test_parse.py"})),
        rec(s[0], "qwen", act("bash", {"command": "cat /home/dev/proj/tests/test_parse.py"})),
        rec(s[0], "gemini", act("bash", {"command": "ls -R"})),
        rec(s[0], "claude", act("bash", {"command": "ls -R"})),
        # s1: student runs pytest + grep in parallel; gpt + qwen only run pytest, gemini does what the student did
        rec(s[1], "gpt", act("execute_bash", {"command": "python -m pytest tests/test_parse.py -q"})),
        rec(s[1], "qwen", act("bash", {"command": "cd /home/dev/proj && pytest tests/test_parse.py -q"})),
        rec(s[1], "gemini", states[1].student_action),
        # s2: one failed call, one answer -> too few voters
        rec(s[2], "gpt", None, ok=False),
        rec(s[2], "qwen", act("Edit", {"file_path": "/home/dev/proj/proj/parse.py", "old_string": "x"})),
        # s3: three different actions -> no consensus
        rec(s[3], "gpt", act("bash", {"command": "pytest -q"})),
        rec(s[3], "qwen", act("bash", {"command": "tox"})),
        rec(s[3], "gemini", act("bash", {"command": "make test"})),
        # s4: an earlier failed retry of gpt is superseded by its later ok answer; everyone agrees (exact text)
        rec(s[4], "gpt", None, ok=False, ts=1.0),
        rec(s[4], "gpt", Action(text="All 12 tests pass; the empty-input bug is fixed."), ts=2.0),
        rec(s[4], "qwen", Action(text="all 12 tests pass;  the empty-input bug is fixed.")),
    ]
    for r in rows:
        j.append(r)
    j.close()
    return path


def test_build_pairs_kinds_margins_and_exclusion(states, journal: Path) -> None:
    votes: list = []
    pairs = list(build_pairs(states, read_journal(journal), PairConfig(), votes_out=votes))
    assert [(p.kind, p.state_id) for p in pairs] == [
        ("student_over_minority", states[0].state_id),
        ("majority_over_student", states[1].state_id),
    ]
    p0, p1 = pairs
    assert p0.chosen == [states[0].student_action.to_message()]
    assert json.loads(p0.rejected[0]["tool_calls"][0]["function"]["arguments"]) == {"command": "ls -R"}
    assert p0.chosen_by == ["student", "gpt", "qwen"] and p0.rejected_by == ["gemini"]
    assert p0.margin == pytest.approx(1 / 3) and p0.voters == 3
    assert p0.prompt == [dict(m) for m in states[0].messages] and p0.tools == [dict(t) for t in states[0].tools]
    # chosen = the plurality cluster's first teacher (by name)
    assert p1.chosen[0]["tool_calls"][0]["function"]["name"] == "execute_bash"
    assert p1.rejected == [states[1].student_action.to_message()]
    assert p1.chosen_by == ["gpt", "qwen"] and p1.rejected_by == ["student", "gemini"]
    assert p1.margin == pytest.approx(1 / 3)
    assert [v.excluded for v in votes] == [["claude"], [], [], [], []]
    assert [v.consensus for v in votes] == [0, 0, None, None, 0]


def test_thresholds_are_configurable(states, journal: Path) -> None:
    # same-family teacher kept: at s0 claude joins gemini -> 2 vs 2 tie -> no consensus, no pair
    pairs = list(build_pairs(states, read_journal(journal), PairConfig(exclude_same_family=False)))
    assert [p.state_id for p in pairs] == [states[1].state_id]
    # only majority > student pairs
    pairs = list(build_pairs(states, read_journal(journal), PairConfig(student_over_minority=False)))
    assert [p.kind for p in pairs] == ["majority_over_student"]
    # a 2/3 threshold with min_support 1 still lets s0/s1 through; min_teachers 1 makes s2 a (student agrees) state
    votes: list = []
    list(
        build_pairs(
            states, read_journal(journal), PairConfig(threshold=0.67, min_support=1, min_teachers=1), votes_out=votes
        )
    )
    assert [v.consensus for v in votes] == [None, None, 0, None, 0]
    # exact tier: at s1 gpt's "python -m pytest" and qwen's "cd && pytest" no longer match -> no consensus
    votes = []
    list(build_pairs(states, read_journal(journal), PairConfig(tier="exact"), votes_out=votes))
    assert votes[1].consensus is None


def test_stats_signal_density(states, journal: Path) -> None:
    votes: list = []
    pairs = list(build_pairs(states, read_journal(journal), PairConfig(), votes_out=votes))
    st = compute_stats(votes, pairs, seed=0)
    assert st.states_voted == 5 and st.states_with_consensus == 3 and st.student_agrees == 2
    assert st.pairs_by_kind == {"student_over_minority": 1, "majority_over_student": 1}
    assert st.traces_with_pairs == 1 and st.pairs_per_trace_max == 2 and st.pairs_per_trace_mean == 2.0
    # gpt matches the student at s0, s3 ("pytest -q" ~ "python -m pytest -q") and s4 of its 4 answers
    assert st.teacher_agreement_with_student == {"gemini": 1 / 3, "gpt": 3 / 4, "qwen": 2 / 5}
    assert st.teacher_agreement_with_consensus == {"gemini": 0.0, "gpt": 1.0, "qwen": 1.0}
    assert st.excluded_same_family == {"claude": 1}
    assert st.pair_margin_mean == pytest.approx(1 / 3) and st.pair_chosen_wins == 1.0
    # random pairs at the 4 states with >= 2 candidates: mean margin bounded by the built pairs' margin
    assert st.random_pairs == 4
    assert st.random_chosen_wins < st.pair_chosen_wins


def _pair(prompt, chosen, rejected, state="s") -> PreferencePair:
    return PreferencePair(prompt=prompt, chosen=[chosen], rejected=[rejected], state_id=state, kind="majority_over_student", margin=0.5, chosen_by=["a"], rejected_by=["student"], voters=2)  # fmt: skip


def test_normalisation_pass_counts() -> None:
    prompt = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    ls = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}],
    }
    pwd = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "2", "type": "function", "function": {"name": "bash", "arguments": '{"command": "pwd"}'}}
        ],
    }
    bad_json = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "3", "type": "function", "function": {"name": "bash", "arguments": '{"command": '}}],
    }
    orphan = [*prompt, {"role": "tool", "tool_call_id": "zz", "content": "x"}]
    pairs = [
        _pair(prompt, ls, pwd),
        _pair(prompt, ls, pwd),  # duplicate
        _pair(prompt, ls, {"role": "assistant", "content": ""}),  # empty
        _pair(prompt, ls, {"role": "assistant", "content": None, "tool_calls": ls["tool_calls"]}),  # identical
        _pair([*prompt[:1], {"role": "user", "content": "x" * 500}], ls, pwd),  # prompt too long
        _pair(prompt, {"role": "assistant", "content": "y" * 300}, pwd),  # action too long
        _pair(prompt, bad_json, pwd),  # invalid template: arguments not JSON
        _pair(orphan, ls, pwd),  # invalid template: tool result without a call
        _pair([prompt[1], prompt[0]], ls, pwd),  # invalid template: system not first
    ]
    counts: Counter[str] = Counter()
    kept = list(normalise_pairs(pairs, FilterConfig(max_prompt_chars=100, max_action_chars=200), counts))
    assert len(kept) == 1
    assert counts == {
        "kept": 1,
        "duplicate": 1,
        "empty_action": 1,
        "identical": 1,
        "prompt_too_long": 1,
        "action_too_long": 1,
        "invalid_template": 3,
    }
    # a real renderer can veto too
    counts = Counter()

    def render(messages, tools):
        raise ValueError("template says no")

    assert list(normalise_pairs(pairs[:1], counts=counts, render=render)) == []
    assert counts == {"invalid_template": 1}


def test_hf_dataset(states, journal: Path) -> None:
    pairs = list(build_pairs(states, read_journal(journal)))
    ds = to_hf_dataset(pairs)
    assert ds.num_rows == 2
    assert set(ds.column_names) >= {"prompt", "chosen", "rejected", "tools"}
    assert ds[1]["chosen"][0]["tool_calls"][0]["function"]["name"] == "execute_bash"
    assert ds[0]["prompt"][0]["role"] == "system"
    assert json.loads(ds[0]["tools"]) == pairs[0].tools


def test_cli_pairs(tmp_path: Path, states, journal: Path, capsys: pytest.CaptureFixture[str]) -> None:
    states_path = tmp_path / "states.jsonl"
    states_path.write_text("".join(s.model_dump_json() + "\n" for s in states))
    out, stats_out = tmp_path / "pairs.jsonl", tmp_path / "stats.json"
    rc = main(
        [
            "pairs",
            "--journal",
            str(journal),
            "--states",
            str(states_path),
            "--out",
            str(out),
            "--stats-out",
            str(stats_out),
            "--hf-dataset",
            str(tmp_path / "ds"),
        ]
    )
    assert rc == 0
    assert [p.kind for p in read_pairs_jsonl(out)] == ["student_over_minority", "majority_over_student"]
    assert json.loads(stats_out.read_text())["states_with_consensus"] == 3
    assert (tmp_path / "ds" / "dataset_info.json").exists()
    err = capsys.readouterr().err
    assert "pairs written" in err and "excluded (same family): claude" in err
    # bad states file -> error naming file:line, nothing written
    bad = tmp_path / "bad_states.jsonl"
    bad.write_text('{"nope": 1}\n')
    assert main(["pairs", "--journal", str(journal), "--states", str(bad), "--out", str(tmp_path / "p2.jsonl")]) == 2
    assert "bad_states.jsonl:1" in capsys.readouterr().err
    assert not (tmp_path / "p2.jsonl").exists()


def test_pairs_help_names_provenance(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pairs", "--help"]) == 0
    assert "not part of Cursor's" in " ".join(capsys.readouterr().out.split())
