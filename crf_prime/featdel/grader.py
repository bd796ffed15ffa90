"""The one front door for grading a Feature Deletion attempt: generation, validation, the environment (sandbox and
runtime placements), mutation testing and the hack suites all grade through :class:`Grader`.

A verdict has three parts, each in its own module: the static code policy on the agent's added code
(``policy.py``, judged before anything runs), the hidden target tests in a fresh pristine copy (``grade.py``), and
equivalence with gold on the task's recorded and generated calls, canonicalised in a box with no tests and compared
here on the host (``replay.py`` / ``replay_box.py``). Reward 1.0 needs all three; an infrastructure failure raises.
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import tempfile
from collections.abc import Collection, Iterator
from pathlib import Path

from crf_prime.featdel import lookup_guard
from crf_prime.featdel.grade import (
    GradingError,
    build_grading_tree,
    collect_changes,
    detect_hack,
    grading_run,
    guard_sites,
    hack_result,
    overlay_tree,
    result_from_run,
)
from crf_prime.featdel.models import FeatdelTask, GraderConfig, GradeResult, ReplayCall, ReplayData
from crf_prime.featdel.pytest_server import PytestServer
from crf_prime.featdel.replay import ReplayVerdict, load_replay, replay_tree, replay_trees
from crf_prime.featdel.runner import PytestRun
from crf_prime.featdel.testenv import TestEnv, ensure_test_env
from crf_prime.placement import GradingSandbox
from crf_prime.records.failing import FailingTest
from crf_prime.sandbox import Sandbox

Changes = dict[str, str | None]
"""The agent's edits to allow-listed files: path -> new text (None = deleted)."""


class Grader:
    """Grades attempts at one task. ``sandbox`` (a built sandbox, e.g. ``Sandbox(GradingSandbox())``) and ``env``
    (the task's test venv) are made on first use when not given; a Grader holds no per-attempt state, so one instance
    may grade many attempts, from many threads at once."""

    def __init__(
        self,
        task: FeatdelTask,
        task_dir: Path,
        *,
        sandbox: Sandbox | None = None,
        env: TestEnv | None = None,
        config: GraderConfig | None = None,
    ) -> None:
        if task.not_servable:
            raise GradingError(f"task {task.task_id} is not servable: {task.not_servable}")
        self.task = task
        self.task_dir = Path(task_dir)
        self.config = config or GraderConfig()
        self._sandbox = sandbox
        self._env = env

    @property
    def sandbox(self) -> Sandbox:
        """The box that runs the tests (the grading default, built on first use, when none was given)."""
        if self._sandbox is None:
            self._sandbox = Sandbox(GradingSandbox())
        return self._sandbox

    @property
    def env(self) -> TestEnv:
        if self._env is None:
            self._env = ensure_test_env(self.task.test_env)
        return self._env

    # -- whole verdicts ---------------------------------------------------------------------------------------

    def grade_tree(self, agent_root: Path) -> GradeResult:
        """Grade the working tree at ``agent_root`` (a local directory the agent edited)."""
        return self.grade(self.collect(agent_root))

    def grade(self, changes: Changes) -> GradeResult:
        """Policy, then the target tests, then (when they all pass) equivalence with gold on the replayed calls."""
        refused = self.screen(changes)
        if refused is not None:
            return refused
        run = self.run_tests(changes)
        return self.finish(self.score_run(run, changes), changes)

    def finish(self, tests: GradeResult, changes: Changes) -> GradeResult:
        """The final verdict from a tests-only grade (however the tests were run): the replay decides a pass."""
        if not self.config.replay or tests.score != 1.0 or self.task.replay is None:
            return tests
        return with_replay(tests, self.replay(changes))

    # -- the parts --------------------------------------------------------------------------------------------

    def collect(self, agent_root: Path) -> Changes:
        """The agent's allow-listed edits read from ``agent_root`` without following its symlinks."""
        return collect_changes(self.task, self.task_dir, agent_root)

    def policy(self, changes: Changes) -> str:
        """Non-empty description of the static policy violations in ``changes`` ("" when clean or the scan is off)."""
        return detect_hack(self.task, self.task_dir, changes) if self.config.scan else ""

    def screen(self, changes: Changes) -> GradeResult | None:
        """Score 0 without running anything when the policy refuses ``changes``; None when they may run."""
        hack = self.policy(changes)
        return hack_result(self.task, changes, hack) if hack else None

    def build_tree(self, changes: Changes, dest: Path, *, base: Path | None = None) -> None:
        """Write the grading tree at ``dest``: pristine base + snapshot edits + the allow-listed ``changes``
        (from ``base``, a tree of :meth:`shared_base`, by hard links when given)."""
        if base is None:
            build_grading_tree(self.task, self.task_dir, changes, dest)
        else:
            overlay_tree(self.task, base, changes, dest)

    @contextlib.contextmanager
    def shared_base(self) -> Iterator[Path]:
        """The grading tree with no changes, built once for many attempts at this task (mutation testing): each
        attempt's tree is made from it by hard links. It is never exposed writable to code under test."""
        work = Path(tempfile.mkdtemp(prefix="crf-featdel-base-"))
        try:
            self.build_tree({}, work / "repo")
            yield work / "repo"
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def run_tests(
        self,
        changes: Changes,
        *,
        wall_seconds: float | None = None,
        base: Path | None = None,
        first_failure: bool = False,
        pycs: Path | None = None,
        warm: PytestServer | None = None,
    ) -> PytestRun:
        """The target tests on a fresh grading tree in the sandbox (no policy scan: call :meth:`policy` first).
        ``base``: a tree from :meth:`shared_base` to make it from by hard links (only a read-only tree uses it).
        ``first_failure``: stop at the first failing test, when only "do they all pass" matters (validation, mutants):
        the score is the same, the failures listed are the first one and the tests not run. ``pycs``: the base's
        compiled modules, for generation's runs of gold, its mutants and the snapshot only; ``warm``: the warm pytest
        server for generation's runs of gold's mutants and the snapshot (crf_prime/featdel/pytest_server.py)."""
        return grading_run(
            self.task,
            self.task_dir,
            changes,
            sandbox=self.sandbox,
            env=self.env,
            read_only_tree=self.config.read_only_tree,
            wall_seconds=wall_seconds,
            base=base if self.config.read_only_tree else None,
            lookups=self.lookup_sites(changes),
            first_failure=first_failure,
            pycs=pycs,
            warm=warm,
        )

    def score_run(self, run: PytestRun, changes: Changes) -> GradeResult:
        """Tests-only grade of a finished target-test run (junit outcomes cross-checked with the exit status)."""
        return result_from_run(self.task, run, changes)

    def lookup_sites(self, changes: Changes) -> dict[str, tuple[int, ...]] | None:
        """Where the added code calls ``getattr``/``setattr``/``delattr`` with a computed name (file -> lines), judged
        when it runs by the lookup guard; None when the guard is off, none when the scan is (it deferred nothing:
        mutation testing grades gold's mutants so, and pays no scan per mutant)."""
        if not lookup_guard.ENABLED:
            return None
        return guard_sites(self.task, self.task_dir, changes) if self.config.scan else {}

    def replay(self, changes: Changes) -> ReplayVerdict:
        """Equivalence with gold on the task's replayed calls (a task without a replay has none: 0 calls, ok)."""
        if self.task.replay is None:
            return ReplayVerdict(calls=0, mismatches=())
        return replay_tree(
            self.sandbox,
            self.env,
            self.task,
            self.task_dir,
            lambda dest: self.build_tree(changes, dest),
            call_timeout_s=self.config.call_timeout_s,
            strict=self.config.strict_canon,
            generated=self.config.generated_calls,
            lookups=self.lookup_sites(changes),
        )

    def replay_many(
        self,
        attempts: list[Changes],
        *,
        base: Path | None = None,
        pycs: Path | None = None,
        stop_early: bool = False,
        alone: list[Collection[str] | None] | None = None,
        call_timeout_s: float | None = None,
    ) -> list[ReplayVerdict]:
        """:meth:`replay` for many attempts in one box (mutation testing: crf_prime/featdel/replay.py
        ``replay_trees``). The trees share one built base by hard links
        (``base``, else one built for this call) and, for gold's mutants only, its compiled modules (``pycs``),
        gold's outcomes in the box, to stop each tree at its first difference (``stop_early``), the calls each
        runs alone (``alone``: those whose gold run reached its mutated code) and a call's limit (``call_timeout_s``,
        else the config's)."""
        if self.task.replay is None:
            return [ReplayVerdict(calls=0, mismatches=()) for _ in attempts]
        if not attempts:
            return []
        if base is None:
            with self.shared_base() as built:
                return self.replay_many(
                    attempts,
                    base=built,
                    pycs=pycs,
                    stop_early=stop_early,
                    alone=alone,
                    call_timeout_s=call_timeout_s,
                )
        return replay_trees(
            self.sandbox,
            self.env,
            self.task,
            self.task_dir,
            [functools.partial(overlay_tree, self.task, base, changes) for changes in attempts],
            call_timeout_s=self.config.call_timeout_s if call_timeout_s is None else call_timeout_s,
            strict=self.config.strict_canon,
            generated=self.config.generated_calls,
            lookups=[self.lookup_sites(changes) for changes in attempts],
            pycs=pycs,
            stop_early=stop_early,
            alone=alone,
        )

    def replay_data(self) -> ReplayData | None:
        """The task's replay inputs (recorded and generated, each with the target it hits) and gold's outcomes."""
        if self.task.replay is None:
            return None
        calls, expected = load_replay(self.task, self.task_dir)
        served = tuple(
            ReplayCall(
                id=c["id"],
                target=c["target"],
                generated=bool(c.get("derived")),
                payload=c["payload"],
                reaches=c.get("reaches", True),
            )
            for c in calls
        )
        return ReplayData(calls=served, expected=expected)


def with_replay(result: GradeResult, verdict: ReplayVerdict) -> GradeResult:
    """Reward 1.0 needs the tests and the replay: any replayed call that differs from gold's outcome scores 0."""
    update: dict[str, object] = {"replay_calls": verdict.calls, "replay_mismatches": verdict.mismatched_calls}
    if not verdict.ok:
        failed = FailingTest(
            name="replay",
            message=f"{verdict.mismatched_calls} of {verdict.calls} replayed calls differ from the original "
            f"implementation; {verdict.detail}",
        )
        update |= {"score": 0.0, "failed": (*result.failed, failed)}
    return result.model_copy(update=update)


def grade_changes(
    task: FeatdelTask,
    task_dir: Path,
    changes: Changes,
    *,
    sandbox: Sandbox | None = None,
    env: TestEnv | None = None,
    config: GraderConfig | None = None,
    **switches: bool,
) -> GradeResult:
    """``Grader(task, task_dir, ...).grade(changes)``; ``switches`` are :class:`GraderConfig` fields (hack suites)."""
    if switches:
        config = GraderConfig.model_validate({**(config or GraderConfig()).model_dump(), **switches})
    return Grader(task, task_dir, sandbox=sandbox, env=env, config=config).grade(changes)


def grade_tree(task: FeatdelTask, task_dir: Path, agent_root: Path, **kwargs) -> GradeResult:
    """Grade the working tree at ``agent_root``: :func:`grade_changes` on its allow-listed edits."""
    return grade_changes(task, task_dir, collect_changes(task, task_dir, agent_root), **kwargs)


__all__ = ["Changes", "Grader", "GraderConfig", "grade_changes", "grade_tree", "with_replay"]
