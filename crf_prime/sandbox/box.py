"""``Sandbox``: run one command in a bubblewrap box under resource limits and return a structured result.

One implementation (asyncio) serves both ``arun`` and ``run``. Each run: a per-run cgroup (memory, pids) that the
child joins before ``exec``, rlimits (CPU, file size, address space when no memory cgroup), a wall-clock timeout
that kills the whole tree (the box is a pid namespace whose init dies with bwrap; the cgroup is swept too), output
captured up to a cap per stream, the cgroup removed afterwards. Cancelling ``arun`` kills the box as well.
``spawn`` starts a box with the same layout and limits but no wall limit, left running as a server on its stdin and
stdout until ``BoxProcess.close``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import logging
import os
import resource
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, NamedTuple

from crf_prime.sandbox.bwrap import DEFAULT_PATH, build_argv
from crf_prime.sandbox.cgroups import RunCgroup, detect_layout
from crf_prime.sandbox.models import LimitName, RunResult, SandboxConfig, SandboxLimits
from crf_prime.sandbox.probe import require

logger = logging.getLogger(__name__)

_READ_CHUNK = 1 << 16
_FLOOD_BYTES = 64 << 20
"""Output dropped beyond the cap before the run is killed for flooding (plus 16x the cap)."""
_DRAIN_GRACE_S = 1.0
"""How long to wait for the output pipes to close after the command exits before sweeping leftovers."""


def _truncation_marker(dropped: int) -> str:
    return f"\n[... output truncated: {dropped} more bytes not shown ...]\n"


class _Capture:
    """Keep the first ``cap`` bytes of a stream, count the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.dropped += max(0, len(chunk) - max(room, 0))

    def text(self) -> str:
        out = bytes(self.data).decode("utf-8", errors="replace")
        return out + _truncation_marker(self.dropped) if self.dropped else out


_SYSTEM_DIRS = tuple(Path(p) for p in ("/usr", "/etc", "/proc", "/dev", "/sys", "/root", "/home"))
"""A task directory must not be one of these nor contain them."""

_JOIN_FAILED = "crf-sandbox: cannot join the run's cgroup or set its rlimits"
_JOIN_FAILED_CODE = 125


def _clamp(res: int, value: int) -> int:
    """An rlimit may not exceed this process's own hard limit."""
    hard = resource.getrlimit(res)[1]
    return value if hard == resource.RLIM_INFINITY else min(value, hard)


def _launcher(joins: list[tuple[str, str]], lim: SandboxLimits, rlimit_as_mb: int | None) -> list[str]:
    """``sh -c`` prefix that joins the run's cgroups and sets rlimits, then execs the command (same pid).

    A ``preexec_fn`` could do both, but it forces CPython to fork() instead of vfork(): copying the parent's page
    tables costs more the more memory it holds (a trainer or eval process holds GBs), and it is not thread-safe.
    One small ``sh`` exec costs ~1 ms. ``ulimit`` units (POSIX sh): -f 512-byte blocks, -v KiB, -t seconds.
    """
    steps = ["ulimit -c 0"]
    if lim.cpu_seconds is not None:
        soft = _clamp(resource.RLIMIT_CPU, lim.cpu_seconds)
        hard = _clamp(resource.RLIMIT_CPU, lim.cpu_seconds + 1)  # SIGXCPU at soft, SIGKILL at hard
        steps += [f"ulimit -S -t {soft}", f"ulimit -H -t {hard}"]
    if lim.file_size_mb is not None:
        steps.append(f"ulimit -f {_clamp(resource.RLIMIT_FSIZE, lim.file_size_mb << 20) // 512}")
    if rlimit_as_mb is not None:
        steps.append(f"ulimit -v {_clamp(resource.RLIMIT_AS, rlimit_as_mb << 20) // 1024}")
    steps += [f"echo {value} > {shlex.quote(path)}" for path, value in joins]
    script = (
        f'{{ {" && ".join(steps)}; }} 2>/dev/null || {{ echo "{_JOIN_FAILED}" >&2; exit {_JOIN_FAILED_CODE}; }}; '
        'exec "$@"'
    )
    return ["/bin/sh", "-c", script, "crf-sandbox"]


def _signal_of(code: int) -> int | None:
    """Signal that ended the command: negative for a direct child, 128+N as reported by bwrap/shells."""
    if code < 0:
        return -code
    if 128 < code < 128 + 65:
        return code - 128
    return None


def box_env(workdir: Path, env: Mapping[str, str] | None) -> dict[str, str]:
    """A box's whole environment: a fixed base (HOME is the workdir) and ``env`` over it; nothing of the host's."""
    return {
        "PATH": DEFAULT_PATH,
        "HOME": str(workdir),
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        **(env or {}),
    }


def outcome(
    code: int,
    duration: float,
    stderr: str,
    lim: SandboxLimits,
    enforced: tuple[str, ...],
    fired: LimitName | None,
    timed_out: bool,
    flooded: bool,
) -> tuple[int | None, LimitName | None]:
    """(exit code, limit hit) of a finished command from its raw status ``code`` (negative: killed by that signal)
    and what was seen around it (``fired``: what its cgroup counted). The exit code is None when a limit killed it."""
    sig = _signal_of(code)
    if code < 0:
        code = 128 - code  # report like a shell / bwrap does: 128 + the signal number
    limit_hit = fired
    if limit_hit is None:
        if timed_out:
            limit_hit = "wall"
        elif flooded:
            limit_hit = "output"
        elif lim.cpu_seconds is not None and (
            sig == signal.SIGXCPU or (sig == signal.SIGKILL and duration >= lim.cpu_seconds)
        ):
            limit_hit = "cpu"
        elif lim.file_size_mb is not None and (sig == signal.SIGXFSZ or "File too large" in stderr):
            limit_hit = "file_size"
        elif lim.memory_mb is not None and "memory:rlimit-as" in enforced and "MemoryError" in stderr:
            limit_hit = "memory"
    killed = limit_hit in ("wall", "output") or (limit_hit is not None and sig is not None)
    return (None if killed else code), limit_hit


def captured(path: Path, cap: int) -> tuple[str, bool]:
    """(text, truncated) of an output file, kept as a run's stream is: its first ``cap`` bytes and a marker."""
    out = _Capture(cap)
    with contextlib.suppress(FileNotFoundError), open(path, "rb") as fh:
        while chunk := fh.read(_READ_CHUNK):
            out.feed(chunk)
    return out.text(), out.dropped > 0


class _Launch(NamedTuple):
    cmd: list[str]
    env: dict[str, str] | None
    cwd: str | None
    cgroup: RunCgroup | None
    enforced: tuple[str, ...]


class Sandbox:
    """Run commands isolated with bubblewrap (or, with ``SandboxConfig.unsandboxed``, explicitly without isolation).

    Built from its config: ``Sandbox(SandboxConfig(...))`` (a command's or grader's config inherits that model).
    Construction probes the host once and raises :class:`SandboxUnavailable` (saying how to fix it) when bubblewrap
    cannot isolate here. Safe to share across threads and asyncio tasks: every run has its own box and cgroup.
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        config = config or SandboxConfig()
        self.limits = config.limits
        self.unsandboxed = config.unsandboxed
        if config.unsandboxed:
            self._bwrap: str | None = None
            logger.warning("crf_prime.sandbox: running commands WITHOUT isolation (unsandboxed=True)")
        else:
            self._bwrap = require(config.bwrap).bwrap
        self.deadline: float | None = None

    def with_deadline(self, deadline: float | None) -> Sandbox:
        """This box with every run stopped at ``deadline`` (``time.monotonic()``) at the latest, as at its wall limit:
        work whose result is no longer wanted (a generator's time limit) ends there."""
        box = copy.copy(self)
        box.deadline = deadline
        return box

    def with_limits(self, **changes: object) -> Sandbox:
        """This box (same isolation, not probed again) with some limits changed, e.g. ``with_limits(wall_seconds=9)``;
        the changed limits are validated like a config's."""
        box = copy.copy(self)
        box.limits = SandboxLimits.model_validate({**self.limits.model_dump(), **changes})
        return box

    # -- public API ----------------------------------------------------------------------------------------------
    def run(
        self,
        argv: Sequence[str],
        *,
        workdir: Path,
        ro_binds: Sequence[Path] = (),
        protected: Sequence[Path] = (),
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        stdin: bytes | None = None,
        limits: SandboxLimits | None = None,
        writable: Sequence[Path] | None = None,
    ) -> RunResult:
        """Blocking form of :meth:`arun` (usable from inside a running event loop too: it then uses a thread)."""
        coro_args: dict[str, Any] = dict(
            workdir=workdir,
            ro_binds=ro_binds,
            protected=protected,
            env=env,
            cwd=cwd,
            stdin=stdin,
            limits=limits,
            writable=writable,
        )
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.arun(argv, **coro_args))
        box: list[RunResult | BaseException] = []

        def worker() -> None:
            try:
                box.append(asyncio.run(self.arun(argv, **coro_args)))
            except BaseException as e:
                box.append(e)

        thread = threading.Thread(target=worker, name="crf-sandbox-run")
        thread.start()
        thread.join()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    async def arun(
        self,
        argv: Sequence[str],
        *,
        workdir: Path,
        ro_binds: Sequence[Path] = (),
        protected: Sequence[Path] = (),
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        stdin: bytes | None = None,
        limits: SandboxLimits | None = None,
        writable: Sequence[Path] | None = None,
    ) -> RunResult:
        """Run ``argv`` in a box rooted at ``workdir`` (writable, same path inside, default cwd).

        ``writable``: when given, ``workdir`` is read-only inside the box except these paths (existing, inside it);
        ``protected`` paths inside them stay read-only. Only bubblewrap enforces it (``unsandboxed`` cannot).
        """
        lim = self.limits_now(limits)
        launch = self._launch(argv, workdir, ro_binds, protected, env, cwd, writable, lim)
        try:
            return await self._execute(launch.cmd, launch.env, launch.cwd, stdin, lim, launch.cgroup, launch.enforced)
        finally:
            if launch.cgroup is not None:
                await _remove_cgroup(launch.cgroup)

    def limits_now(self, limits: SandboxLimits | None = None) -> SandboxLimits:
        """The limits of a run started now: ``limits`` (else this box's) with the wall limit cut at the deadline."""
        lim = limits or self.limits
        if self.deadline is None:
            return lim
        left = max(0.001, self.deadline - time.monotonic())
        return lim.model_copy(update={"wall_seconds": min(lim.wall_seconds, left)})

    def spawn(
        self,
        argv: Sequence[str],
        *,
        workdir: Path,
        ro_binds: Sequence[Path] = (),
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        writable: Sequence[Path] | None = None,
        stderr: IO[bytes] | None = None,
    ) -> BoxProcess:
        """Start ``argv`` in a box laid out as :meth:`arun` lays it out, under this box's limits but no wall limit,
        and leave it running, its stdin and stdout piped to the caller: a server that answers many requests (the
        caller bounds each). :meth:`BoxProcess.close` kills it. ``stderr``: a file for its stderr (else dropped)."""
        lim = self.limits
        launch = self._launch(argv, workdir, ro_binds, (), env, cwd, writable, lim)
        try:
            proc = subprocess.Popen(
                launch.cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr if stderr is not None else subprocess.DEVNULL,
                env=launch.env,
                cwd=launch.cwd,
                start_new_session=True,
            )
        except BaseException:
            if launch.cgroup is not None:
                _remove_cgroup_now(launch.cgroup)
            raise
        return BoxProcess(self, proc, launch.cgroup, launch.enforced, lim)

    def _launch(
        self,
        argv: Sequence[str],
        workdir: Path,
        ro_binds: Sequence[Path],
        protected: Sequence[Path],
        env: Mapping[str, str] | None,
        cwd: Path | None,
        writable: Sequence[Path] | None,
        lim: SandboxLimits,
    ) -> _Launch:
        """The checked layout as a command line (launcher, bwrap, ``argv``), with the run's cgroup made."""
        if not argv:
            raise ValueError("argv is empty")
        workdir_p = Path(os.path.realpath(workdir))
        if not workdir_p.is_dir():
            raise ValueError(f"workdir {workdir} is not a directory")
        if any(workdir_p == p or workdir_p in p.parents for p in _SYSTEM_DIRS):
            raise ValueError(f"workdir {workdir_p} would expose system directories writable; use a task directory")
        cwd_p = Path(os.path.realpath(cwd)) if cwd is not None else workdir_p
        ro = [Path(os.path.realpath(p)) for p in ro_binds]
        for p in ro:
            if not p.exists():
                raise ValueError(f"ro_binds: {p} does not exist")
            if p == Path("/"):
                raise ValueError("ro_binds: binding / would expose the whole host (secrets included)")
        prot = [Path(os.path.realpath(workdir_p / p)) for p in protected]
        for p in prot:
            if workdir_p not in p.parents:
                raise ValueError(f"protected: {p} is not inside workdir {workdir_p}")
        rw = None if writable is None else [Path(os.path.realpath(workdir_p / p)) for p in writable]
        for p in rw or ():
            if workdir_p not in p.parents or not p.exists():
                raise ValueError(f"writable: {p} is not an existing path inside workdir {workdir_p}")
        full_env = box_env(workdir_p, env)

        enforced: list[str] = []
        layout = detect_layout()
        cgroup = RunCgroup(layout, lim.memory_mb, lim.pids) if layout.version else None
        if lim.cpu_seconds is not None:
            enforced.append("cpu:rlimit")
        if lim.file_size_mb is not None:
            enforced.append("file_size:rlimit")
        rlimit_as_mb = None
        try:
            if cgroup is not None:
                enforced += cgroup.create()
            if lim.memory_mb is not None and "memory" not in (cgroup.dirs if cgroup else {}):
                rlimit_as_mb = lim.memory_mb
                enforced.append("memory:rlimit-as")
            enforced += ["wall", f"output:{lim.output_bytes}"]
            if self._bwrap is not None:
                enforced = ["isolation:bwrap", f"tmp_size:{lim.tmp_size_mb}mb", *enforced]
                cmd = build_argv(
                    self._bwrap,
                    list(argv),
                    workdir=workdir_p,
                    ro_binds=ro,
                    protected=prot,
                    env=full_env,
                    cwd=cwd_p,
                    tmp_size_mb=lim.tmp_size_mb,
                    writable=rw,
                )
                if rw is not None:
                    enforced.insert(1, "read_only_workdir:bwrap")
                popen_env: dict[str, str] | None = {}
                popen_cwd = None
            else:
                cmd, popen_env, popen_cwd = list(argv), full_env, str(cwd_p)
            joins = cgroup.join_targets() if cgroup else []
            cmd = [*_launcher(joins, lim, rlimit_as_mb), *cmd]
        except BaseException:
            if cgroup is not None:
                _remove_cgroup_now(cgroup)
            raise
        return _Launch(cmd, popen_env, popen_cwd, cgroup, tuple(enforced))

    # -- internals -----------------------------------------------------------------------------------------------
    async def _execute(
        self,
        cmd: list[str],
        env: dict[str, str] | None,
        cwd: str | None,
        stdin: bytes | None,
        lim: SandboxLimits,
        cgroup: RunCgroup | None,
        enforced: tuple[str, ...],
    ) -> RunResult:
        start = time.monotonic()
        # Popen (vfork) + pidfd + non-blocking pipes on this loop: no child-watcher thread, no transport objects,
        # fewer wake-ups per run than asyncio.create_subprocess_exec (which matters on a loaded 2-core machine).
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        out, err = _Capture(lim.output_bytes), _Capture(lim.output_bytes)
        flood_at = _FLOOD_BYTES + 16 * lim.output_bytes
        state = {"flooded": False}
        loop = asyncio.get_running_loop()
        assert proc.stdout is not None and proc.stderr is not None
        eofs = [
            _watch_pipe(loop, pipe, cap, functools.partial(self._on_output, proc, cgroup, cap, flood_at, state))
            for pipe, cap in ((proc.stdout, out), (proc.stderr, err))
        ]
        if proc.stdin is not None:
            _feed_stdin(loop, proc.stdin, stdin or b"")
        exited = _watch_exit(loop, proc)
        timed_out = False
        try:
            try:
                await asyncio.wait_for(asyncio.shield(exited), timeout=lim.wall_seconds)
            except TimeoutError:
                timed_out = not state["flooded"]
                self._kill(proc, cgroup)
                await exited
            # the command exited; its output pipes close as soon as nothing in the box holds them
            _, pending = await asyncio.wait(eofs, timeout=_DRAIN_GRACE_S)
            if pending:
                self._kill(proc, cgroup)
                await asyncio.wait(eofs, timeout=_DRAIN_GRACE_S)
        except BaseException:
            self._kill(proc, cgroup)
            raise
        finally:
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    with contextlib.suppress(ValueError, OSError):
                        loop.remove_reader(pipe.fileno())
                        loop.remove_writer(pipe.fileno())
                    with contextlib.suppress(OSError):
                        pipe.close()
            exited.cancel()
            if proc.returncode is None:
                self._kill(proc, cgroup)
                proc.wait()  # reap (prompt after SIGKILL)
        flooded = state["flooded"]
        duration = time.monotonic() - start
        if proc.returncode == _JOIN_FAILED_CODE and _JOIN_FAILED in err.text():
            raise RuntimeError(f"{_JOIN_FAILED} {list(cgroup.dirs.values()) if cgroup else []}")
        code = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        fired = cgroup.limit_fired() if cgroup is not None else None
        exit_code, limit_hit = outcome(code, duration, err.text(), lim, enforced, fired, timed_out, flooded)
        return RunResult(
            exit_code=exit_code,
            stdout=out.text(),
            stderr=err.text(),
            stdout_truncated=out.dropped > 0,
            stderr_truncated=err.dropped > 0,
            duration_s=duration,
            limit_hit=limit_hit,
            enforced=enforced,
        )

    def _on_output(
        self, proc: subprocess.Popen, cgroup: RunCgroup | None, cap: _Capture, flood_at: int, state: dict
    ) -> None:
        if cap.dropped > flood_at and not state["flooded"]:
            state["flooded"] = True
            self._kill(proc, cgroup)

    def _kill(self, proc: subprocess.Popen, cgroup: RunCgroup | None) -> None:
        """Kill the whole tree: bwrap (its pid-namespace init dies with it), the process group, the cgroup."""
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)  # not proc.kill(): that would reap it behind the exit watcher
        if self._bwrap is None:  # unsandboxed: no pid namespace, so sweep the session's process group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if cgroup is not None:
            cgroup.kill_all()


class BoxProcess:
    """A box started by :meth:`Sandbox.spawn`: its process (stdin and stdout piped), cgroup and limits."""

    def __init__(
        self,
        sandbox: Sandbox,
        proc: subprocess.Popen,
        cgroup: RunCgroup | None,
        enforced: tuple[str, ...],
        limits: SandboxLimits,
    ) -> None:
        self.sandbox, self.proc, self.cgroup, self.enforced, self.limits = sandbox, proc, cgroup, enforced, limits

    def counters(self) -> tuple[int, int]:
        """What the box's cgroup has counted so far (:meth:`RunCgroup.counters`); (0, 0) without one."""
        return self.cgroup.counters() if self.cgroup is not None else (0, 0)

    def fired_since(self, before: tuple[int, int]) -> LimitName | None:
        """The cgroup limit a request ran into since :meth:`counters` read ``before``."""
        return self.cgroup.limit_fired(since=before) if self.cgroup is not None else None

    def close(self) -> None:
        """Kill the box (its whole tree) and remove its cgroup."""
        self.sandbox._kill(self.proc, self.cgroup)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self.proc.wait()
        if self.cgroup is not None:
            _remove_cgroup_now(self.cgroup)


def _watch_pipe(
    loop: asyncio.AbstractEventLoop, pipe: IO[bytes], cap: _Capture, on_data: Callable[[], None]
) -> asyncio.Future[None]:
    """Read ``pipe`` into ``cap`` from the loop; the returned future resolves at EOF."""
    fd = pipe.fileno()
    os.set_blocking(fd, False)
    eof: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        while True:
            try:
                chunk = os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                loop.remove_reader(fd)
                if not eof.done():
                    eof.set_result(None)
                return
            cap.feed(chunk)
            on_data()

    loop.add_reader(fd, readable)
    return eof


def _feed_stdin(loop: asyncio.AbstractEventLoop, pipe: IO[bytes], data: bytes) -> None:
    fd = pipe.fileno()
    os.set_blocking(fd, False)
    view = memoryview(data)

    def writable() -> None:
        nonlocal view
        try:
            while view:
                view = view[os.write(fd, view[:_READ_CHUNK]) :]
        except BlockingIOError:
            return
        except OSError:  # the command closed its stdin
            pass
        loop.remove_writer(fd)
        with contextlib.suppress(OSError):
            pipe.close()

    loop.add_writer(fd, writable)


def _watch_exit(loop: asyncio.AbstractEventLoop, proc: subprocess.Popen) -> asyncio.Future[int]:
    """Future of the exit status: a pidfd on the loop (Linux >= 5.3), else a worker thread blocked in wait()."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        return asyncio.ensure_future(asyncio.to_thread(proc.wait))
    done: asyncio.Future[int] = loop.create_future()

    def ready() -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        if not done.done():
            done.set_result(proc.wait())  # already exited: reaps without blocking

    loop.add_reader(pidfd, ready)

    def cancelled(fut: asyncio.Future[int]) -> None:
        if fut.cancelled():
            with contextlib.suppress(ValueError, OSError):
                loop.remove_reader(pidfd)
                os.close(pidfd)

    done.add_done_callback(cancelled)
    return done


def _removal_pauses(cgroup: RunCgroup, timeout_s: float) -> Iterator[float]:
    """Pauses to wait between tries at removing the cgroup(s): the box's pid-1 may still be exiting for a moment after
    bwrap returned. Ends once they are removed, or with a warning at ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    pause = 0.0005
    while not cgroup.try_remove():
        if time.monotonic() > deadline:
            logger.warning("crf_prime.sandbox: could not remove cgroup(s) %s", cgroup.created)
            return
        yield pause
        pause = min(pause * 2, 0.02)


async def _remove_cgroup(cgroup: RunCgroup, timeout_s: float = 5.0) -> None:
    for pause in _removal_pauses(cgroup, timeout_s):
        await asyncio.sleep(pause)


def _remove_cgroup_now(cgroup: RunCgroup, timeout_s: float = 5.0) -> None:
    for pause in _removal_pauses(cgroup, timeout_s):
        time.sleep(pause)
