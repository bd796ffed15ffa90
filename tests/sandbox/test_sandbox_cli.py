"""``crf-prime sandbox run``: numbers and paths are checked before anything runs; one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from crf_prime.cli import main
from crf_prime.harness import SandboxHarnessConfig


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--limits.wall-seconds", "0"),
        ("--limits.wall-seconds", "-1"),
        ("--limits.memory-mb", "0"),
        ("--limits.pids", "-1"),
        ("--limits.cpu-seconds", "0"),
        ("--limits.output-bytes", "0"),
    ],
)
def test_out_of_range_limits_are_bad_input(tmp_path: Path, capsys, flag: str, value: str) -> None:
    marker = tmp_path / "ran"
    argv = ["sandbox", "run", "--workdir", str(tmp_path), flag, value, "--", "touch", str(marker)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("crf-prime sandbox run: error: ") and flag in err
    assert not marker.exists()


def test_missing_workdir_and_missing_command_are_bad_input(tmp_path: Path, capsys) -> None:
    assert main(["sandbox", "run", "--workdir", str(tmp_path / "nope"), "--", "true"]) == 2
    assert (
        capsys.readouterr().err
        == f"crf-prime sandbox run: error: workdir: {tmp_path / 'nope'} is not an existing directory\n"
    )
    assert main(["sandbox", "run", "--workdir", str(tmp_path)]) == 2
    assert "argv: no command given" in capsys.readouterr().err


@pytest.mark.bwrap
def test_a_bind_the_box_refuses_is_bad_input(tmp_path: Path, capsys) -> None:
    assert main(["sandbox", "run", "--workdir", str(tmp_path), "--ro-binds", str(tmp_path / "gone"), "--", "true"]) == 2
    assert capsys.readouterr().err == f"crf-prime sandbox run: error: ro_binds: {tmp_path / 'gone'} does not exist\n"


def test_limits_given_in_part_keep_the_other_defaults() -> None:
    """A TOML table ``[env.agent.harness.limits]`` with one key overrides that key only."""
    config = SandboxHarnessConfig.model_validate({"limits": {"memory_mb": 4096}, "unsandboxed": True})
    assert config.limits.memory_mb == 4096
    assert config.limits.output_bytes == SandboxHarnessConfig().limits.output_bytes == 200_000
    assert config.unsandboxed is True
    with pytest.raises(ValueError, match="greater than 0"):
        SandboxHarnessConfig.model_validate({"limits": {"wall_seconds": 0}})
