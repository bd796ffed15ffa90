"""Warm pytest for generation's own test runs: a long-lived box per test venv that has imported pytest, each run a
fork of it (crf_prime/featdel/pytest_zygote.py).

A short target-test run spends about half its time starting the interpreter and importing pytest; generation runs
hundreds per package (the snapshot's run for each candidate, the target tests of each gold mutant the replay let
through). Those trees are gold's own code, so they may share a box: its runs directory is read-only inside it (each
tree made under :attr:`PytestServer.runs`, as a cold grading run's tree is read-only), only the runs' output
directories are writable, ``/tmp`` is emptied after each run, and each run gets the environment, working directory
and wall limit a cold run would get. An agent's code, gold's own grade and the grader users serve never run here:
they keep a fresh box per run. A box that dies is dropped, and its run made cold instead.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from crf_prime.featdel.testenv import TestEnv
from crf_prime.sandbox import RunResult, Sandbox, SandboxLimits
from crf_prime.sandbox.box import BoxProcess, box_env, captured, outcome

logger = logging.getLogger(__name__)

REPLY_GRACE_S = 30.0
"""How long past a run's wall limit the host waits for the box's answer before it drops the box (its start, pytest's
import, included)."""
_ZYGOTE = Path(__file__).with_name("pytest_zygote.py")


class BoxDied(RuntimeError):
    """The warm box stopped answering; the run is made cold instead."""


class PytestServer:
    """Warm boxes for one test venv, started as runs need them (one per run at a time) and reused."""

    def __init__(self, sandbox: Sandbox, env: TestEnv) -> None:
        if sandbox.unsandboxed:
            raise ValueError(
                "a warm pytest server needs an isolated sandbox (its box cleans its own /tmp and processes)"
            )
        self.sandbox, self.env = sandbox, env
        self.home = Path(os.path.realpath(tempfile.mkdtemp(prefix="crf-featdel-warm-")))
        self.root = self.home / "box"
        self.runs, self.outs = self.root / "runs", self.root / "outs"
        for d in (self.runs, self.outs, self.root / "zygote"):
            d.mkdir(parents=True)
        self.script = self.root / "zygote" / _ZYGOTE.name
        shutil.copyfile(_ZYGOTE, self.script)
        self._idle: list[BoxProcess] = []
        self._started: list[BoxProcess] = []
        self._lock = threading.Lock()
        self._closed = False

    def __enter__(self) -> PytestServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run_dir(self, prefix: str) -> Path:
        """A new run directory the warm boxes can see (read-only)."""
        return Path(tempfile.mkdtemp(prefix=prefix, dir=self.runs))

    def out_dir(self) -> Path:
        """A new output directory the warm boxes can write (junit, stdout, stderr of one run)."""
        return Path(tempfile.mkdtemp(dir=self.outs))

    def holds(self, run_dir: Path) -> bool:
        """Whether ``run_dir`` is under the runs directory (the only trees a warm box sees)."""
        return self.runs in Path(os.path.realpath(run_dir)).parents

    def run(
        self,
        pytest_argv: Sequence[str],
        *,
        run_dir: Path,
        cwd: Path,
        env: Mapping[str, str],
        out: Path,
        limits: SandboxLimits,
    ) -> RunResult:
        """``python -s -P -B -m pytest PYTEST_ARGV`` as a cold box at ``run_dir`` would run it (``env`` on the box's
        base environment, ``limits.wall_seconds`` its wall limit), stdout and stderr kept in ``out``. Raises
        :class:`BoxDied` when the box stops answering (the caller runs it cold)."""
        if not self.holds(run_dir):
            raise ValueError(f"{run_dir} is not under this server's runs directory {self.runs}")
        box = self._acquire()
        ok = False
        try:
            before = box.counters()
            request = {
                "argv": list(pytest_argv),
                "cwd": str(cwd),
                "env": {**box_env(Path(os.path.realpath(run_dir)), env), "PWD": str(cwd)},  # PWD: as bwrap's --chdir
                "stdout": str(out / "stdout"),
                "stderr": str(out / "stderr"),
                "wall_s": limits.wall_seconds,
            }
            reply = self._ask(box, request, limits.wall_seconds + REPLY_GRACE_S)
            stdout, out_cut = captured(out / "stdout", limits.output_bytes)
            stderr, err_cut = captured(out / "stderr", limits.output_bytes)
            code = os.waitstatus_to_exitcode(reply["status"])
            seconds = float(reply["seconds"])
            fired = box.fired_since(before)
            exit_code, limit_hit = outcome(
                code, seconds, stderr, limits, box.enforced, fired, bool(reply["timed_out"]), False
            )
            ok = True
            return RunResult(
                exit_code=exit_code,
                stdout=stdout,
                stderr=stderr,
                stdout_truncated=out_cut,
                stderr_truncated=err_cut,
                duration_s=seconds,
                limit_hit=limit_hit,
                enforced=(*box.enforced, "warm"),
            )
        finally:
            self._release(box, ok)

    def close(self) -> None:
        """Kill every warm box and remove the server's directories."""
        with self._lock:
            self._closed = True
            boxes, self._started, self._idle = self._started, [], []
        for box in boxes:
            box.close()
        shutil.rmtree(self.home, ignore_errors=True)

    # -- internals -----------------------------------------------------------------------------------------------
    def _acquire(self) -> BoxProcess:
        with self._lock:
            if self._closed:
                raise RuntimeError("the warm pytest server is closed")
            while self._idle:
                box = self._idle.pop()
                if box.proc.poll() is None:
                    return box
                self._started.remove(box)
                box.close()
        with (self.home / "stderr").open("ab") as err:
            box = self.sandbox.spawn(
                [str(self.env.python), "-s", "-P", "-B", str(self.script), "--own-box"],
                workdir=self.root,
                ro_binds=[self.env.venv],
                env={"PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONSAFEPATH": "1"},
                writable=[self.outs],
                stderr=err,
            )
        with self._lock:
            self._started.append(box)
            if self._closed:
                self._started.remove(box)
                box.close()
                raise RuntimeError("the warm pytest server is closed")
        return box

    def _release(self, box: BoxProcess, ok: bool) -> None:
        with self._lock:
            if ok and not self._closed:
                self._idle.append(box)
                return
            with contextlib.suppress(ValueError):
                self._started.remove(box)
        box.close()

    def _ask(self, box: BoxProcess, request: dict, timeout_s: float) -> dict:
        """Send one request line, read one answer line (within ``timeout_s``)."""
        stdin, stdout = box.proc.stdin, box.proc.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write(json.dumps(request).encode() + b"\n")
            stdin.flush()
        except OSError as e:
            raise BoxDied(f"the warm pytest box stopped reading: {e}; {self._stderr_tail()}") from e
        line, deadline = b"", time.monotonic() + timeout_s
        fd = stdout.fileno()
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise BoxDied(f"the warm pytest box did not answer within {timeout_s:g} s; {self._stderr_tail()}")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise BoxDied(f"the warm pytest box exited; {self._stderr_tail()}")
            line += chunk
        return json.loads(line)

    def _stderr_tail(self) -> str:
        try:
            return "its stderr: " + (self.home / "stderr").read_text(errors="replace")[-800:]
        except OSError:
            return "no stderr"


__all__ = ["REPLY_GRACE_S", "BoxDied", "PytestServer"]
