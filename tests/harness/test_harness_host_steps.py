"""Host-side steps of the crf-sandbox harness on an agent-controlled workdir (audit for issue 18).

The harness never copies files out of the rollout directory: view and edit run inside the box. Its only host-side
touches of the workdir are ``stat`` calls: which protected paths exist when the executor is made, and the
sandbox's ``realpath`` checks before each command. A protected path is a read-only bind mount, so the agent can
neither write through it nor swap it for a symlink that would move the bind (or turn the rollout into an error).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crf_prime.harness import SandboxHarnessConfig
from crf_prime.harness.executors import SandboxExecutor
from crf_prime.harness.harness import _Rollout
from crf_prime.sandbox import Sandbox

pytestmark = pytest.mark.bwrap

CONFIG = SandboxHarnessConfig.model_validate(
    {"limits": {"wall_seconds": 10, "memory_mb": 256, "pids": 64, "tmp_size_mb": 16}}
)


async def test_protected_path_cannot_be_swapped_for_a_symlink(tmp_path: Path) -> None:
    host = tmp_path / "host"
    host.mkdir()
    (host / "secret.txt").write_text("host only\n")
    work = tmp_path / "work"
    (work / "tests").mkdir(parents=True)
    (work / "tests" / "test_x.py").write_text("def test(): assert False\n")
    executor = SandboxExecutor(Sandbox(CONFIG), work, limits=CONFIG.limits, protected=[Path("tests")])
    rollout = _Rollout(executor, CONFIG)
    script = f"echo 'def test(): pass' > tests/test_x.py; mv tests gone; rm -rf tests; ln -s {host} tests; echo done"
    out = await rollout.call("bash", json.dumps({"command": script}))
    assert "Read-only file system" in out and "done" in out
    assert (work / "tests").is_dir() and not (work / "tests").is_symlink()
    assert (work / "tests" / "test_x.py").read_text() == "def test(): assert False\n"
    # the next command still runs (no host-side error from a moved protected path), and the host dir stays unseen
    out = await rollout.call("bash", json.dumps({"command": f"cat {host}/secret.txt; echo rc=$?"}))
    assert "host only" not in out and "rc=1" in out
    assert (host / "secret.txt").read_text() == "host only\n"
