"""Opt-in markers: each optional host is skipped with a reason that says how to enable it.

On CI (``CI=true``) the hosts that .ci/run installs (bubblewrap, ray) must be present: a missing one fails
the run instead of silently skipping the tests that cover it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

ON_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def _prime_rl_src() -> str | None:
    path = os.environ.get("CRF_PRIME_RL_SRC")
    return path if path and os.path.isdir(os.path.join(path, "src", "prime_rl")) else None


_HOSTS: dict[str, tuple[bool, str, bool]] = {
    # marker: (available, how to enable, required on CI)
    "prime_rl": (
        _prime_rl_src() is not None,
        "set CRF_PRIME_RL_SRC to a prime-rl source checkout and pip install 'crf-prime[prime-rl]'",
        False,
    ),
    "swebench": (
        bool(os.environ.get("CRF_TEST_SWEBENCH")) and importlib.util.find_spec("swebench") is not None,
        "pip install 'crf-prime[swebench]' and set CRF_TEST_SWEBENCH=1",
        False,
    ),
    "ray": (importlib.util.find_spec("ray") is not None, "pip install 'crf-prime[ray]'", True),
    "bwrap": (shutil.which("bwrap") is not None, "apt-get install bubblewrap", True),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    missing_on_ci: set[str] = set()
    for item in items:
        for marker, (available, how, required_on_ci) in _HOSTS.items():
            if marker not in item.keywords or available:
                continue
            if ON_CI and required_on_ci:
                missing_on_ci.add(f"{marker} ({how})")
            item.add_marker(pytest.mark.skip(reason=f"needs {marker}: {how}"))
    if missing_on_ci:
        raise pytest.UsageError(f"CI must provide these hosts: {', '.join(sorted(missing_on_ci))}")
