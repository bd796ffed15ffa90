"""A/B report over ladder arms: pass@1 with bootstrap CIs and paired differences to a baseline (crf-prime tooling).

Names are resolved lazily so that ``crf-prime --help`` does not import numpy.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ArmRow": "build",
    "Report": "build",
    "build_report": "build",
    "markdown": "build",
    "write_report": "build",
    "ArmData": "load",
    "ReportInputError": "load",
    "Sample": "load",
    "load_arm": "load",
    "Estimate": "stats",
    "bootstrap_mean": "stats",
    "paired_difference": "stats",
    "pass_at_1": "stats",
    "per_task_pass": "stats",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
