"""Data at the sandbox's edges: the limits a run asks for, the result it returns, the host's probe status."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

LimitName = Literal["wall", "cpu", "memory", "pids", "file_size", "output"]


class SandboxUnavailable(RuntimeError):
    """The isolated sandbox cannot run on this host; the message says how to fix it."""


class SandboxLimits(BaseModel):
    """Resource limits of one run. ``None`` = not limited."""

    model_config = ConfigDict(frozen=True)

    wall_seconds: float = 60.0
    """Wall-clock limit (seconds); on expiry the whole process tree is killed."""
    cpu_seconds: int | None = None
    """CPU time per process (seconds, RLIMIT_CPU)."""
    memory_mb: int | None = 2048
    """Memory of the whole tree (MiB; cgroup memory controller, else RLIMIT_AS per process)."""
    pids: int | None = 256
    """Processes + threads alive at once in the tree (cgroup pids controller; not enforceable otherwise for uid 0)."""
    file_size_mb: int | None = 256
    """Largest file a process may write (MiB, RLIMIT_FSIZE)."""
    output_bytes: int = 1_000_000
    """Bytes kept per stream (stdout, stderr); the rest is dropped and a truncation marker appended."""
    tmp_size_mb: int = 256
    """Size of the private tmpfs mounted on /tmp (MiB)."""


class RunResult(BaseModel):
    """What one sandboxed command did."""

    model_config = ConfigDict(frozen=True)

    exit_code: int | None
    """Exit status (128+N when the command died of signal N); None when a limit killed it before it exited."""
    stdout: str
    """Captured stdout (decoded UTF-8 with replacement), capped at ``output_bytes`` plus a truncation marker."""
    stderr: str
    """Captured stderr, capped like stdout."""
    stdout_truncated: bool
    stderr_truncated: bool
    duration_s: float
    """Wall-clock duration of the run (seconds)."""
    limit_hit: LimitName | None
    """Which limit fired, if any."""
    enforced: tuple[str, ...]
    """Limits (and isolation) actually enforced in this run, e.g. ("isolation", "wall", "memory:cgroup-v1")."""

    @property
    def ok(self) -> bool:
        """Exited 0 with no limit hit."""
        return self.exit_code == 0 and self.limit_hit is None


class SandboxStatus(BaseModel):
    """Result of probing the host once: can we isolate, and which limits can we enforce."""

    model_config = ConfigDict(frozen=True)

    available: bool
    """bubblewrap runs and the box has no network."""
    reason: str
    """Why not (with how to fix it), or a one-line summary when available."""
    cgroup: Literal["v1", "v2"] | None
    """Cgroup version used for memory/pids limits; None = rlimits only."""
    bwrap: str | None = None
    """Path of the bubblewrap binary used."""
    bwrap_version: str | None = None
    cgroup_controllers: tuple[str, ...] = ()
    """Writable cgroup controllers (e.g. ("memory", "pids"))."""
    enforced: tuple[str, ...] = ()
    """Limits a run with every limit set would enforce, with their mechanism (e.g. "pids:cgroup-v1")."""
    not_enforced: tuple[str, ...] = ()
    """Limits this host cannot enforce, with the reason."""
    probe_s: float = 0.0
    """How long the probe took (seconds)."""
