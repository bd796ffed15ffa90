"""Compose several arms with prime-rl's launcher in one process: ``rl(cli(RLConfig, args=...))`` per arm, exactly what
``rl @ <files> ... --dry-run`` runs for one (prime-rl's ``entrypoints/rl.py``: ``main`` is ``rl(cli(RLConfig))``), so
the launcher's imports are paid once rather than once per arm (~20 CPU s each on the 2-core box).

    python compose.py jobs.json     # [{"args": ["@", "a0_rlvr.toml", ..., "--dry-run"], "env": {...}}, ...]

Each job's ``env`` is set before it is composed (prime-rl reads the run identity from ``PRL_RUN_ID`` /
``PRL_RUN_NAME``). Prints one JSON line per job: its index and the seconds it took.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from prime_rl.configs.rl import RLConfig
from prime_rl.entrypoints.rl import rl
from prime_rl.utils.config import cli


def compose(args: list[str], env: dict[str, str]) -> float:
    """Compose one arm (its dry run must be in ``args``); seconds taken."""
    if "--dry-run" not in args:
        raise ValueError(f"compose.py only composes: --dry-run missing from {args}")
    os.environ.update(env)
    t0 = time.monotonic()
    rl(cli(RLConfig, args=args))
    return time.monotonic() - t0


def main() -> int:
    jobs = json.loads(Path(sys.argv[1]).read_text())
    for i, job in enumerate(jobs):
        seconds = compose(job["args"], job.get("env", {}))
        print(json.dumps({"job": i, "seconds": round(seconds, 2)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
