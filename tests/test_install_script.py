"""scripts/install.sh picks torch for the machine: the CUDA build only where ``nvidia-smi -L`` answers."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "install.sh"


def torch_kind(tmp_path: Path, nvidia_smi_exit: int | None, **env: str) -> str:
    """``torch_kind`` of install.sh, run alone with a stand-in ``nvidia-smi`` (None: no such command)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if nvidia_smi_exit is not None:
        fake = bin_dir / "nvidia-smi"
        fake.write_text(f"#!/bin/sh\nexit {nvidia_smi_exit}\n")
        fake.chmod(0o755)
    body = 'eval "$(sed -n "/^torch_kind()/,/^}/p" "$1")"; torch_kind'
    path = f"{bin_dir}:{os.path.dirname(shutil.which('sed') or '/usr/bin/sed')}"
    result = subprocess.run(
        [shutil.which("bash") or "/bin/bash", "-c", body, "bash", str(SCRIPT)],
        env={"PATH": path, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return result.stdout.strip()


@pytest.mark.parametrize(("exit_code", "kind"), [(0, "cuda"), (9, "cpu"), (None, "cpu")])
def test_cuda_only_where_nvidia_smi_lists_a_gpu(tmp_path: Path, exit_code: int | None, kind: str) -> None:
    assert torch_kind(tmp_path, exit_code) == kind


def test_crf_torch_decides_instead_of_the_probe(tmp_path: Path) -> None:
    assert torch_kind(tmp_path, 0, CRF_TORCH="cpu") == "cpu"


def test_pip_is_not_silenced() -> None:
    text = SCRIPT.read_text()
    assert " -q " not in text.split("PIP=(", 1)[1].split(")", 1)[0]
