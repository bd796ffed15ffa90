"""The rehearsal's live and relayed arms without prime-rl: the overlay the live arms compose (replay source on the live
pool, hint sources with the LLM hint writer), the teachers files they run against, and the relay's node layout."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from rehearse_support import REHEARSE, load_script

from crf_prime.hints.models import HintWriterConfig
from crf_prime.teachers.config import load_pool_config

rehearse = load_script("rehearsal_rehearse_live", REHEARSE / "rehearse.py")


def _sources(arm: str, tmp_path: Path) -> dict[str, dict]:
    path = rehearse.live_overlay(rehearse.ARMS[arm].files, tmp_path / arm)
    return {s["name"]: s for s in json.loads(path.read_text())["orchestrator"]["train"]["source"]}


def test_a4_live_overlay_restates_every_source_with_the_live_pool_and_the_hint_writer(tmp_path: Path) -> None:
    sources = _sources("a4-live", tmp_path)
    assert list(sources) == ["featdel", "featdel-hints", "replay"]  # the arm's list, whole and in order
    replay = sources["replay"]["env"]["taskset"]
    assert "journal" not in replay and replay["task"]["live_pool"] == rehearse.LIVE_POOL
    writer = HintWriterConfig.model_validate(sources["featdel-hints"]["env"]["taskset"]["task"]["hint_writer"])
    assert writer.live == rehearse.HINT_POOL and writer.budget_usd == rehearse.LIVE_HINT_BUDGET_USD
    assert writer.teachers == tmp_path / "a4-live" / "hint-teachers.toml"
    assert sources["featdel-hints"]["env"]["taskset"]["task"]["hint_target"] == "error_turns"  # kept
    assert "hint_writer" not in sources["featdel"]["env"]["taskset"].get("task", {})


@pytest.mark.parametrize(("arm", "replay", "hints"), [("a2-live", False, True), ("a3-live", True, False)])
def test_a2_and_a3_live_overlays_touch_only_their_channel(tmp_path: Path, arm: str, replay: bool, hints: bool) -> None:
    sources = _sources(arm, tmp_path)
    assert any(s["env"]["taskset"].get("task", {}).get("live_pool") for s in sources.values()) is replay
    assert any(s["env"]["taskset"].get("task", {}).get("hint_writer") for s in sources.values()) is hints


def test_teachers_files_parse_price_every_teacher_and_cap_the_budget(tmp_path: Path) -> None:
    path = tmp_path / "teachers.toml"
    path.write_text(rehearse.teachers_toml(list(rehearse.LIVE_TEACHERS), "http://127.0.0.1:1", 0.009, 64))
    pool = load_pool_config(path)
    assert [t.name for t in pool.teachers] == [n for n, _ in rehearse.LIVE_TEACHERS]
    assert pool.budget.job_usd == 0.009
    assert all(t.base_url == "http://127.0.0.1:1/v1" and t.price_out_per_mtok > 0 for t in pool.teachers)
    assert {t.sampling.max_tokens for t in pool.teachers} == {64}
    # no teacher of the fixture traces' own family: every teacher votes, so the cap is what limits the calls
    assert "anthropic" not in {t.model_family for t in pool.teachers}


def test_the_replay_cap_admits_a_first_call_anywhere_and_about_one_call_at_a_time(tmp_path: Path) -> None:
    """On the fixture's states, priced as the pool prices a call (its worst case): a first call at any state fits the
    empty budget, two calls' worst cases never fit together, so the spend of a few calls makes the cap refuse."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "traces"))
    from replay_support import fixture_states

    from crf_prime.teachers.money import Content, worst_case_usd

    path = tmp_path / "teachers.toml"
    path.write_text(
        rehearse.teachers_toml(
            list(rehearse.LIVE_TEACHERS),
            "http://127.0.0.1:1",
            rehearse.LIVE_REPLAY_BUDGET_USD,
            rehearse.LIVE_MAX_TOKENS["replay"],
        )
    )
    teacher = load_pool_config(path).teachers[0]
    worst = []
    for state in fixture_states():
        worst.append(worst_case_usd(teacher, b"{}", Content.of(list(state.messages), list(state.tools))))
    assert max(worst) <= rehearse.LIVE_REPLAY_BUDGET_USD < 2 * min(worst)


def test_relay_node_dir_is_outside_the_run_dir_and_the_arm_routes_admin_calls_to_the_gate() -> None:
    run = rehearse.Launched("relay", 3, Path("/w/outputs/rehearsal-relay"), {}, [], None, "m", 0.0)
    node = rehearse.node_dir(run)
    assert node == Path("/w/outputs/rehearsal-relay-node/broadcasts")
    assert not node.is_relative_to(run.run_dir)  # the launcher's --clean must not empty it
    assert rehearse.ARMS["relay"].relay and not rehearse.ARMS["relay"].live
