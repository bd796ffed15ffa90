"""Lazy imports of optional hosts with an error that names the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from crf_prime.errors import CrfError, ExitCode


class MissingExtraError(CrfError, ImportError):
    """An optional host package is not installed."""

    exit_code = ExitCode.MISSING_EXTRA


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` telling the user which crf-prime extra provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:  # message path: tests/test_extras.py
        raise MissingExtraError(
            f"{module!r} is not installed; it comes with the crf-prime extra {extra!r}: "
            f"pip install 'crf-prime[{extra}]'"
        ) from e
