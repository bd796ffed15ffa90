"""Per-run cgroups for memory and process-count limits (cgroup v1 or v2, whichever is writable).

RLIMIT_NPROC does nothing for uid 0, so the process count of a box run as root is only enforceable with the ``pids``
controller; the ``memory`` controller limits the resident memory of the whole tree (RLIMIT_AS is the per-process
fallback). Each run gets its own child cgroup, created under the cgroup this process is in (so the limits of the
caller's cgroup still apply), and removed after the run. The child joins it before ``exec`` (see ``Sandbox``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids")


@dataclass(frozen=True)
class CgroupLayout:
    """Where this process may create per-run cgroups, per controller."""

    version: Literal["v1", "v2"] | None
    parents: dict[str, Path] = field(default_factory=dict)
    """controller -> directory under which per-run cgroups are made (v2: one directory for all)."""
    why_not: str = ""


def _own_paths() -> dict[str, str]:
    """Controller (v1) or "" (v2) -> this process's cgroup path, from /proc/self/cgroup."""
    paths: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrls, path = line.split(":", 2)
            for ctrl in ctrls.split(",") if ctrls else [""]:
                paths[ctrl] = path
    return paths


def _writable_dir(path: Path) -> bool:
    """Can we create (and remove) a child cgroup in ``path``?"""
    probe = path / f"crf-probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
    except OSError:
        return False
    with contextlib.suppress(OSError):
        probe.rmdir()
    return True


def _v2_mount() -> Path | None:
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return CGROUP_ROOT
    if (CGROUP_ROOT / "unified" / "cgroup.controllers").exists():
        return CGROUP_ROOT / "unified"
    return None


@functools.lru_cache(maxsize=1)
def detect_layout() -> CgroupLayout:
    """Find writable memory/pids controllers: v1 per-controller hierarchies first, then v2."""
    own = _own_paths()
    parents: dict[str, Path] = {}
    for ctrl in CONTROLLERS:
        base = CGROUP_ROOT / ctrl
        if ctrl in own and (base / "cgroup.procs").exists():
            parent = base / own[ctrl].lstrip("/")
            if _writable_dir(parent):
                parents[ctrl] = parent
    if parents:
        return CgroupLayout("v1", parents)
    mount = _v2_mount()
    if mount is not None and "" in own:
        parent = mount / own[""].lstrip("/")
        try:
            available = (parent / "cgroup.controllers").read_text().split()
            enabled = (parent / "cgroup.subtree_control").read_text().split()
        except OSError:
            available, enabled = [], []
        for ctrl in CONTROLLERS:
            if ctrl in available and ctrl not in enabled:
                # only possible when ``parent`` holds no processes itself (v2 "no internal processes" rule)
                with contextlib.suppress(OSError):
                    (parent / "cgroup.subtree_control").write_text(f"+{ctrl}")
        with contextlib.suppress(OSError):
            enabled = (parent / "cgroup.subtree_control").read_text().split()
        usable = [c for c in CONTROLLERS if c in enabled]
        if usable and _writable_dir(parent):
            return CgroupLayout("v2", dict.fromkeys(usable, parent))
    return CgroupLayout(None, {}, why_not="no writable memory/pids cgroup controller (v1 or v2) under /sys/fs/cgroup")


@dataclass
class RunCgroup:
    """The cgroup(s) of one run: created with limits, joined by the child before exec, read, killed, removed."""

    layout: CgroupLayout
    memory_mb: int | None
    pids: int | None
    dirs: dict[str, Path] = field(default_factory=dict)
    """controller -> this run's cgroup directory (only those whose limit was written)."""
    created: list[Path] = field(default_factory=list)
    """Every directory made for this run (removed afterwards)."""

    def create(self) -> tuple[str, ...]:
        """Make the cgroup(s) and write the limits; return the limits enforced (e.g. "memory:cgroup-v1")."""
        name = f"crf-sbx-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        wanted = {"memory": self.memory_mb, "pids": self.pids}
        enforced: list[str] = []
        for ctrl, value in wanted.items():
            parent = self.layout.parents.get(ctrl)
            if value is None or parent is None:
                continue
            path = parent / name
            if path not in self.created:
                path.mkdir()
                self.created.append(path)
            try:
                self._write_limit(ctrl, path, value)
            except OSError:
                continue
            self.dirs[ctrl] = path
            enforced.append(f"{ctrl}:cgroup-{self.layout.version}")
        return tuple(enforced)

    def _write_limit(self, ctrl: str, path: Path, value: int) -> None:
        if ctrl == "pids":
            (path / "pids.max").write_text(str(value))
        elif self.layout.version == "v1":
            limit = str(value * 1024 * 1024)
            (path / "memory.limit_in_bytes").write_text(limit)
            # without swap accounting this file is absent; with it, stop the tree from swapping past the limit
            with contextlib.suppress(OSError):
                (path / "memory.memsw.limit_in_bytes").write_text(limit)
        else:
            (path / "memory.max").write_text(str(value * 1024 * 1024))
            with contextlib.suppress(OSError):
                (path / "memory.swap.max").write_text("0")

    def join_targets(self) -> list[tuple[str, str]]:
        """(file, value) pairs the child writes to join the run's cgroup(s) itself, before exec.

        v1: ``0`` into ``tasks`` moves the writing thread (the single-threaded ``sh``); unlike a pid written into
        ``cgroup.procs`` it skips the kernel's global threadgroup rwsem, whose write side waits for an RCU grace
        period (~10-15 ms per run measured here). v2 has no such per-thread file outside threaded mode.
        """
        if self.layout.version == "v1":
            return [(str(p / "tasks"), "0") for p in dict.fromkeys(self.dirs.values())]
        return [(str(p / "cgroup.procs"), "$$") for p in dict.fromkeys(self.dirs.values())]

    def members(self) -> set[int]:
        pids: set[int] = set()
        for path in self.created:
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(x) for x in (path / "cgroup.procs").read_text().split())
        return pids

    def kill_all(self) -> None:
        """SIGKILL every process still in the run's cgroup(s) (v2: cgroup.kill)."""
        for path in self.created:
            if self.layout.version == "v2" and (path / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    (path / "cgroup.kill").write_text("1")
        for pid in self.members():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def counters(self) -> tuple[int, int]:
        """(OOM kills, forks refused at the pids limit) counted so far."""
        oom = forks = 0
        if (mem := self.dirs.get("memory")) is not None:
            oom = _counter(mem / ("memory.oom_control" if self.layout.version == "v1" else "memory.events"), "oom_kill")
        if (pids := self.dirs.get("pids")) is not None:
            forks = _counter(pids / "pids.events", "max")
        return oom, forks

    def limit_fired(self, since: tuple[int, int] = (0, 0)) -> Literal["memory", "pids"] | None:
        """Which cgroup limit the run ran into (an OOM kill, or a refused fork) since :meth:`counters` read
        ``since``."""
        oom, forks = self.counters()
        if oom > since[0]:
            return "memory"
        if forks > since[1]:
            return "pids"
        return None

    def try_remove(self) -> bool:
        """Kill leftovers and try to remove the cgroup(s); False while the kernel is still reaping members."""
        self.kill_all()
        for path in list(self.created):
            try:
                path.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                return False
            self.created.remove(path)
        self.dirs.clear()
        return True


def _counter(path: Path, key: str) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    return 0
