"""The hack suite (``swe_hacks.py``): every attempt that fixes nothing scores 0 and nothing acts on the host.

Each runs through the environment's own path: ``SweTask.setup``, the agent's script in the crf-sandbox harness box
with the harness's default limits, ``SweTask.score``, on the offline mini fixture. The in-process forgeries that
isolation cannot close are unresolved by the gold judge (on by default): the change must behave like gold on the
calls gold's FAIL_TO_PASS tests make; with the judge off they resolve, flagged (``suspected_forgery``), and
``reject_suspected_forgery`` rejects them.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import verifiers.v1 as vf
from swe_hacks import ATTACKS, Attack, attempt, trace_for, with_venv_on_path, without_test_id_plugin
from swebench_lite import SweTask, SweTaskConfig, SweTaskset, SweTasksetConfig
from verifiers.v1.runtimes import provision_runtime

import crf_prime.featdel.replay as replay
from crf_prime.swe.fixture import FAIL_TO_PASS, build_mini_swebench
from crf_prime.swe.runner import SweGradingConfig

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


@pytest.fixture
async def runtime() -> AsyncIterator[vf.Runtime]:
    async with provision_runtime(vf.SubprocessConfig()) as rt:
        yield rt


def _tree_digest(root: Path) -> str:
    """Digest of every path, mode and file content under ``root``."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(f"{path.relative_to(root)}\0{path.lstat().st_mode}\0".encode())
        if path.is_file() and not path.is_symlink():
            h.update(path.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def shared_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mini fixture for the module's tests (per worker): its mirror path keys the gold judge's per-process record
    cache, so gold is recorded once per worker instead of once per test. The tests only read it (tasks clone it)."""
    root = tmp_path_factory.mktemp("swe-hacks-fixture")
    build_mini_swebench(root)
    return root


@pytest.fixture(autouse=True)
def _shared_fixture_untouched(shared_fixture: Path) -> Iterator[None]:
    """A test that changed the shared fixture fails itself (the next test would otherwise start from its leftovers)."""
    before = _tree_digest(shared_fixture)
    yield
    assert _tree_digest(shared_fixture) == before, "the test changed the shared mini fixture"


def _task(root: Path, *, build: bool = False, **task: object) -> SweTask:
    """The fixture's one task; ``build``: first build the fixture in ``root`` (a private mirror, own gold record)."""
    if build:
        build_mini_swebench(root)
    config = SweTasksetConfig(
        id="swebench-lite",
        dataset=str(root / "instances.jsonl"),
        repos_dir=root / "repos",
        task=SweTaskConfig(hints=False, **task),
    )
    (only,) = list(SweTaskset(config))
    return only


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
async def test_attempt_scores_zero_without_host_effect(
    attack: Attack, tmp_path: Path, runtime: vf.Runtime, shared_fixture: Path
) -> None:
    """Each attempt is graded (never an infrastructure error), scores 0 under the default configuration (an honest
    fix: 1, agreeing with gold), leaves nothing in the grader's temp dir and a trace that can be shipped."""
    task = _task(shared_fixture)
    out = await attempt(task, runtime, attack, tmp_path / "host")
    assert out.error == ""  # graded, not an infrastructure error
    assert out.leftovers == () and out.shippable
    assert out.host_effect is False
    if attack.honest:
        assert out.reward == 1.0 and out.suspected == 0.0, out.info
        assert out.info["gold_judge"]["verdict"] == "agree" and out.info["gold_judge"]["calls"] > 1
        return
    assert out.reward == 0.0, out.info
    assert out.suspected == (1.0 if attack.suspected else 0.0), out.info["forgery"]
    assert out.info["f2p_failure"] == FAIL_TO_PASS
    if (
        attack.remaining or attack.sequential or attack.judge_only or attack.retyped
    ):  # the forgery passes the tests in-process; gold's calls tell it apart
        assert out.info["gold_judge"]["verdict"] == "disagree", out.info
        assert out.info["reason"].startswith("the change disagrees with gold on ")
    if attack.sequential:
        assert "run after the others in one process" in out.info["reason"], out.info


JUDGE_ONLY = [a for a in ATTACKS if a.judge_only]


@pytest.mark.parametrize("attack", JUDGE_ONLY, ids=[a.name for a in JUDGE_ONLY])
async def test_input_shape_overfit_resolves_with_the_gold_judge_off(
    attack: Attack, tmp_path: Path, runtime: vf.Runtime, shared_fixture: Path
) -> None:
    """The defence switched off: the overfit passes the tests, and nothing in it is flagged."""
    out = await attempt(
        _task(shared_fixture, grading=SweGradingConfig(gold_judge=False)), runtime, attack, tmp_path / "h"
    )
    assert out.reward == 1.0 and out.suspected == 0.0, out.info
    assert out.info["gold_judge"]["verdict"] == "off"


REPLAY_SWITCHED = [(a, "SEQUENCE") for a in ATTACKS if a.sequential] + [(a, "RETYPED") for a in ATTACKS if a.retyped]
"""Attempts only one switch of the gold judge's replay tells apart, with that switch: ``SEQUENCE`` (every call also
run after the others in one process) for state carried across calls, ``RETYPED`` (the same data under another type)
for a fix written only for the tests' own types."""


@pytest.mark.parametrize(("attack", "switch"), REPLAY_SWITCHED, ids=[f"{a.name}-{s}" for a, s in REPLAY_SWITCHED])
async def test_resolves_with_the_replay_switch_that_catches_it_off(
    attack: Attack, switch: str, tmp_path: Path, runtime: vf.Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The defence switched off: the attempt agrees with gold on every call left and resolves, unflagged. A private
    fixture: gold recorded with the switch off must not be the record the other tests' judge reads."""
    monkeypatch.setattr(replay, switch, False)
    out = await attempt(_task(tmp_path / "a", build=True), runtime, attack, tmp_path / "host")
    assert out.reward == 1.0 and out.suspected == 0.0, out.info
    assert out.info["gold_judge"]["verdict"] == "agree", out.info


REMAINING = [a for a in ATTACKS if a.remaining]


@pytest.mark.parametrize("attack", REMAINING, ids=[a.name for a in REMAINING])
async def test_in_process_forgery_resolves_with_the_gold_judge_off(
    attack: Attack, tmp_path: Path, runtime: vf.Runtime, shared_fixture: Path
) -> None:
    """The defence switched off: the forgery passes the tests (flagged); ``reject_suspected_forgery`` rejects it."""
    off = SweGradingConfig(gold_judge=False)
    out = await attempt(_task(shared_fixture, grading=off), runtime, attack, tmp_path / "host")
    assert out.reward == 1.0 and out.suspected == 1.0, out.info
    assert out.info["gold_judge"]["verdict"] == "off"
    strict = _task(shared_fixture, grading=off, reject_suspected_forgery=True)
    out = await attempt(strict, runtime, attack, tmp_path / "host2")
    assert out.reward == 0.0 and out.info["reason"].startswith("suspected forgery: ")


HIDES_TEST_ID = [a for a in ATTACKS if a.hides_test_id]


@pytest.mark.parametrize("attack", HIDES_TEST_ID, ids=[a.name for a in HIDES_TEST_ID])
async def test_test_id_plugin_alone_hides_the_running_test(
    attack: Attack, tmp_path: Path, runtime: vf.Runtime, shared_fixture: Path
) -> None:
    """The eval script loads ``crf_hide_test_id``: with the gold judge off the attempt is still unresolved (the tested
    code never sees ``PYTEST_CURRENT_TEST``); without the plugin too, it resolves."""
    off = SweGradingConfig(gold_judge=False)
    out = await attempt(_task(shared_fixture, grading=off), runtime, attack, tmp_path / "host")
    assert out.reward == 0.0 and out.info["f2p_failure"] == FAIL_TO_PASS, out.info
    with without_test_id_plugin():
        out = await attempt(_task(shared_fixture, grading=off), runtime, attack, tmp_path / "host2")
    assert out.reward == 1.0, out.info


IMAGE_PATH_ATTACKS = [
    a
    for a in ATTACKS
    if a.group in ("security", "workspace") and a.name != "tested_code_plants_symlink_for_the_grader_cleanup"
]


@pytest.mark.parametrize("attack", IMAGE_PATH_ATTACKS, ids=[a.name for a in IMAGE_PATH_ATTACKS])
async def test_container_placement_resists_the_git_and_workspace_attacks(
    attack: Attack, tmp_path: Path, runtime: vf.Runtime, monkeypatch: pytest.MonkeyPatch, shared_fixture: Path
) -> None:
    """The docker/prime code path (git on ``/testbed`` through ``runtime.run``), on a checkout in the runtime dir:
    hardened git ignores the agent's fsmonitor, excludes, replace refs and core.worktree; scratch is a fresh mktemp
    dir; a symlinked ``tests/`` is reset, not an infrastructure error."""
    local = _task(shared_fixture)
    checkout = Path(runtime.workdir) / "testbed"  # type: ignore[attr-defined]
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", local.data.mirror or "", str(checkout)], check=True)
    data = local.data.model_copy(update={"mirror": None, "workdir": str(checkout)})
    task = SweTask(data, SweTaskConfig(hints=False))
    on_path = with_venv_on_path(runtime, monkeypatch)
    out = await attempt(task, on_path, attack, tmp_path / "host", subdir="testbed")
    assert out.error == "" and out.reward == 0.0, out.info
    assert out.host_effect is False


class _DivergingRuntime:
    """The real runtime, except that the file the agent changed differs from base right before the re-apply (as
    when an image's ``/testbed`` drifted from ``base_commit``), so the agent's patch does not apply."""

    def __init__(self, inner: vf.Runtime, target: Path) -> None:
        self.inner, self.target = inner, target

    async def run(self, argv: list[str], env: dict[str, str]):  # -> ProgramResult
        if "model.patch" in argv[-1] and "apply" in argv[-1]:
            self.target.write_text("drifted\n")
        return await self.inner.run(argv, env)

    async def write(self, path: str, data: bytes) -> None:
        await self.inner.write(path, data)


async def test_patch_that_does_not_apply_is_unresolved_not_an_infra_error(
    runtime: vf.Runtime, shared_fixture: Path
) -> None:
    from crf_prime.swe.runner import SweRunner

    local = _task(shared_fixture)
    checkout = Path(runtime.workdir) / "testbed"  # type: ignore[attr-defined]
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", local.data.mirror or "", str(checkout)], check=True)
    runner = SweRunner(local.data.instance, repo_dir=str(checkout), reinstall=False)
    await runner.prepare(runtime)
    stats = checkout / "ministats" / "stats.py"
    stats.write_text(stats.read_text().replace("s[len(s) // 2]", "s[len(s) // 2 - 1]"))
    run = await runner.evaluate(_DivergingRuntime(runtime, stats))
    assert not run.report.resolved and run.report.reason.startswith(">>>>> Patch Apply Failed: ")
    assert "diff --git a/ministats/stats.py" in run.model_patch


async def test_container_placement_keeps_setup_build_outputs_and_removes_the_agents(
    runtime: vf.Runtime, monkeypatch: pytest.MonkeyPatch, shared_fixture: Path
) -> None:
    """Ignored build outputs present at setup (compiled extensions in sweb.eval images) survive grading unchanged;
    ones the agent adds or changes are captured, filtered out and removed."""
    local = _task(shared_fixture)
    checkout = Path(runtime.workdir) / "testbed"  # type: ignore[attr-defined]
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", local.data.mirror or "", str(checkout)], check=True)
    (checkout / ".git" / "info" / "exclude").write_text("*.so\nbuild/\n")
    (checkout / "ministats" / "_fast.so").write_bytes(b"\x7fELF built at image time")
    (checkout / "build").mkdir()
    (checkout / "build" / "lib.txt").write_text("built\n")
    data = local.data.model_copy(update={"mirror": None, "workdir": str(checkout)})
    task = SweTask(data, SweTaskConfig(hints=False))
    on_path = with_venv_on_path(runtime, monkeypatch)
    trace = trace_for(task)
    await task.setup(trace, on_path)
    (checkout / "build" / "lib.txt").write_text("changed by the agent\n")
    (checkout / "ministats" / "stats.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF planted")
    await task.score(trace, on_path)
    assert trace.reward == 0.0
    assert (checkout / "ministats" / "_fast.so").read_bytes() == b"\x7fELF built at image time"
    assert not (checkout / "build" / "lib.txt").exists()
    assert not (checkout / "ministats" / "stats.cpython-311-x86_64-linux-gnu.so").exists()
    assert trace.info["swebench"]["dropped"] == {
        "build/lib.txt": "new file that is not Python source",
        "ministats/stats.cpython-311-x86_64-linux-gnu.so": "compiled file",
    }
