"""Where a task's tests run when it is graded: crf-prime's sandbox on this host, or the rollout's verifiers runtime.

Feature Deletion and SWE-bench-lite grade the same way: a fresh tree the grader built, the tests run under a wall
limit either in the local bubblewrap box (the subprocess runtime: the agent's directory is on this host) or through
``runtime.run`` inside a container runtime, whose image holds the test environment. Both environments nest
:class:`GradingConfig` as ``task.grading``, so the settings have one name in both, and both run a command in the
runtime through :func:`run_in_runtime`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from crf_prime.errors import InfraError
from crf_prime.sandbox import SandboxConfig, SandboxLimits

GRADING_LIMITS = SandboxLimits(wall_seconds=300.0, memory_mb=4096, pids=512, output_bytes=2_000_000)
"""Limits of one test-suite run (a task's validation or grading): roomier than one agent command."""

RUNTIME_MARGIN_S = 120.0
"""Seconds a runtime may take beyond a command's own wall limit before the runtime counts as broken (InfraError)."""

KILL_AFTER_S = 10
"""Seconds between coreutils ``timeout``'s TERM and its KILL in the runtime."""


class GradingSandbox(SandboxConfig):
    """Sandbox settings of a test-suite run on this host (generation, validation, grading)."""

    limits: SandboxLimits = GRADING_LIMITS
    """Limits of one test run; ``limits.wall_seconds`` is also the wall limit of a run in the runtime."""


class GradingConfig(GradingSandbox):
    """Where and how a task's hidden tests run at grading (``[env.taskset.task.grading]``)."""

    python: str | None = None
    """Interpreter that runs the tests where the placement brings none of its own (None: the environment's default;
    docs/environments.md says which for each)."""


class RuntimeLike(Protocol):
    """What grading needs of a ``verifiers.v1.Runtime`` (this module does not import verifiers)."""

    async def run(self, argv: list[str], env: dict[str, str]) -> Any: ...
    async def write(self, path: str, data: bytes) -> None: ...


@dataclass(frozen=True)
class RuntimeRun:
    """One command run in a runtime under a wall limit."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    """coreutils ``timeout`` stopped it (exit 124, or 137 after the KILL)."""
    duration_s: float


async def run_in_runtime(
    runtime: RuntimeLike, argv: Sequence[str], env: Mapping[str, str], *, wall_seconds: float
) -> RuntimeRun:
    """Run ``argv`` in the runtime under coreutils ``timeout``; a runtime that does not return within the limit plus
    :data:`RUNTIME_MARGIN_S` raises :class:`InfraError` (the runtime is broken, the answer is not wrong)."""
    wrapped = ["timeout", "-k", str(KILL_AFTER_S), f"{wall_seconds:g}", *argv]
    start = time.perf_counter()
    try:
        result = await asyncio.wait_for(runtime.run(wrapped, dict(env)), wall_seconds + RUNTIME_MARGIN_S)
    except TimeoutError as e:
        raise InfraError(f"the runtime did not return within {wall_seconds:g}s + {RUNTIME_MARGIN_S:g}s") from e
    return RuntimeRun(
        exit_code=result.exit_code,
        stdout=result.stdout or "",
        stderr=result.stderr or "",
        timed_out=result.exit_code in (124, 137),
        duration_s=time.perf_counter() - start,
    )


def local_workdir(runtime: object) -> Path | None:
    """The rollout's directory on this host when the runtime is verifiers' local ``subprocess`` one, else None."""
    workdir = getattr(runtime, "workdir", None)
    if getattr(runtime, "type", None) != "subprocess" or workdir is None:
        return None
    return Path(workdir)
