"""The identity of a broadcast step's weights, shared by the inference stand-in (which logs it for every step it
loads) and the relay check in report.py (which compares it with the trainer's step)."""

from __future__ import annotations

import hashlib
from pathlib import Path


def weights_digest(weight_dir: Path) -> str:
    """sha256 over the step's safetensors files (names and bytes, in name order)."""
    digest = hashlib.sha256()
    for f in sorted(weight_dir.glob("*.safetensors")):
        digest.update(f.name.encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()
