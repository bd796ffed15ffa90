"""Warm pytest (crf_prime/featdel/pytest_server.py): a warm run is the cold run, in a real box, on a real venv.

Each test runs the same tree cold (a fresh box, ``python -m pytest``) and warm (a fork of the warm box) through
``run_pytest`` and compares what the tests saw and what the run reports.
"""

from __future__ import annotations

import json
import logging
import os
import textwrap
import time
from pathlib import Path

import pytest
from featdel_support import INFLECTION, TOOLZ, generated

from crf_prime.featdel.deletion import apply_unified_diff
from crf_prime.featdel.grader import Grader
from crf_prime.featdel.models import GraderConfig
from crf_prime.featdel.pytest_server import PytestServer
from crf_prime.featdel.runner import PytestRun, run_pytest
from crf_prime.featdel.strength import mutation_score
from crf_prime.featdel.testenv import TestEnv, default_spec, ensure_test_env
from crf_prime.sandbox import Sandbox, SandboxConfig, SandboxLimits

LIMITS = SandboxLimits(wall_seconds=60, memory_mb=1024, pids=64, output_bytes=200_000, tmp_size_mb=16)

# What a test can see of its process: compared between cold and warm (the run and junit paths differ: replaced).
SEEN = """
import os, sys

def seen():
    return {
        "environ": dict(os.environ),
        "path": sys.path,
        "argv": sys.argv,
        "cwd": os.getcwd(),
        "flags": list(sys.flags),
        "main": sys.modules["__main__"].__spec__.name,
        "stdin": os.path.samestat(os.fstat(0), os.stat(os.devnull)),
        "mine": sorted(m for m in sys.modules if m.startswith("crfwarm")),
    }
"""

TESTS = """
import os, pytest, time
from crfwarm.helpers import seen

def test_passes():
    assert 1 + 1 == 2

def test_fails():
    assert 1 + 1 == 3, "one plus one"

@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")

def test_errors(broken):
    pass

@pytest.mark.skip(reason="not today")
def test_skipped():
    pass

def test_tmp_starts_empty():
    mine = "/tmp/crfwarm-marker"
    assert not os.path.exists(mine), "an earlier run left its file"
    open(mine, "w").write("x")

def test_sees():
    print("SEEN " + __import__("json").dumps(seen(), sort_keys=True))

def test_sleeps():
    if os.environ.get("CRFWARM_SLEEP"):
        time.sleep(600)
"""


@pytest.fixture(scope="module")
def env() -> TestEnv:
    return ensure_test_env(default_spec(()))


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(SandboxConfig(limits=LIMITS))


def _tree(dest: Path) -> Path:
    (dest / "repo" / "src" / "crfwarm").mkdir(parents=True)
    (dest / "repo" / "src" / "crfwarm" / "__init__.py").write_text("")
    (dest / "repo" / "src" / "crfwarm" / "helpers.py").write_text(SEEN)
    (dest / "repo" / "tests").mkdir()
    (dest / "repo" / "tests" / "test_it.py").write_text(TESTS)
    return dest


def _run(sandbox: Sandbox, env: TestEnv, run_dir: Path, warm: PytestServer | None, **kw) -> PytestRun:
    return run_pytest(sandbox, env, run_dir, pythonpath=["src"], read_only_tree=True, warm=warm, **kw)


def _seen(run: PytestRun, run_dir: Path) -> dict:
    assert run.status_of("tests/test_it.py::test_sees")[0] == "passed"
    seen = json.loads(run.stdout.split("SEEN ", 1)[1].splitlines()[0].replace(str(run_dir.resolve()), "RUN"))
    seen["argv"] = ["--junitxml=JUNIT" if a.startswith("--junitxml=") else a for a in seen["argv"]]
    return seen


def test_a_warm_run_is_the_cold_run(sandbox: Sandbox, env: TestEnv, tmp_path: Path) -> None:
    cold_dir = _tree(tmp_path / "cold")
    cold = _run(sandbox, env, cold_dir, None, pytest_args=["-s"])  # uncaptured: the tests print what they see
    with PytestServer(sandbox, env) as warm:
        warm_dirs = [_tree(warm.run_dir("w-")) for _ in range(2)]
        runs = [_run(sandbox, env, d, warm, pytest_args=["-s"]) for d in warm_dirs]  # the second from the same warm box
        assert len(warm._started) == 1
    outcomes = {k: v[0] for k, v in cold.outcomes.items()}
    assert outcomes == {
        ("tests.test_it", "test_passes"): "passed",
        ("tests.test_it", "test_fails"): "failed",
        ("tests.test_it", "test_errors"): "error",
        ("tests.test_it", "test_skipped"): "skipped",
        ("tests.test_it", "test_tmp_starts_empty"): "passed",
        ("tests.test_it", "test_sees"): "passed",
        ("tests.test_it", "test_sleeps"): "passed",
    }
    seen = _seen(cold, cold_dir)
    assert seen["environ"]["PYTHONPATH"].startswith("RUN/repo/src:")
    assert seen["environ"]["HOME"] == "RUN" and seen["cwd"] == "RUN/repo"
    assert seen["main"] == "pytest.__main__" and seen["mine"] == ["crfwarm", "crfwarm.helpers"]
    for run, run_dir in zip(runs, warm_dirs, strict=True):
        assert run.exit_code == cold.exit_code == 1 and run.limit_hit is None and run.junit_found
        assert {k: v[0] for k, v in run.outcomes.items()} == outcomes  # /tmp emptied: the marker test passes twice
        assert run.outcomes[("tests.test_it", "test_fails")] == cold.outcomes[("tests.test_it", "test_fails")]
        assert _seen(run, run_dir) == seen
    for run in (cold, *runs):
        assert run.stdout.splitlines()[-1].startswith("1 failed, 4 passed, 1 skipped, 1 error in ")


def test_the_wall_limit_stops_a_warm_run_and_the_box_serves_on(sandbox: Sandbox, env: TestEnv, tmp_path: Path) -> None:
    slow = sandbox.with_limits(wall_seconds=3)
    with PytestServer(sandbox, env) as warm:
        run_dir = _tree(warm.run_dir("w-"))
        (run_dir / "repo" / "conftest.py").write_text("import os\nos.environ['CRFWARM_SLEEP'] = '1'\n")
        hung = _run(slow, env, run_dir, warm, node_ids=["tests/test_it.py::test_sleeps"])
        assert len(warm._idle) == 1 and warm._idle == warm._started  # answered by the box, which serves on
        box = warm._idle[0]
        after = _run(sandbox, env, _tree(warm.run_dir("w-")), warm, node_ids=["tests/test_it.py::test_passes"])
        assert warm._started == warm._idle == [box]
        run_dir = _tree(warm.run_dir("w-"))  # a deadline already passed: killed at once, before it could run
        (run_dir / "repo" / "conftest.py").write_text("import os\nos.environ['CRFWARM_SLEEP'] = '1'\n")
        late = _run(sandbox.with_deadline(time.monotonic() - 1), env, run_dir, warm, node_ids=["tests/test_it.py"])
        assert warm._started == warm._idle == [box]
    cold_dir = _tree(tmp_path / "cold")
    (cold_dir / "repo" / "conftest.py").write_text("import os\nos.environ['CRFWARM_SLEEP'] = '1'\n")
    cold = _run(slow, env, cold_dir, None, node_ids=["tests/test_it.py::test_sleeps"])
    assert (hung.limit_hit, hung.exit_code) == (cold.limit_hit, cold.exit_code) == ("wall", None)
    assert after.exit_code == 0 and after.status_of("tests/test_it.py::test_passes")[0] == "passed"
    assert (late.limit_hit, late.exit_code) == ("wall", None)


def test_a_run_that_kills_its_warm_box_is_made_cold(
    sandbox: Sandbox, env: TestEnv, caplog: pytest.LogCaptureFixture
) -> None:
    kill_parent = textwrap.dedent("""
        import os, signal
        def test_kills_the_warm_box():
            parent = os.getppid()
            if open(f"/proc/{parent}/cmdline", "rb").read().endswith(b"--own-box\\0"):
                os.kill(parent, signal.SIGKILL)  # the warm box: the host sees it die
    """)
    with PytestServer(sandbox, env) as warm:
        run_dir = _tree(warm.run_dir("w-"))
        (run_dir / "repo" / "tests" / "test_kill.py").write_text(kill_parent)
        with caplog.at_level(logging.WARNING, logger="crf_prime.featdel.runner"):
            run = _run(sandbox, env, run_dir, warm, node_ids=["tests/test_kill.py"])
        assert warm._started == [] and warm._idle == []  # the dead box is dropped
        again = _run(sandbox, env, _tree(warm.run_dir("w-")), warm, node_ids=["tests/test_it.py::test_passes"])
        assert len(warm._started) == 1
    assert "the warm pytest box exited" in caplog.text and "running it cold" in caplog.text
    assert run.exit_code == 0 and run.status_of("tests/test_kill.py::test_kills_the_warm_box")[0] == "passed"
    assert again.exit_code == 0


def test_a_warm_run_cannot_write_its_tree_or_the_hosts_tmp(sandbox: Sandbox, env: TestEnv) -> None:
    writes = textwrap.dedent("""
        import os, pytest
        def test_writes_the_tree():
            with pytest.raises(OSError):
                open(os.path.join(os.path.dirname(__file__), "new.py"), "w")
        def test_tmp_is_the_boxs(tmp_path):
            assert str(tmp_path).startswith("/tmp/")
            open("/tmp/crfwarm-left-behind", "w").write("x")
    """)
    with PytestServer(sandbox, env) as warm:
        run_dir = _tree(warm.run_dir("w-"))
        (run_dir / "repo" / "tests" / "test_write.py").write_text(writes)
        run = _run(sandbox, env, run_dir, warm, node_ids=["tests/test_write.py"])
        home = warm.home
    assert run.exit_code == 0, run.tail()
    assert not Path("/tmp/crfwarm-left-behind").exists()
    assert not home.exists()  # closed: nothing of the server is left


def test_a_warm_run_leaves_no_process_behind(sandbox: Sandbox, env: TestEnv) -> None:
    daemon = textwrap.dedent("""
        import os, subprocess, time
        def sleepers():
            me = b"sleep\\x00607\\x00"
            return [p for p in os.listdir("/proc") if p.isdigit() and open(f"/proc/{p}/cmdline", "rb").read() == me]
        def test_leaves_a_daemon():
            subprocess.Popen(["sleep", "607"], start_new_session=True)  # out of the run's process group
            deadline = time.monotonic() + 30
            while not sleepers() and time.monotonic() < deadline:
                pass  # its command line shows once its exec is through
            assert len(sleepers()) == 1
        def test_finds_none():
            assert sleepers() == []
    """)
    with PytestServer(sandbox, env) as warm:
        runs = []
        for node in ("tests/test_daemon.py::test_leaves_a_daemon", "tests/test_daemon.py::test_finds_none"):
            run_dir = _tree(warm.run_dir("w-"))
            (run_dir / "repo" / "tests" / "test_daemon.py").write_text(daemon)
            runs.append(_run(sandbox, env, run_dir, warm, node_ids=[node]))
        assert len(warm._started) == 1
    assert [r.exit_code for r in runs] == [0, 0], [r.tail() for r in runs]


def test_a_warm_server_needs_an_isolated_sandbox(env: TestEnv) -> None:
    with pytest.raises(ValueError, match="isolated sandbox"):
        PytestServer(Sandbox(SandboxConfig(unsandboxed=True)), env)


def test_a_warm_run_needs_a_read_only_tree_under_its_runs(sandbox: Sandbox, env: TestEnv, tmp_path: Path) -> None:
    with PytestServer(sandbox, env) as warm:
        with pytest.raises(ValueError, match="read-only tree under the server's runs directory"):
            _run(sandbox, env, _tree(tmp_path / "elsewhere"), warm)
        with pytest.raises(ValueError, match="read-only tree"):
            run_pytest(sandbox, env, _tree(warm.run_dir("w-")), pythonpath=["src"], read_only_tree=False, warm=warm)


def test_gold_mutants_are_judged_the_same_warm_and_cold() -> None:
    task_dir, tasks, _ = generated(TOOLZ, 2)
    sandbox = Grader(tasks[0], task_dir).sandbox
    colds = []
    for task in tasks:
        env = ensure_test_env(task.test_env)
        cold = mutation_score(task, task_dir, cap=10, sandbox=sandbox, env=env)
        with PytestServer(sandbox, env) as warm:
            assert mutation_score(task, task_dir, cap=10, sandbox=sandbox, env=env, warm=warm) == cold
        colds.append(cold)
    assert sum(c.rejected for c in colds) > 0
    assert any(c.held_out_calls for c in colds)  # a mutant passed its target tests (warm as cold): held-out calls


def test_grading_runs_warm_and_cold_agree_and_leave_nothing() -> None:
    task_dir, tasks, _ = generated(INFLECTION, 3)
    for task in tasks:
        grader = Grader(task, task_dir)
        gold = dict(apply_unified_diff(dict(task.broken_files), task.gold_patch))
        with PytestServer(grader.sandbox, grader.env) as warm, grader.shared_base() as base:
            for changes, score in (({}, 0.0), (gold, 1.0)):  # the snapshot fails its target tests, gold passes
                hot = grader.run_tests(changes, base=base, warm=warm)
                cold = grader.run_tests(changes, base=base)
                assert hot.outcomes == cold.outcomes and hot.exit_code == cold.exit_code
                assert grader.score_run(hot, changes).score == score and len(hot.outcomes) == len(task.target_tests)
            assert sorted(os.listdir(warm.runs)) == [] and sorted(os.listdir(warm.outs)) == []


def test_a_grader_with_a_writable_tree_runs_cold_even_when_offered_a_warm_box() -> None:
    task_dir, tasks, _ = generated(INFLECTION, 3)
    task = tasks[0]
    grader = Grader(task, task_dir, config=GraderConfig(read_only_tree=False))
    gold = dict(apply_unified_diff(dict(task.broken_files), task.gold_patch))
    with PytestServer(grader.sandbox, grader.env) as warm:
        run = grader.run_tests(gold, warm=warm)
        assert warm._started == []  # never asked
    assert grader.score_run(run, gold).score == 1.0
