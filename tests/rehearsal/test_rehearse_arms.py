"""How rehearse.py ends an arm (poll_arm) and which arms share env servers: fast, no prime-rl needed."""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path

import pytest
from rehearse_support import REHEARSE, load_script

rehearse = load_script("rehearsal_rehearse", REHEARSE / "rehearse.py")


class FakeProc:
    """A Popen stand-in: ``code`` None = still running."""

    def __init__(self, code: int | None) -> None:
        self.code = code
        self.pid = -1  # no such process: the CPU meter finds nothing

    def poll(self) -> int | None:
        return self.code


class FakeProcs:
    def __init__(self, **procs: FakeProc) -> None:
        self.procs = procs
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


def _run(t0: float, **procs: FakeProc):
    marker = uuid.uuid4().hex  # no live process carries it
    return rehearse.Launched("learn-a0", 3, Path("/nonexistent"), {}, [], FakeProcs(**procs), marker, t0)


@pytest.mark.parametrize(
    ("trainer", "orchestrator", "other", "age", "status"),
    [
        (0, 0, None, 1, "ok"),  # both finished
        (None, None, None, 1, None),  # still running
        (None, None, 1, 1, "failed: inference exited"),  # a process died
        (0, None, None, 1000, "ok"),  # trainer done, orchestrator still evaluating at the timeout
        (None, None, None, 1000, "timeout after 100 s"),
    ],
)
def test_poll_arm_status(trainer, orchestrator, other, age, status) -> None:
    run = _run(
        time.monotonic() - age,
        trainer=FakeProc(trainer),
        orchestrator=FakeProc(orchestrator),
        inference=FakeProc(other),
    )
    over = rehearse.poll_arm(run, timeout_s=100)
    assert over is (status is not None)
    assert run.procs.stopped is over
    if status is None:
        assert run.status == "running"
    else:
        assert run.status.startswith(status), run.status


def test_learning_arms_sample_and_ladder_arms_script() -> None:
    """rehearse_arms runs the sampling arms side by side (one env-server set) and the scripted ones alone."""
    assert {a for a, spec in rehearse.ARMS.items() if spec.policy == "sample"} == set(rehearse.LEARN_ARMS)
    assert {f"learn-{o}" for o in rehearse.OBJECTIVES} | {"learn-a0"} == set(rehearse.LEARN_ARMS)


def test_cpu_meter_follows_the_process_tree_and_keeps_exited_processes(tmp_path: Path) -> None:
    """The meter counts the started process and its child under the Procs name's role, nothing else, and keeps
    their readings after they exit."""
    procs = rehearse.Procs(tmp_path, dict(os.environ))
    code = (
        "import subprocess, sys; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
        "print(c.pid, flush=True); c.wait()"
    )
    parent = procs.start("trainer", [sys.executable, "-c", code], cwd=tmp_path)
    meter = rehearse.CpuMeter()
    try:
        log = tmp_path / "trainer.log"
        deadline = time.monotonic() + 30
        while not log.read_text().strip():  # the child's pid, once it exists
            assert time.monotonic() < deadline, "child never started"
            time.sleep(0.05)
        child = int(log.read_text().split()[0])
        meter.sample(procs)
        assert set(meter.last) == {parent.pid, child}
    finally:
        procs.stop()
    meter.sample(procs)  # both gone: their last readings stay
    assert set(meter.last) == {parent.pid, child}
    assert set(meter.by_role()) == {"trainer"}


def test_leftover_check_finds_an_unmarked_process_by_its_session(tmp_path: Path) -> None:
    """A started process whose environment lacks the marker (as prime-rl's retitled processes look in /proc) is
    found through its session, and not once it is stopped."""
    procs = rehearse.Procs(tmp_path, dict(os.environ))
    proc = procs.start("orchestrator", [sys.executable, "-c", "import time; time.sleep(600)"], cwd=tmp_path)
    marker = uuid.uuid4().hex
    try:
        sessions = frozenset({proc.pid})
        assert [line.split()[0] for line in rehearse.marked_processes(marker, sessions)] == [str(proc.pid)]
        assert rehearse.marked_processes(marker) == []
    finally:
        procs.stop()
    assert rehearse.marked_processes(marker, sessions) == []


def test_the_default_rehearses_every_plumbing_arm_once() -> None:
    """run.sh without --arms: the five ladder arms, swebench-lite, the relayed arm and the three live arms; groups
    expand in order and an arm named twice runs once."""
    assert rehearse.expand_arms(["all"]) == [
        "a0", "a1", "a2", "a3", "a4", "swe", "relay", "a2-live", "a3-live", "a4-live",
    ]  # fmt: skip
    assert rehearse.expand_arms(["a3", "ladder"]) == ["a3", "a0", "a1", "a2", "a4"]
    assert set(rehearse.expand_arms(["learn"])) == set(rehearse.LEARN_ARMS)
    assert all(a in rehearse.ARMS for group in rehearse.GROUPS.values() for a in group)


def test_a4_runs_long_enough_for_its_replay_source() -> None:
    """A4 (and its live twin) run at least 8 steps whatever --steps says: prime-rl's seeded source draw first puts
    the replay source in a training batch at step 6-8 at the rehearsal's batch size."""
    assert rehearse.ARMS["a4"].min_steps == 8
    assert rehearse.ARMS["a4-live"].min_steps >= 8
    assert {a for a, spec in rehearse.ARMS.items() if spec.min_steps > 1} == {"a4", "a4-live"}


def test_a4_live_runs_until_a_third_replay_state_is_drawn() -> None:
    """The live replay cap binds from the third state asked on; prime-rl draws each group's source with
    ``random.Random(42).choices`` weighted by the sources' ratios (orchestrator/train_source.py), so the rollouts
    drawn before the third replay group are fixed: A4-live's steps at batch 8 must cover them."""
    import random
    import tomllib

    sources = tomllib.loads((rehearse.LADDER / "a4_all.toml").read_text())["orchestrator"]["train"]["source"]
    cpu = tomllib.loads((rehearse.HERE / "cpu.toml").read_text())["orchestrator"]
    names = [s["name"] for s in sources]
    ratios = [float(s.get("ratio", 1.0)) for s in sources]
    size = {s["name"]: s.get("group_size", cpu["group_size"]) for s in sources}
    rng, rollouts, replays = random.Random(42), 0, 0
    while replays < 3:
        name = rng.choices(names, weights=ratios, k=1)[0]
        rollouts += size[name]
        replays += name == "replay"
    assert rehearse.ARMS["a4-live"].min_steps * cpu["batch_size"] >= rollouts


def test_leftover_check_ignores_a_zombie(tmp_path: Path) -> None:
    """An exited child its parent has not reaped yet (a zombie: what a container's init leaves for a while) is not a
    process left behind; the same child alive is."""
    import subprocess

    marker = uuid.uuid4().hex
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        env={**os.environ, "CRF_REHEARSAL_RUN": marker},
        stdin=subprocess.PIPE,
    )
    try:
        assert [line.split()[0] for line in rehearse.marked_processes(marker)] == [str(child.pid)]
        child.stdin.close()  # it exits; not waited for, it stays a zombie of this process
        deadline = time.monotonic() + 30
        while (Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "Z":
            assert time.monotonic() < deadline, "child never exited"
            time.sleep(0.05)
        assert rehearse.marked_processes(marker) == []
    finally:
        child.kill()
        child.wait()


def test_loss_overlays_set_the_objective_and_only_cispo_departs_from_its_defaults(tmp_path: Path) -> None:
    import tomllib

    cispo = tomllib.loads(rehearse.loss_overlay(tmp_path, "cispo").read_text())["trainer"]["loss"]
    assert cispo == {"type": "custom", "import_path": "loss_fns.policy.cispo", "kwargs": {"ratio_max": 1.28}}
    dapo = tomllib.loads(rehearse.loss_overlay(tmp_path, "dapo").read_text())["trainer"]["loss"]
    assert dapo == {"type": "custom", "import_path": "loss_fns.policy.dapo"}
