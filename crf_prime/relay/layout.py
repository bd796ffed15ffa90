"""prime-rl's broadcast directory layout, as the relay reads and writes it.

Mirrors ``src/prime_rl/utils/pathing.py`` (``get_broadcast_dir`` → ``<output_dir>/broadcasts``, ``get_step_path`` →
``step_<n>``) and ``get_latest_ckpt_step`` in ``src/prime_rl/utils/utils.py`` (the newest ``step_*`` directory that
holds a ``STABLE`` file wins). prime-rl parses every ``step_*`` entry's suffix as an int, so nothing the relay keeps
next to the steps may start with ``step_``: its working files live under the hidden :data:`RELAY_DIR`.
"""

from __future__ import annotations

import re
from pathlib import Path

STABLE = "STABLE"
"""Marker file prime-rl's trainer touches after a step's weights are fully written."""

NCCL_READY = "NCCL_READY"
"""Marker the orchestrator touches inside a step directory before an update (``src/prime_rl/utils/client.py``)."""

RELAY_DIR = ".crf-relay"
"""Hidden working directory inside a broadcast directory (staging, trash); invisible to prime-rl's ``step_*`` glob."""

_STEP_RE = re.compile(r"^step_(\d+)$")


def step_dir(broadcast_dir: Path, step: int) -> Path:
    """``<broadcast_dir>/step_<step>``, the directory prime-rl's inference server loads."""
    return broadcast_dir / f"step_{step}"


def parse_step(name: str) -> int | None:
    """The step number of a ``step_<n>`` directory name, or None for anything else."""
    match = _STEP_RE.match(name)
    return int(match.group(1)) if match else None


def local_stable_steps(broadcast_dir: Path) -> list[int]:
    """Steps under ``broadcast_dir`` whose directory holds ``STABLE``, ascending."""
    if not broadcast_dir.is_dir():
        return []
    steps = []
    for entry in broadcast_dir.iterdir():
        step = parse_step(entry.name)
        if step is not None and entry.is_dir() and (entry / STABLE).is_file():
            steps.append(step)
    return sorted(steps)
