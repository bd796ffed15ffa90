"""Opt-in: the CPU rehearsal of a real prime-rl run (scripts/rehearse/run.sh): ladder arms A0–A4, the swebench-lite
arm, the relayed arm and the live arms (A2/A3/A4 with the live teacher pool and the LLM hint writer) with the scripted
policy, and the learning arms (sampling policy, echo taskset) through benchmarks/rehearsal_learning.py.

prime-rl's own orchestrator and env-server processes run from the checkout at ``CRF_PRIME_RL_SRC`` in a venv built
from its ``uv.lock`` (verifiers from ``CRF_VERIFIERS_SRC``, the commit prime-rl pins); the inference server and the
trainer are CPU stand-ins speaking prime-rl's protocols. Takes several minutes (more on a loaded machine); the venv is
built once under ``~/.cache/crf-prime/rehearsal-venv`` (``CRF_REHEARSAL_VENV``).

    CRF_PRIME_RL_SRC=/path/to/prime-rl CRF_VERIFIERS_SRC=/path/to/verifiers pytest tests/rehearsal -m prime_rl
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.prime_rl, pytest.mark.slow, pytest.mark.bwrap]


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory: pytest.TempPathFactory) -> dict:
    verifiers_src = os.environ.get("CRF_VERIFIERS_SRC")
    if not verifiers_src or not (Path(verifiers_src) / "verifiers" / "v1").is_dir():
        pytest.skip("needs CRF_VERIFIERS_SRC: the verifiers checkout prime-rl pins (its deps/verifiers)")
    work = tmp_path_factory.mktemp("rehearsal")
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "rehearse" / "run.sh"), "--work", str(work), "--steps", "5"],
        capture_output=True,
        text=True,
        timeout=9000,
    )
    report_path = work / "report.json"
    assert report_path.is_file(), f"no report (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    report = json.loads(report_path.read_text())
    report["returncode"], report["stdout"] = proc.returncode, proc.stdout
    return report


def _arm(report: dict, name: str) -> dict:
    return next(a for a in report["arms"] if a["arm"] == name)


@pytest.mark.timeout(9000)
def test_rehearsal_passes_its_checks(rehearsal: dict) -> None:
    assert rehearsal["returncode"] == 0, rehearsal["stdout"][-4000:]
    assert "all checks passed" in rehearsal["stdout"]
    assert [a["arm"] for a in rehearsal["arms"]] == ALL_ARMS


ALL_ARMS = ["a0", "a1", "a2", "a3", "a4", "swe", "relay", "a2-live", "a3-live", "a4-live"]


@pytest.mark.timeout(9000)
@pytest.mark.parametrize("arm", ALL_ARMS)
def test_each_arm_trains_five_steps_on_graded_rollouts(rehearsal: dict, arm: str) -> None:
    report = _arm(rehearsal, arm)
    assert report["status"] == "ok"
    assert report["leftover_processes"] == []
    assert [row["step"] for row in report["steps"]] == list(
        range(1, (8 if arm.startswith("a4") else 5) + 1)
    )  # A4: min_steps
    assert sum(row["regrade"]["checked"] for row in report["steps"]) > 0
    for row in report["steps"]:
        trainer = row["trainer"]
        assert trainer is not None and trainer["finite"], row
        assert sum(trainer["samples_per_source"].values()) > 0
        # the trainer stand-in runs the broadcast weights the inference stand-in sampled with
        assert trainer["mismatch_abs_max"] < 1e-2
        assert row["regrade"]["equal"] == row["regrade"]["checked"], row["regrade"]["mismatches"]


@pytest.mark.timeout(9000)
def test_swebench_lite_rewards_are_the_gold_trees_and_both_outcomes_occur(rehearsal: dict) -> None:
    report = _arm(rehearsal, "swe")
    rewards = [r for row in report["steps"] for r in row["sources"].get("swebench-lite", {}).get("rewards", [])]
    assert set(rewards) == {0.0, 1.0}, rewards  # resolved by the gold patch, unresolved when the policy gives up


@pytest.mark.timeout(9000)
def test_a0_eval_pass_runs_and_crf_prime_report_reads_the_run_dir(rehearsal: dict) -> None:
    e = _arm(rehearsal, "a0")["eval"]
    assert len(e["steps"]) >= 2  # v0 and a later policy
    assert e["exit"] == 0 and (Path(e["dir"]) / "report.md").is_file()


@pytest.mark.timeout(9000)
def test_relayed_arm_loads_only_relayed_weights(rehearsal: dict) -> None:
    relay = _arm(rehearsal, "relay")["relay"]
    assert relay["node_copies_separate"] and relay["node_steps"]
    assert all(u["equal"] is not False for u in relay["updates"])
    assert sum(u["equal"] is True for u in relay["updates"]) >= 1


@pytest.mark.timeout(9000)
@pytest.mark.parametrize("arm", ["a3-live", "a4-live"])
def test_live_pool_is_asked_from_the_env_servers_within_a_cap_that_binds(rehearsal: dict, arm: str) -> None:
    replay = _arm(rehearsal, arm)["live"]["replay"]
    assert replay["ok"] > 0
    assert replay["cost_usd"] <= replay["cap_usd"]
    assert replay["calls"] < replay["calls_without_cap"]


@pytest.mark.timeout(9000)
@pytest.mark.parametrize("arm", ["a2-live", "a4-live"])
def test_llm_hint_writer_writes_hints_from_the_env_servers(rehearsal: dict, arm: str) -> None:
    hints = _arm(rehearsal, arm)["live"]["hints"]
    assert hints["ok"] > 0 and hints["llm_hints"] > 0
    assert hints["cost_usd"] <= hints["cap_usd"]


@pytest.mark.timeout(9000)
def test_a2_hint_source_is_distilled_against_hint_conditioned_logprobs(rehearsal: dict) -> None:
    report = _arm(rehearsal, "a2")
    assert report["hint_sources"] == ["featdel-hints"]
    distilled = [row["trainer"]["distill"] for row in report["steps"]]
    assert sum(d["samples"] for d in distilled) > 0
    assert all(d["ref_differs_from_inference"] > 0 for d in distilled if d["samples"])
    assert sum(row["hints"]["samples"] for row in report["steps"]) > 0


@pytest.mark.timeout(9000)
def test_a3_replay_source_is_rewarded_by_teacher_agreement(rehearsal: dict) -> None:
    report = _arm(rehearsal, "a3")
    rewards = [r for row in report["steps"] for r in row["sources"].get("replay", {}).get("rewards", [])]
    assert rewards, "no replay rollouts reached the trainer"
    assert all(0.0 <= r <= 1.0 for r in rewards)
    assert len(set(rewards)) > 1, f"replay rewards do not vary: {rewards}"


@pytest.mark.timeout(9000)
def test_a2_distils_error_turns_only_and_never_an_empty_hint(rehearsal: dict) -> None:
    """Issue 12: every distilled token lies in a turn the scripted policy erred in, no distilled sample has an empty
    hint, the configured share is the composed config's ratio·group_size share, and a dropped tool call is found."""
    report = _arm(rehearsal, "a2")
    assert report["configured_hint_share"] == 0.5  # featdel 1·4 (cpu.toml's group) vs featdel-hints 4·1
    for row in report["steps"]:
        distill = row["trainer"]["distill"]
        assert distill["tokens_in_error_turns"] == distill["tokens"], row
        assert row["hints"]["empty"] == 0, row
    invalid_json = report["detector"]["invalid_json"]
    assert invalid_json["tp"] > 0 and invalid_json["fn"] == 0


@pytest.fixture(scope="module")
def learning(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """benchmarks/rehearsal_learning.py over every learning arm (prime-rl's default loss and each objective)."""
    if not os.environ.get("CRF_VERIFIERS_SRC"):
        pytest.skip("needs CRF_VERIFIERS_SRC: the verifiers checkout prime-rl pins (its deps/verifiers)")
    work = tmp_path_factory.mktemp("learning")
    venv = Path(os.environ.get("CRF_REHEARSAL_VENV", Path.home() / ".cache/crf-prime/rehearsal-venv"))
    subprocess.run(["bash", str(REPO / "scripts" / "rehearse" / "build_venv.sh")], check=True, timeout=3600)
    proc = subprocess.run(
        [str(venv / "bin" / "python"), str(REPO / "benchmarks" / "rehearsal_learning.py"), "--work", str(work)],
        capture_output=True,
        text=True,
        timeout=5400,
    )
    path = work / "learning" / "learning.json"
    assert path.is_file(), f"no learning table (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return {"returncode": proc.returncode, "stdout": proc.stdout, **json.loads(path.read_text())}


@pytest.mark.timeout(5400)
def test_every_objective_raises_reward_beyond_the_bootstrap_ci(learning: dict) -> None:
    assert set(learning["arms"]) == {
        "learn-a0",
        *(f"learn-{o}" for o in ("ppo_clip", "dr_grpo", "dapo", "gspo", "cispo")),
    }
    for arm, row in learning["arms"].items():
        assert row["last"]["low"] > row["first"]["high"], (arm, row["first"], row["last"])
    assert learning["returncode"] == 0, learning["stdout"][-4000:]


@pytest.mark.timeout(5400)
def test_learning_arms_run_off_policy_and_clip(learning: dict) -> None:
    for arm, row in learning["arms"].items():
        assert row["off_policy"]["mismatch_kl_max"] > 0, arm  # stale rollouts: ratios differ from 1
        assert row["objective_losses_distinct_max"] > 1, arm  # the objectives differ on one batch
    for objective in ("ppo_clip", "dr_grpo", "dapo", "gspo", "cispo"):
        assert learning["arms"][f"learn-{objective}"]["off_policy"]["clip_frac_max"] > 0, objective
