"""Opt-in: scripts/lock_venv.sh — crf-prime and the environments installed into a venv holding prime-rl's locked
versions change none of them, and the environment, harness, hints, teachers, configs and losses suites pass there on
the verifiers commit prime-rl pins. Minutes, not seconds (it builds a venv); enable with CRF_PRIME_RL_SRC and
CRF_VERIFIERS_SRC (default: the checkout's deps/verifiers) and a Python 3.12 (CRF_LOCK_PYTHON, else found as build_venv.sh finds it)."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.prime_rl, pytest.mark.slow, pytest.mark.timeout(3600)]


def lock_file() -> Path:
    return Path(os.environ["CRF_PRIME_RL_SRC"]) / "uv.lock"


def verifiers_src() -> str:
    given = os.environ.get("CRF_VERIFIERS_SRC")
    if given:
        return given
    pinned = Path(os.environ["CRF_PRIME_RL_SRC"]) / "deps" / "verifiers"
    if not (pinned / "pyproject.toml").is_file():
        pytest.fail(f"set CRF_VERIFIERS_SRC: {pinned} is not a verifiers checkout (git submodule update --init)")
    return str(pinned)


def test_install_into_the_lock_venv_changes_nothing_and_the_suites_pass(tmp_path: Path) -> None:
    env = {**os.environ, "CRF_VERIFIERS_SRC": verifiers_src(), "CRF_LOCK_VENV": str(tmp_path / "lock-venv")}
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "lock_venv.sh")], env=env, capture_output=True, text=True, timeout=3600
    )
    out = proc.stdout + proc.stderr
    print(out)  # the freeze comparison and the suites' summary (pytest -rP shows it)
    assert proc.returncode == 0, out[-6000:]
    assert re.search(r"^changed: 0 of \d+ locked packages$", out, re.M), out[-6000:]
    # the install runs under the whole lock as constraints: what it adds comes at the lock's version too
    assert re.search(r"^added and locked: \d+, off the lock's version: 0$", out, re.M), out[-6000:]
    locked = {p["name"]: p.get("version") for p in tomllib.loads(lock_file().read_text())["package"]}
    versions = f"| openai {locked['openai']} | mcp {locked['mcp']} |"
    assert re.search(rf"^verifiers \S+ {re.escape(versions)}", out, re.M), (versions, out[-6000:])
    summary = proc.stdout.strip().splitlines()[-1]  # pytest's closing line (uv reports on stderr)
    assert re.fullmatch(r"\d+ passed(, \d+ skipped)?(, \d+ warnings?)? in .*", summary), summary
