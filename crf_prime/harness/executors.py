"""Where a tool command runs: our bubblewrap box rooted at the rollout's directory (local ``subprocess`` runtime),
or the runtime's own ``run`` (container runtimes: docker, podman, apptainer, prime, modal, e2b isolate already)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from crf_prime.harness.tools import ToolOutcome
from crf_prime.placement import run_in_runtime
from crf_prime.sandbox import Sandbox, SandboxLimits


class Executor(Protocol):
    python: str
    """Interpreter for the in-box view/edit programs."""

    async def run(self, argv: Sequence[str], *, timeout_s: float) -> ToolOutcome: ...


class SandboxExecutor:
    """Runs commands in ``crf_prime.sandbox`` with the rollout's work directory as the writable task dir."""

    def __init__(
        self,
        sandbox: Sandbox,
        workdir: Path,
        *,
        limits: SandboxLimits,
        ro_binds: Sequence[Path] = (),
        protected: Sequence[Path] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.workdir = workdir
        self.limits = limits
        self.ro_binds = tuple(ro_binds)
        self.protected = tuple(protected)
        self.env = dict(env or {})
        # the base interpreter's prefix is always bound read-only in the box
        self.python = os.path.realpath(sys.executable)

    async def run(self, argv: Sequence[str], *, timeout_s: float) -> ToolOutcome:
        limits = self.limits.model_copy(update={"wall_seconds": timeout_s})
        r = await self.sandbox.arun(
            list(argv),
            workdir=self.workdir,
            ro_binds=self.ro_binds,
            protected=self.protected,
            env=self.env,
            limits=limits,
        )
        return ToolOutcome(r.exit_code, r.stdout, r.stderr, r.limit_hit, timeout_s)


class RuntimeExecutor:
    """Runs commands through ``runtime.run`` under coreutils ``timeout``, capping the output it returns."""

    python = "python3"

    def __init__(self, runtime: object, *, env: Mapping[str, str] | None = None, output_bytes: int) -> None:
        self.runtime = runtime
        self.env = dict(env or {})
        self.output_bytes = output_bytes

    async def run(self, argv: Sequence[str], *, timeout_s: float) -> ToolOutcome:
        r = await run_in_runtime(self.runtime, argv, self.env, wall_seconds=timeout_s)  # type: ignore[arg-type]  # runtime is verifiers' (untyped) object; run_in_runtime checks it has run/read/write
        limit = "wall" if r.timed_out else None
        return ToolOutcome(
            None if limit else r.exit_code,
            self._cap(r.stdout),
            self._cap(r.stderr),
            limit,
            timeout_s if limit else None,
        )

    def _cap(self, text: str) -> str:
        data = text.encode()
        if len(data) <= self.output_bytes:
            return text
        dropped = len(data) - self.output_bytes
        kept = data[: self.output_bytes].decode(errors="replace")
        return f"{kept}\n[... output truncated: {dropped} more bytes not shown ...]\n"
