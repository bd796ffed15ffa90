"""No ``crf-featdel-*`` tree is left in $TMPDIR after generate and grading: on success, on failure, on SIGTERM/SIGINT.

Counted in a private temporary directory; each test also checks that trees were really made there while it ran,
so an empty directory at the end means they were removed, not that they went elsewhere. The generation checked here
is a task set generated once per run in its own private directory (featdel_support.generated_in_private_tmp), which
test_featdel_generate reads too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from featdel_support import INFLECTION, agent_tree, generated_in_private_tmp

from crf_prime.featdel.grader import grade_tree
from crf_prime.sandbox import Sandbox, SandboxConfig

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


def _leftovers(tmpdir: Path) -> list[str]:
    return sorted(p.name for p in tmpdir.iterdir() if p.name.startswith("crf-featdel-"))


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[str]]:
    """A private $TMPDIR for this process, and the names of the temporary trees made in it."""
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    made: list[str] = []
    real_mkdtemp = tempfile.mkdtemp

    def recording_mkdtemp(*args, **kwargs) -> str:
        path = real_mkdtemp(*args, **kwargs)
        made.append(path)
        return path

    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    monkeypatch.setattr(tempfile, "mkdtemp", recording_mkdtemp)
    return tmpdir, made


class _BrokenSandbox(Sandbox):
    """A sandbox whose run fails (infrastructure failure mid-grading)."""

    def run(self, *args, **kwargs):
        raise RuntimeError("sandbox broke")


def test_generate_and_grading_leave_nothing(private_tmp, tmp_path: Path) -> None:
    # the generation ran in its own private $TMPDIR, once per run: test_featdel_generate reads the same tasks
    out, tasks, seen = generated_in_private_tmp(INFLECTION, 2, seed=7)
    assert tasks and seen["left"] == []
    assert "crf-featdel-gen" in {name.rsplit("-", 1)[0] for name in seen["made"]}  # made there, and removed
    tmpdir, made = private_tmp
    task = tasks[0]
    tree = agent_tree(task, out, tmp_path / "agent")
    assert grade_tree(task, out, tree).score == 0.0  # success of the grader (the snapshot scores 0)
    assert _leftovers(tmpdir) == []
    with pytest.raises(RuntimeError, match="sandbox broke"):  # failure mid-grading
        grade_tree(task, out, tree, sandbox=_BrokenSandbox(SandboxConfig(unsandboxed=True)))
    assert _leftovers(tmpdir) == []
    names = {Path(p).name.rsplit("-", 1)[0] for p in made if Path(p).parent == tmpdir}
    assert "crf-featdel-grade" in names  # they were made here, and removed


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_interrupted_generate_leaves_nothing(tmp_path: Path, sig: signal.Signals) -> None:
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    cmd = [sys.executable, "-c", "import sys; from crf_prime.cli import main; sys.exit(main(sys.argv[1:]))"]
    cmd += ["featdel", "generate", "--source", INFLECTION, "--out", str(tmp_path / "out"), "--max-tasks", "3"]
    proc = subprocess.Popen(
        cmd, env={**os.environ, "TMPDIR": str(tmpdir)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 600
        # interrupt while a grading tree exists (the validation phase), the case that could leave base trees behind
        while not any(n.startswith("crf-featdel-grade-") for n in _leftovers(tmpdir)):
            assert proc.poll() is None, f"generate ended before validating: {proc.stderr.read().decode()[-2000:]}"
            assert time.monotonic() < deadline, "generate never reached validation"
            time.sleep(0.05)  # polling for a condition, bounded by the deadline
        proc.send_signal(sig)
        code = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 130  # interrupted, whichever signal (docs/cli.md)
    assert _leftovers(tmpdir) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmpdir"]  # no staging directory beside --out, no --out
