"""Warm pytest: runs INSIDE a box started by ``Sandbox.spawn``, with only the standard library and the test venv.

Copied into the box and run as ``python -s -P -B pytest_zygote.py --own-box`` (the flags of a cold run); it imports
pytest once, then answers requests on stdin, one JSON line each: fork a child, which becomes what ``python -s -P -B
-m pytest ARGS`` would be at that point (its own process group, stdin from /dev/null, stdout and stderr to the files
named, the working directory, the whole environment and ``PYTHONPATH``'s entries at the front of ``sys.path`` as the
request gives them) and runs pytest's ``__main__`` as ``-m`` does, exiting as that interpreter would. The server
waits for it (killing its group at the request's wall limit), and with ``--own-box`` (it is alone in its own box,
never on the host) kills every other process the run left in the box and empties ``/tmp`` (but what was there at
the start: the way down to the box's bound directories), so the next run starts as in a fresh box. It answers one
JSON line on stdout: the wait status, whether the wall limit killed it, the seconds it took. It saves each run the
interpreter's start and pytest's import (about half of a short target-test run); it never runs an agent's code
(crf_prime/featdel/pytest_server.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import sys
import time

TMP = "/tmp"
SWEEP_WAIT_S = 10.0
"""How long the server waits for each process it killed after a run to exit."""


def _lines(fd: int):
    """Request lines read straight from the descriptor (no buffer a child could inherit)."""
    pending = b""
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            yield line


def _wait(pid: int, wall_s: float) -> tuple[int, bool]:
    """(wait status, killed at the wall limit) of the child; whatever it left in its group is killed too."""
    pidfd = os.pidfd_open(pid)
    try:
        timed_out = not select.select([pidfd], [], [], max(wall_s, 0.0))[0]
    finally:
        os.close(pidfd)
    if timed_out:
        _kill_group(pid)
    _, status = os.waitpid(pid, 0)
    _kill_group(pid)
    return status, timed_out


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _sweep() -> None:
    """Kill every process in the box but its init (pid 1) and this server: what a run left running (a daemon that
    left the run's process group too), and wait until each has exited (the box's init reaps them)."""
    me = os.getpid()
    fds = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in (1, me):
            with contextlib.suppress(OSError):  # gone already
                fds.append(os.pidfd_open(int(name)))
    for fd in fds:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    for fd in fds:
        select.select([fd], [], [], SWEEP_WAIT_S)  # readable once it has exited
        os.close(fd)


def _empty_tmp(keep: frozenset[str]) -> None:
    """Remove what runs left in ``/tmp``: every entry but those there when the box started (``keep``: the way down
    to the directories bound into the box, which must never be walked)."""
    for name in os.listdir(TMP):
        if name in keep:
            continue
        path = os.path.join(TMP, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)


def serve(own_box: bool) -> dict | None:
    """Answer requests until stdin closes (None); in a forked child, return its request instead."""
    import pytest  # noqa: F401  # the point: every run is forked from a process that imported it

    keep = frozenset(os.listdir(TMP)) if own_box else frozenset()

    for line in _lines(0):
        request = json.loads(line)
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            return request
        with contextlib.suppress(OSError):  # both sides set it (the child in ``become``): no window where a kill misses
            os.setpgid(pid, pid)
        status, timed_out = _wait(pid, float(request["wall_s"]))
        if own_box:
            _sweep()
            _empty_tmp(keep)
        reply = {"status": status, "timed_out": timed_out, "seconds": time.monotonic() - started}
        data = (json.dumps(reply) + "\n").encode()
        while data:
            data = data[os.write(1, data) :]
    return None


def become(request: dict) -> None:
    """Make this forked child what a cold ``python -s -P -B -m pytest`` would be before pytest's ``__main__``."""
    import importlib

    os.setpgid(0, 0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, fd)
        os.close(out)
    os.close(null)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[:0] = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    importlib.invalidate_caches()
    sys.argv = ["-m", *request["argv"]]  # runpy puts pytest's __main__ path first, as -m does


def main() -> None:
    request = serve(sys.argv[1:] == ["--own-box"])
    if request is None:
        return
    become(request)
    import runpy

    runpy.run_module("pytest", run_name="__main__", alter_sys=True)  # raises SystemExit: the child exits as -m would


if __name__ == "__main__":
    main()
