"""Opt-in: each ladder arm, composed exactly as `uv run rl @ a.toml @ b.toml` composes it, validates as prime-rl's
real `RLConfig` (packages/prime-rl-configs), with the environments resolved by id through verifiers' loaders.

Enable with CRF_PRIME_RL_SRC=/path/to/prime-rl (a source checkout) and `pip install 'crf-prime[prime-rl]'` plus the
packages prime_rl.configs.rl imports (verifiers, renderers). The environments are imported from environments/*
(their source directories go on sys.path), so they need not be installed.
"""

from __future__ import annotations

import json
import sys

import pytest
from ladder_arms import ARMS, rl_args
from prime_rl_support import prime_rl_on_path

from crf_prime.hints import HINT_KEY

pytestmark = pytest.mark.prime_rl


@pytest.fixture(scope="module")
def load_rl_config():
    with prime_rl_on_path(environments=True):
        from prime_rl.configs.rl import RLConfig
        from pydantic_config import cli

        yield lambda arm: cli(RLConfig, args=rl_args(arm))


def train_sources(cfg) -> list[tuple[str, str, str]]:
    return [(s.resolved_name, s.env.taskset.id, s.algo.type if s.algo else "") for s in cfg.orchestrator.train.source]


def load(load_rl_config, arm: str):
    try:
        return load_rl_config(arm)
    except SystemExit as e:  # pydantic_config prints the validation error and exits
        pytest.fail(f"{arm} ({' '.join(rl_args(arm))}) does not validate as RLConfig: exit {e.code}")


@pytest.mark.parametrize("arm", [a for a in ARMS if a.startswith("A")])
def test_arm_validates_as_rl_config(load_rl_config, arm: str):
    cfg = load(load_rl_config, arm)
    assert cfg.orchestrator.algo.type == "grpo"
    expected_loss = "default" if arm == "A0" else "custom"
    assert cfg.trainer.loss.type == expected_loss
    if expected_loss == "custom":
        assert cfg.trainer.loss.import_path == "loss_fns.policy.dr_grpo"
    featdel = cfg.orchestrator.train.source[0]
    # the id resolves to this repo's environment, and the taskset's bundled harness (crf-prime's) is the default
    from verifiers.v1.utils.loaders import taskset_class

    assert taskset_class(featdel.env.taskset.id).__module__.split(".")[0] == "feature_deletion"
    assert featdel.env.agent_harnesses()["agent"].id == "crf-sandbox"
    assert type(featdel.env.agent.harness).__name__ == "SandboxHarnessConfig"
    assert featdel.env.agent.harness.max_turns == 50
    # sources without their own algo inherit orchestrator.algo (grpo) when the config resolves
    expected = {
        "A0": [("featdel", "feature-deletion", "grpo")],
        "A1": [("featdel", "feature-deletion", "grpo")],
        "A1-slurm": [("featdel", "feature-deletion", "grpo")],
        "A2": [("featdel", "feature-deletion", "grpo"), ("featdel-hints", "feature-deletion", "opsd")],
        "A3": [("featdel", "feature-deletion", "grpo"), ("replay", "trace-replay", "grpo")],
        "A4": [
            ("featdel", "feature-deletion", "grpo"),
            ("featdel-hints", "feature-deletion", "opsd"),
            ("replay", "trace-replay", "grpo"),
        ],
    }[arm]
    assert train_sources(cfg) == expected
    for source in cfg.orchestrator.train.source:
        if source.algo.type == "opsd":
            assert source.algo.demo_key == HINT_KEY
            assert source.group_size == 1
    assert cfg.run.name == {"A1-slurm": "a1-dr-grpo"}.get(arm, ARMS[arm][-1].removesuffix(".toml").replace("_", "-"))
    assert cfg.deployment.type == ("multi_node" if arm == "A1-slurm" else "single_node")
    assert cfg.orchestrator.eval.source[0].env.taskset.id == "feature-deletion"
    # the taskset table narrowed to the environment's own config class, so its keys were validated
    assert str(featdel.env.taskset.tasks) == "tasks/featdel-train"
    assert str(cfg.orchestrator.eval.source[0].env.taskset.tasks) == "tasks/featdel-eval"


def test_replay_job_validates_as_rl_config(load_rl_config):
    cfg = load(load_rl_config, "replay")
    (source,) = cfg.orchestrator.train.source
    assert (source.resolved_name, source.env.taskset.id, source.algo.type) == ("replay", "trace-replay", "grpo")
    assert type(source.env.taskset).__name__ == "TraceReplayConfig"
    assert (source.env.taskset.journal, source.env.taskset.task.votes.tier) == ("replay/run/journal.jsonl", "content")
    # the taskset's bundled one-call harness is the default
    assert source.env.agent_harnesses()["agent"].id == "trace-replay"
    assert cfg.trainer.loss.import_path == "loss_fns.policy.dr_grpo"


@pytest.mark.parametrize("arm", ["A0", "A2", "A4", "replay"])
def test_rl_launcher_dry_run_writes_subconfigs(load_rl_config, arm: str, tmp_path, monkeypatch):
    """prime-rl's real `rl` entrypoint with --dry-run: resolves the arm and writes the trainer, orchestrator and
    per-source env-server configs it would launch, without starting any process."""
    from prime_rl.entrypoints.rl import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["rl", *rl_args(arm), "--dry-run"])
    main()
    cfg = load(load_rl_config, arm)
    configs = tmp_path / "outputs" / cfg.run.name / "configs"
    trainer = json.loads((configs / "trainer.json").read_text())
    orchestrator = json.loads((configs / "orchestrator.json").read_text())
    assert trainer["loss"]["type"] == cfg.trainer.loss.type
    assert [s["name"] for s in orchestrator["train"]["source"]] == [
        s.resolved_name for s in cfg.orchestrator.train.source
    ]
    for source in cfg.orchestrator.train.source:
        env_server = json.loads((configs / "envs" / "train" / f"{source.resolved_name}.json").read_text())
        assert env_server["env"]["taskset"]["id"] == source.env.taskset.id
    hints = [s for s in orchestrator["train"]["source"] if s["algo"]["type"] == "opsd"]
    assert [s["algo"]["demo_key"] for s in hints] == (["hint"] if arm in {"A2", "A4"} else [])


def test_a2_opsd_reads_the_hint_attach_hint_wrote(load_rl_config):
    """prime-rl's OPSDAlgorithm, built from A2's resolved opsd source, finds crf-prime's hint on the trace (an empty
    hint included) and raises without one: the contract between attach_hint and `demo_key = "hint"`."""
    import verifiers.v1 as vf
    from prime_rl.orchestrator.algo.opsd import OPSDAlgorithm
    from verifiers.v1.episode import EnvInfo, Episode

    from crf_prime.hints import FailingTest, attach_hint

    (opsd_cfg,) = [s.algo for s in load(load_rl_config, "A2").orchestrator.train.source if s.algo.type == "opsd"]
    algo = OPSDAlgorithm(opsd_cfg, policy_pool=None)

    def trace() -> vf.Trace:
        return vf.Trace(
            task=vf.TraceTask(type="T", data=vf.TaskData(prompt="fix it")), agent=vf.AgentInfo(config=vf.AgentConfig())
        )

    failed, clean, bare = trace(), trace(), trace()
    attach_hint(failed, failing_tests=[FailingTest(name="t.py::test_a", message="E   assert 1 == 2")])
    attach_hint(clean)
    episode = Episode(
        env=EnvInfo(id="feature-deletion", name="featdel-hints"), task=failed.task, traces=[failed, clean, bare]
    )
    assert algo._demonstration(episode, failed) == "- Test `t.py::test_a` failed."  # never the failure text
    assert algo.template.format(demonstration=algo._demonstration(episode, failed)).endswith("`t.py::test_a` failed.")
    assert algo._demonstration(episode, clean) == ""
    with pytest.raises(ValueError, match=r"opsd requires 'hint' in the trace info dict .*env 'featdel-hints'"):
        algo._demonstration(episode, bare)
