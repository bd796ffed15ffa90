"""sys.path for the opt-in prime-rl tests: a prime-rl source checkout (``CRF_PRIME_RL_SRC``) and, for config
validation, this repo's environments/* (their source directories, so verifiers resolves them by id uninstalled).

Importable from every test directory: pytest puts ``tests/`` (the rootdir conftest's directory) on sys.path.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def prime_rl_paths(*, environments: bool = False) -> list[str]:
    """prime-rl's ``src`` and ``packages/prime-rl-configs/src``, then each environment's source directory."""
    src = Path(os.environ.get("CRF_PRIME_RL_SRC", ""))
    paths = [str(src / "src"), str(src / "packages" / "prime-rl-configs" / "src")]
    if environments:
        for env_dir in sorted((REPO / "environments").iterdir()):
            if (env_dir / "pyproject.toml").is_file():
                paths.append(str(env_dir / "src") if (env_dir / "src").is_dir() else str(env_dir))
    return paths


@contextmanager
def prime_rl_on_path(*, environments: bool = False) -> Iterator[None]:
    """Put :func:`prime_rl_paths` first on sys.path for the duration; take exactly those entries off again."""
    paths = prime_rl_paths(environments=environments)
    sys.path[:0] = paths
    try:
        yield
    finally:
        for p in paths:
            sys.path.remove(p)
