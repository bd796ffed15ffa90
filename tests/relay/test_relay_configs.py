"""configs/multinode overlays: TOML syntax and wiring always; validation as prime-rl's real RLConfig opt-in."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from prime_rl_support import prime_rl_on_path

from crf_prime.relay.cli import GateConfig

REPO = Path(__file__).resolve().parents[2]
MULTINODE = REPO / "configs" / "multinode"
BASE = REPO / "configs" / "ladder" / "a0_rlvr.toml"

STACKS: dict[str, tuple[str, ...]] = {
    "slurm": ("slurm.toml",),
    "slurm-node-local": ("slurm.toml", "slurm_node_local_venv.toml"),
    "decentralized": ("decentralized.toml",),
}


def test_overlays_parse_and_point_admin_calls_at_the_gate() -> None:
    tables = {p.name: tomllib.loads(p.read_text()) for p in sorted(MULTINODE.glob("*.toml"))}
    assert sorted(tables) == ["decentralized.toml", "slurm.toml", "slurm_node_local_venv.toml"]
    dec = tables["decentralized.toml"]
    assert dec["weight_broadcast"] == {"type": "filesystem"} and dec["inference"] == "None"
    assert Path(dec["output_dir"]).is_absolute()
    gate_port = GateConfig.model_fields["port"].default
    assert all(
        url.split(":")[-1] == f"{gate_port}/v1" for url in dec["orchestrator"]["model"]["client"]["admin_base_url"]
    )
    for name in ("slurm.toml", "slurm_node_local_venv.toml"):
        assert "$CRF_PRIME_DIR/environments/feature_deletion" in tables[name]["slurm"]["pre_run_command"]


@pytest.fixture(scope="module")
def rl_config():
    with prime_rl_on_path(environments=True):
        from prime_rl.configs.rl import RLConfig
        from pydantic_config import cli

        def load(stack: str):
            args = ["@", str(BASE)]
            for name in STACKS[stack]:
                args += ["@", str(MULTINODE / name)]
            return cli(RLConfig, args=args)

        yield load


@pytest.mark.prime_rl
@pytest.mark.parametrize("stack", list(STACKS))
def test_overlay_validates_as_rl_config(rl_config, stack: str) -> None:
    cfg = rl_config(stack)
    if stack == "decentralized":
        assert cfg.inference is None  # no local vLLM: inference runs on the remote nodes
        assert cfg.trainer.weight_broadcast.type == "filesystem"
        assert cfg.orchestrator.output_dir == Path("/data/crf-prime/outputs/a0-rlvr")
        assert cfg.orchestrator.model.client.admin_base_url == [
            "http://infer-a.example:8190/v1",
            "http://infer-b.example:8190/v1",
        ]
        assert (cfg.deployment.type, cfg.deployment.num_infer_gpus) == ("single_node", 0)
    else:
        assert (cfg.deployment.type, cfg.deployment.num_train_nodes, cfg.deployment.num_infer_nodes) == (
            "multi_node",
            2,
            1,
        )
        assert cfg.slurm.job_name == "crf-prime"
        assert cfg.slurm.shared_fs is (stack == "slurm")
        assert cfg.slurm.template_path.name == "multi_node_rl.sbatch.j2"


@pytest.mark.prime_rl
def test_gate_upstream_in_the_docs_is_prime_rls_engine_port() -> None:
    with prime_rl_on_path():
        from prime_rl.configs.inference import InferenceConfig

        config = InferenceConfig()
    engine = config.backend_port
    assert (engine, config.server.port) == (8100, 8000)  # the engine the gate fronts, the router it does not
    pages = [REPO / "docs" / "multinode.md", MULTINODE / "decentralized.toml"]
    for page in pages:
        assert f"--gate.upstream http://127.0.0.1:{engine}" in page.read_text(), page
