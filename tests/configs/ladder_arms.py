"""The channel ladder as `uv run rl @ ...` argument lists, shared by the default and the opt-in prime-rl tests."""

from __future__ import annotations

import tomllib
from pathlib import Path

from crf_prime.check.compose import deep_merge  # prime-pydantic-config's `@` composition

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"
LADDER = CONFIGS / "ladder"

ARMS: dict[str, tuple[str, ...]] = {
    "A0": ("a0_rlvr.toml",),
    "A1": ("a0_rlvr.toml", "a1_dr_grpo.toml"),
    "A2": ("a0_rlvr.toml", "a1_dr_grpo.toml", "a2_hints.toml"),
    "A3": ("a0_rlvr.toml", "a1_dr_grpo.toml", "a3_replay.toml"),
    "A4": ("a0_rlvr.toml", "a1_dr_grpo.toml", "a4_all.toml"),
    "A1-slurm": ("a0_rlvr.toml", "a1_dr_grpo.toml", "../multinode/slurm.toml"),
    "replay": ("../replay_rl.toml",),
}
"""Arm -> ladder files in `@` order."""


def rl_args(arm: str) -> list[str]:
    """The argument list `uv run rl` gets for an arm: ``@ file @ file ...``."""
    args: list[str] = []
    for name in ARMS[arm]:
        args += ["@", str(LADDER / name)]
    return args


def compose(arm: str) -> dict:
    merged: dict = {}
    for name in ARMS[arm]:
        merged = deep_merge(merged, tomllib.loads((LADDER / name).read_text()))
    return merged
