"""What the shipped configs mean once composed and run: overlays keep what they claim to keep, the node-local SLURM
overlay installs into the venv `uv run` uses, and the SWE-bench eval configs parse with the installed verifiers'
own eval/validate configs (verifiers 0.4.0, or the commit prime-rl pins, in the lock venv)."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

import pytest
from ladder_arms import CONFIGS, LADDER, rl_args

from crf_prime.check import compose_args

SWE = CONFIGS / "swebench_lite"


def test_rl_eval_source_keeps_the_held_out_featdel_eval() -> None:
    args = [*rl_args("A1"), "@", str(SWE / "rl_eval_source.toml")]
    sources = compose_args(args)["orchestrator"]["eval"]["source"]
    assert [s["name"] for s in sources] == ["featdel-eval", "swebench-lite"]
    arm_eval = tomllib.loads((LADDER / "a0_rlvr.toml").read_text())["orchestrator"]["eval"]["source"]
    assert sources[0] == arm_eval[0]  # restated verbatim: the copy cannot drift from the arm's


def _fake_bin(tmp_path: Path) -> Path:
    """`srun` runs its command here (SLURM is not on this machine); `uv` records its argv and VIRTUAL_ENV."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text('#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\nexec "$@"\n')
    uv = bin_dir / "uv"
    uv.write_text('#!/bin/bash\nprintf "%s\\n" "VIRTUAL_ENV=$VIRTUAL_ENV" "PWD=$PWD" "$@" > "$UV_RECORD"\n')
    srun.chmod(0o755)
    uv.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("node_local", [True, False], ids=["UV_PROJECT_ENVIRONMENT in .env", "no .env"])
def test_node_local_overlay_installs_into_the_venv_uv_run_uses(tmp_path: Path, node_local: bool) -> None:
    command = tomllib.loads((CONFIGS / "multinode" / "slurm_node_local_venv.toml").read_text())["slurm"][
        "pre_run_command"
    ]
    project = tmp_path / "prime-rl"
    project.mkdir()
    node_venv = tmp_path / "node-local" / "venv"
    if node_local:  # prime-rl's sbatch comment: .env vars are often unexported, so each srun task re-sources it
        (project / ".env").write_text(f"UV_PROJECT_ENVIRONMENT={node_venv}\n")
    record = tmp_path / "uv-argv.txt"
    env = {
        "PATH": f"{_fake_bin(tmp_path)}:{os.environ['PATH']}",
        "PROJECT_DIR": str(project),
        "CRF_PRIME_DIR": "/opt/crf-prime",
        "VIRTUAL_ENV": str(project / ".venv"),  # the sbatch script ran `source .venv/bin/activate`
        "UV_RECORD": str(record),
    }
    subprocess.run(["bash", "-c", command], env=env, check=True, cwd=tmp_path)
    argv = record.read_text().splitlines()
    target = f"{node_venv}/bin/python" if node_local else ".venv/bin/python"
    assert argv[:6] == [f"VIRTUAL_ENV={project}/.venv", f"PWD={project}", "pip", "install", "--python", target]
    assert argv[6:] == [
        "-e",
        "/opt/crf-prime",
        "-e",
        "/opt/crf-prime/environments/feature_deletion",
        "-e",
        "/opt/crf-prime/environments/swebench_lite",
        "-e",
        "/opt/crf-prime/environments/trace_replay",
    ]


@pytest.mark.parametrize("name", ["eval_docker.toml", "eval_prime.toml"])
def test_swebench_eval_configs_parse_with_the_installed_eval_cli(name: str) -> None:
    from pydantic_config import cli
    from verifiers.v1.configs.cli.eval import EvalConfig

    config = cli(EvalConfig, args=["@", str(SWE / name), "-n", "3"])
    assert type(config.env.taskset).__name__ == "SweTasksetConfig"
    limit = config.select.limit if hasattr(config, "select") else config.num_tasks  # 0.4.0 / a60a606
    assert limit == 3
    usage = [line for line in (SWE / name).read_text().splitlines() if line.startswith("#   ")]
    assert sum("uv run eval @" in line for line in usage) == 1 and sum("vf-eval @" in line for line in usage) == 1


def test_swebench_validate_fixture_parses_with_the_installed_validate_cli() -> None:
    from pydantic_config import cli
    from verifiers.v1.configs.cli.validate import ValidateConfig

    config = cli(ValidateConfig, args=["@", str(SWE / "validate_fixture.toml")])
    assert type(config.taskset).__name__ == "SweTasksetConfig" and config.runtime.type == "subprocess"
