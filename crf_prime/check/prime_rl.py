"""prime-rl's own ``RLConfig`` through prime-pydantic-config's ``cli``: the exact parse ``uv run rl`` does."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic_config import cli

PRIME_RL_SRC = "CRF_PRIME_RL_SRC"
"""Environment variable naming a prime-rl source checkout to import from when prime_rl is not installed."""


def source_paths(src: str | Path) -> list[str]:
    """A source checkout's import roots: ``src`` and ``packages/prime-rl-configs/src`` (prime_rl is a namespace)."""
    root = Path(src)
    return [str(root / "src"), str(root / "packages" / "prime-rl-configs" / "src")]


def import_rl_config() -> type:
    """prime-rl's ``RLConfig`` (installed, or from ``$CRF_PRIME_RL_SRC``); ImportError when neither works."""
    src = os.environ.get(PRIME_RL_SRC)
    if src:
        for path in reversed(source_paths(src)):
            if path not in sys.path:
                sys.path.insert(0, path)
    from prime_rl.configs.rl import RLConfig  # optional host (prime-rl extra)

    return RLConfig


def parse_rl_config(rl_config: type, args: Sequence[str]) -> Any:
    """``cli(RLConfig, args=…)``; raises prime-pydantic-config's ``ConfigFileError`` with the CLI-worded errors."""

    return cli(rl_config, args=list(args))


def absolute_files(args: Sequence[str], base_dir: Path) -> list[str]:
    """``args`` with every ``@ FILE`` / ``@FILE`` path made absolute from ``base_dir`` (the launch directory)."""
    out = list(args)
    for i, arg in enumerate(out):
        if arg == "@" and i + 1 < len(out):
            out[i + 1] = str((base_dir / out[i + 1]).resolve())
        elif arg.startswith("@") and len(arg) > 1 and i > 0 and out[i - 1].startswith("--"):
            out[i] = "@" + str((base_dir / arg[1:]).resolve())
    return out


def sources_of(config: Any) -> list[tuple[str, str, float, int]]:
    """``(name, algo, ratio, group_size)`` of each train source of a validated ``RLConfig``."""
    orchestrator = config.orchestrator
    default_algo = orchestrator.algo.type
    return [
        (s.resolved_name, s.algo.type if s.algo else default_algo, float(s.ratio), int(s.group_size))
        for s in orchestrator.train.source
    ]
