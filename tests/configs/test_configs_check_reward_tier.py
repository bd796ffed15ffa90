"""``crf-prime check`` refuses a content-blind tier as the trace-replay reward's tier (exit 1, the key named)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ladder_arms import LADDER, rl_args

from crf_prime.check import CheckConfig, check
from crf_prime.cli import main

A3 = rl_args("A3")
KEY = "orchestrator.train.source[1].env.taskset.task.votes.tier"


def _overlay(tmp_path: Path, tier: str) -> Path:
    overlay = tmp_path / "tier.toml"
    overlay.write_text(
        (LADDER / "a3_replay.toml").read_text()
        + f'\n[orchestrator.train.source.env.taskset.task.votes]\ntier = "{tier}"\nthreshold = 0.6\n'
    )
    return overlay


@pytest.mark.parametrize("tier", ["key_args", "text"])
def test_content_blind_reward_tier_is_a_problem(launch: Path, tmp_path: Path, tier: str) -> None:
    report = check([*A3, "@", str(_overlay(tmp_path, tier))], CheckConfig(base_dir=launch, prime_rl="skip"))
    assert [p.key for p in report.problems] == [KEY]
    assert f"{tier!r} ignores what an edit, write or finish says" in report.problems[0].message


@pytest.mark.parametrize("tier", ["content", "exact"])
def test_content_aware_reward_tier_is_ready(launch: Path, tmp_path: Path, tier: str) -> None:
    report = check([*A3, "@", str(_overlay(tmp_path, tier))], CheckConfig(base_dir=launch, prime_rl="skip"))
    assert report.problems == []


def test_cli_exits_1_naming_the_tier(launch: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["check", "--check.base-dir", str(launch), "--check.prime-rl", "skip"]
    assert main([*base, *A3, "@", str(_overlay(tmp_path, "content"))]) == 0
    capsys.readouterr()
    assert main([*base, *A3, "@", str(_overlay(tmp_path, "key_args"))]) == 1
    out = capsys.readouterr().out
    assert f"error: {KEY}: Value error, 'key_args' ignores what an edit, write or finish says" in out
    assert "crf-prime check: 1 problem(s)" in out
