"""Data at the sandbox's edges: the limits a run asks for, the result it returns, the host's probe status."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from crf_prime.errors import InfraError

LimitName = Literal["wall", "cpu", "memory", "pids", "file_size", "output"]


class SandboxUnavailable(InfraError):
    """The isolated sandbox cannot run on this host; the message says how to fix it."""


class SandboxLimits(BaseModel):
    """Resource limits of one run, declared once: every command, harness and grader nests this model. ``None`` = not
    limited."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    wall_seconds: Annotated[float, Field(gt=0)] = 60.0
    """Wall-clock limit (seconds); on expiry the whole process tree is killed."""
    cpu_seconds: Annotated[int, Field(ge=1)] | None = None
    """CPU time per process (seconds, RLIMIT_CPU)."""
    memory_mb: Annotated[int, Field(ge=1)] | None = 2048
    """Memory of the whole tree (MiB; cgroup memory controller, else RLIMIT_AS per process)."""
    pids: Annotated[int, Field(ge=1)] | None = 256
    """Processes + threads alive at once in the tree (cgroup pids controller; not enforceable otherwise for uid 0)."""
    file_size_mb: Annotated[int, Field(ge=1)] | None = 256
    """Largest file a process may write (MiB, RLIMIT_FSIZE)."""
    output_bytes: Annotated[int, Field(ge=1)] = 1_000_000
    """Bytes kept per stream (stdout, stderr); the rest is dropped and a truncation marker appended."""
    tmp_size_mb: Annotated[int, Field(ge=1)] = 256
    """Size of the private tmpfs mounted on /tmp (MiB)."""


class SandboxConfig(BaseModel):
    """How model-written or graded commands run: the limits, and the one explicit way out of isolation. Commands,
    the harness and the graders take these fields (by inheriting or nesting this model), so a flag, a TOML key and a
    taskset field share one name and one default."""

    model_config = ConfigDict(extra="forbid")

    limits: SandboxLimits = SandboxLimits()
    """Resource limits of one run."""
    unsandboxed: bool = False
    """Run WITHOUT bubblewrap isolation (explicit opt-in, unsafe; never a silent fallback)."""
    bwrap: str | None = None
    """bubblewrap binary (default: $CRF_SANDBOX_BWRAP, else ``bwrap`` on PATH)."""

    @field_validator("limits", mode="before")
    @classmethod
    def _over_the_default(cls, value: object, info: ValidationInfo) -> object:
        """Limits given in part (a TOML table, ``--limits.memory-mb``) override this config's default limits field by
        field instead of resetting the others to SandboxLimits' own defaults."""
        assert info.field_name is not None  # a field validator always has its field
        default = cls.model_fields[info.field_name].default
        if isinstance(value, dict) and isinstance(default, SandboxLimits):
            return {**default.model_dump(), **value}
        return value


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
