"""Journal rows, torn tails after kill -9, group commit, and teacher config loading errors."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from teachers_helpers import bash

from crf_prime.records.journal import JournalError, JournalRecord, read_journal
from crf_prime.teachers.config import ConfigError, load_pool_config
from crf_prime.teachers.journal import GroupCommit, Journal


def rec(state: str, teacher: str = "a", ok: bool = True) -> JournalRecord:
    return JournalRecord(
        state_id=state,
        teacher=teacher,
        model="m",
        model_family="f",
        ok=ok,
        action=bash("ls") if ok else None,
        input_tokens=10,
        output_tokens=2,
        cost_usd=0.001,
        latency_s=0.5,
        attempt=1,
        ts=1.0,
    )


def test_round_trip_and_torn_last_line_is_ignored_then_repaired(tmp_path):
    path = tmp_path / "journal.jsonl"
    j = Journal(path)
    j.append(rec("s1"))
    j.append(rec("s2", ok=False))
    j.close()
    with path.open("ab") as f:  # what kill -9 in the middle of a write leaves behind
        f.write(rec("s3").model_dump_json().encode()[:40])
    assert [r.state_id for r in read_journal(path)] == ["s1", "s2"]
    j = Journal(path)  # reopening cuts the torn tail so the next row starts on its own line
    j.append(rec("s4"))
    j.close()
    rows = list(read_journal(path))
    assert [r.state_id for r in rows] == ["s1", "s2", "s4"]
    assert rows[0] == rec("s1") and rows[0].action == bash("ls")


def test_corrupt_line_in_the_middle_names_file_and_line(tmp_path):
    path = tmp_path / "journal.jsonl"
    path.write_text(rec("s1").model_dump_json() + "\n{not json}\n" + rec("s2").model_dump_json() + "\n")
    with pytest.raises(JournalError, match=rf"{path}:2: not a valid JournalRecord row"):
        list(read_journal(path))


async def test_group_commit_writes_every_line_once(tmp_path):
    path = tmp_path / "journal.jsonl"
    j = Journal(path)
    g = GroupCommit(j)
    await asyncio.gather(*(g.append(Journal.line(rec(f"s{i}"))) for i in range(50)))
    j.close()
    assert sorted(r.state_id for r in read_journal(path)) == sorted(f"s{i}" for i in range(50))


async def test_group_commit_over_two_logs_puts_each_line_in_its_own_file_once(tmp_path):
    from crf_prime.teachers.journal import Intent, IntentLog, intents_path, read_intents

    path = tmp_path / "journal.jsonl"
    j, il = Journal(path), IntentLog(intents_path(path))
    g = GroupCommit(il, j)
    intent = lambda i: IntentLog.line(Intent(state_id=f"s{i}", teacher="a", ts=0.0))  # noqa: E731
    await asyncio.gather(
        *(g.append(intent(i), il) for i in range(30)), *(g.append(Journal.line(rec(f"s{i}")), j) for i in range(30))
    )
    j.close()
    il.close()
    assert sorted(r.state_id for r in read_journal(path)) == sorted(f"s{i}" for i in range(30))
    assert sorted(r.state_id for r in read_intents(intents_path(path))) == sorted(f"s{i}" for i in range(30))


def test_example_config_loads():
    cfg = load_pool_config(Path(__file__).parents[2] / "configs" / "teachers.toml")
    assert [t.name for t in cfg.teachers] == ["qwen-coder", "deepseek", "claude-sonnet"]
    assert all(t.base_url == "https://openrouter.ai/api/v1" for t in cfg.teachers)
    assert [t.tier for t in cfg.teachers] == [0, 0, 1] and cfg.pool.votes.exclude_same_family


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[[teachers]]\nname = "a"\nmodel = "m"\n', "teachers[0 name='a'].base_url: Field required"),
        ('[[teachers]]\nname = "a"\nmodel = "m"\nbase_url = "u"\ncolour = 1\n', "teachers[0 name='a'].colour"),
        ("[budget]\njob_usd = 1\n", "teachers: Field required"),
        (
            '[[teachers]]\nname = "a"\nmodel = "m"\nbase_url = "u"\n[[teachers]]\nname = "a"\nmodel = "m"\nbase_url = "u"\n',
            "repeated: a",
        ),
        ("[[teachers]\n", "invalid TOML"),
        # a consensus is the pair builder's setting: the pool would ignore it, so it is refused at launch
        (
            '[[teachers]]\nname = "a"\nmodel = "m"\nbase_url = "u"\n[pool.votes]\nthreshold = 0.6\n',
            "pool.votes.threshold",
        ),
    ],
)
def test_config_errors_name_file_and_field(tmp_path, text, expected):
    path = tmp_path / "teachers.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_pool_config(path)
    assert str(path) in str(e.value) and expected in str(e.value)


def test_missing_api_key_names_the_variable(tmp_path, monkeypatch):
    path = tmp_path / "teachers.toml"
    path.write_text('[[teachers]]\nname = "a"\nmodel = "m"\nbase_url = "u"\napi_key_var = "CRF_NOPE_KEY"\n')
    monkeypatch.delenv("CRF_NOPE_KEY", raising=False)
    with pytest.raises(ConfigError, match="CRF_NOPE_KEY"):
        load_pool_config(path).teachers[0].api_key()
