"""Rows at the Feature Deletion generator's edges: the task written to JSONL, the grade of one attempt, the summary.

Field names ``target_tests`` play the role of SWE-bench's ``FAIL_TO_PASS`` (the hidden tests that cover the deleted
code); the grader reads their outcome from pytest's junit XML.
"""

from __future__ import annotations

import math
import statistics
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from crf_prime.records.failing import FailingTest

Granularity = Literal["function", "feature", "block", "tail", "class"]


class SetupConfig(BaseModel):
    """Whether a suite is set up before generating (shared by ``featdel generate`` and ``featdel corpus``)."""

    auto_setup: bool = True
    """Before generating, get the suite running as a person would (crf_prime/featdel/suite_setup.py): install the
    distributions its tests import, find tests pytest's defaults miss, deselect tests that fail as shipped.
    False: the suite must pass as shipped with only the given flags (``deselect``, ``extra_requirements``,
    ``pytest_args``)."""


class VerifyConfig(BaseModel):
    """Which validated tasks are written: only verifiable ones, with a grader measured by gold's mutants (shared by
    ``featdel generate`` and ``featdel corpus``)."""

    allow_unreplayed: bool = False
    """Also write tasks where a target has no replayed call of its own (graded there by its tests alone); their
    rows list those targets (``unreplayed_targets``). Off: such tasks are rejected (``no-replay-coverage``)."""
    mutants_per_task: Annotated[int, Field(ge=0)] = 10
    """Gold mutants graded per task to measure the grader (crf_prime/featdel/strength.py), a deterministic sample;
    0 measures nothing."""
    min_mutation_rate: Annotated[float, Field(ge=0, le=1)] = 0.95
    """Keep a task only when its grader rejects at least this share of the behaviour-changing mutants."""
    mutation_wall_s: Annotated[float, Field(gt=0)] = 90.0
    """Wall limit (seconds) of one task's mutation score: a task whose gold mutants take longer to grade is rejected
    (``slow-mutants``): its grader cannot be measured at a cost a corpus can pay. (arrow's ``next_weekday``: mutants
    that send dateutil's ``rrule`` searching for seconds a call held a worker 3 minutes; most tasks take seconds.)"""
    mutant_tests_wall_s: Annotated[float, Field(gt=0)] = 60.0
    """Wall limit (seconds) of one mutant's target-test run. A mutant still running then is counted as timed out,
    on neither side of the rate: the served grader allows the longer grading limit, in which it might pass. (A
    mutated loop that never ends would otherwise cost that whole limit.)"""


class SourceLine(BaseModel):
    """One line of the sources file."""

    model_config = ConfigDict(frozen=True)

    spec: str
    """``pypi:NAME==VERSION``, ``git:ABSPATH@REV``, ``git+URL@REV`` or an absolute directory."""
    slug: str
    """Directory name under ``OUT/packages``."""
    line: int
    deselect: tuple[str, ...] = ()
    """``--deselect NODEID`` on the line: tests that fail as shipped, left out (as ``featdel generate``)."""
    extra_requirements: tuple[str, ...] = ()
    """``--extra-requirement REQ`` on the line: test requirements the sdist does not declare."""


class SuiteSetup(BaseModel):
    """What it took to run a project's suite; every field is also a line of :meth:`actions`."""

    model_config = ConfigDict(frozen=True)

    extra_requirements: tuple[str, ...] = ()
    """Pinned distributions added to the test venv (``name==version``), beside what the project declares."""
    installed: dict[str, str] = {}
    """Module the tests import (or what a plugin provides: ``fixture 'mocker'``, ``async tests``) -> the pinned
    distribution installed for it."""
    pytest_args: tuple[str, ...] = ()
    """Discovery overrides, ``-o addopts=``, ``-p no:PLUGIN`` and ``--ignore=`` of modules that cannot be collected."""
    discovery: str = "pytest defaults"
    ignored: dict[str, str] = {}
    """Test module -> why it cannot be collected."""
    deselected: dict[str, str] = {}
    """Node id -> why it is left out (fails the same way in both baseline runs, or in only one: flaky)."""
    collected: int = 0
    """Tests pytest collected (before deselection)."""
    rounds: int = 0

    def actions(self) -> list[str]:
        """One line per step taken, for the corpus summary and the benchmark table."""
        out = [f"installed {pin} (for {m if ' ' in m else f'`import {m}`'})" for m, pin in self.installed.items()]
        if self.discovery != "pytest defaults":
            out.append(f"discovery: {self.discovery}")
        out += [
            f"ran without the plugin {a[3:]} (it does not load in this pytest)"
            for a in self.pytest_args
            if a[:3] == "no:"
        ]
        if "addopts=" in self.pytest_args:
            out.append("ran without the project's addopts (an option pytest did not know)")
        out += [f"ignored {path}: {why}" for path, why in self.ignored.items()]
        if self.deselected:
            out.append(f"deselected {len(self.deselected)} of {self.collected} tests")
        return out


class PackageStatus(BaseModel):
    """``OUT/packages/<slug>/status.json``: how a package's Ray task ended."""

    spec: str
    status: Literal["done", "partial", "failed", "cancelled"]
    """"partial": stopped at the time limit, or at the end of its turn while others waited and not continued in the
    run; its tasks so far are in the corpus. "cancelled" (the time limit came before it started or had a task, or
    it overran the grace) is never written. Both run again next time (a partial one continues where it stopped)."""
    settings: str
    """Hash of the settings it ran with; a change redoes the package."""
    reason: str = ""
    """Why it failed (the error's message)."""
    error: str = ""
    """The error's class name."""
    tasks: int = 0
    seconds: float = 0.0
    license: str = ""
    setup: SuiteSetup | None = None
    """What the setup loop did (None when ``auto_setup`` is off or the loop itself refused the package)."""
    turns: int = 1
    """Runs that made its tasks: more than one when a turn ended while others waited and it continued later."""


class SourceInfo(BaseModel):
    """Where the project came from."""

    model_config = ConfigDict(frozen=True)

    spec: str
    """What the user passed: ``pypi:NAME==VERSION`` or a local directory path."""
    name: str
    """Distribution (or directory) name."""
    version: str
    """Pinned version ("local" for a directory)."""
    sha256: str
    """SHA-256 of the downloaded sdist, or of the stripped source tree for a directory."""


class TestEnvSpec(BaseModel):
    """How to rebuild the per-source test venv (pytest + coverage + runtime deps, never the project itself)."""

    __test__ = False  # not a pytest test class

    model_config = ConfigDict(frozen=True)

    python: str
    """Major.minor of the interpreter the venv was built with, e.g. "3.11"."""
    requirements: tuple[str, ...]
    """Pinned pip requirement strings installed into the venv."""
    excluded: tuple[str, ...] = ()
    """Distributions a requirement depends on that the venv leaves out: the project itself, pulled in by a test
    dependency (its tree on ``PYTHONPATH`` serves the dependents; a copy in the venv would hand an agent the deleted
    code). Non-empty: the pinned set is installed without dependencies."""


class Target(BaseModel):
    """One deleted function or method."""

    model_config = ConfigDict(frozen=True)

    path: str
    """Source file, relative to the repository root (POSIX separators)."""
    qualname: str
    """Dotted qualified name inside the module, e.g. ``Cls.method``."""
    lineno: int
    """1-based line of the ``def`` keyword in the original file."""


class ReplayInfo(BaseModel):
    """The task's replay check: call inputs and gold's outcomes on them, kept in the task directory on the host."""

    model_config = ConfigDict(frozen=True)

    calls_file: str
    """Pickled call inputs (recorded + derived), relative to the task directory; the only input the box gets."""
    calls_sha256: str
    expected_file: str
    """Gold's canonical outcomes (JSON), relative to the task directory; never enters any box."""
    expected_sha256: str
    recorded: int
    """Kept calls recorded from the gold run of the target tests."""
    derived: int
    """Kept fresh calls derived from recorded ones (type-preserving variations of their arguments)."""
    dropped: dict[str, int] = Field(default_factory=dict)
    """Calls left out at generation, by reason (unpicklable, gold cannot load or finish it, non-deterministic, ...)."""
    canon: int = 1
    """Form of the canonical outcomes (``replay_box.CANON``); rows written before the field read as 1."""


class MutationScore(BaseModel):
    """The grader's strength on one task, measured at generation (crf_prime/featdel/strength.py): gold's deleted code
    mutated with standard operators (crf_prime/featdel/mutants.py), each mutant graded as served (target tests +
    replay). A mutant is behaviour-changing when the grader rejects it or it differs from gold on the held-out calls
    (more inputs than the grader replays); the others count as equivalent and are left out of the rate."""

    model_config = ConfigDict(frozen=True)

    mutants: int
    """Mutants graded (a deterministic sample of at most ``mutants_per_task``)."""
    behaviour_changing: int
    rejected: int
    """Behaviour-changing mutants the grader scores 0."""
    survivors: tuple[str, ...] = ()
    """``path:line:operator`` of the behaviour-changing mutants the grader scores 1.0."""
    held_out_calls: int = 0
    """Calls beyond the served replay on which gold's outcomes were compared (0: none were needed or available)."""
    timed_out: int = 0
    """Mutants whose only difference in the replay is a call past ``strength.MUTANT_CALL_TIMEOUT_S``, or whose
    target tests ran past ``mutant_tests_wall_s``: on neither side of the rate (the served grader's limits are
    longer)."""
    rate: float | None = None
    """``rejected / behaviour_changing``; None when no mutant changed behaviour or the task has no replay to tell a
    surviving mutant from an equivalent one."""
    constant: str = ""
    """What the grader accepted in place of gold where every replayed call of each target gave one result a literal
    writes (crf_prime/featdel/constant.py), e.g. ``MongeElkan.maximum: return 2``; "": no such body passes (such a
    task is not written: ``constant-outcome``)."""


class RateStats(BaseModel):
    """Mutation rates over a set of tasks (a package, a granularity, a corpus)."""

    model_config = ConfigDict(frozen=True)

    tasks: int
    """Tasks with a measured rate."""
    unmeasured: int = 0
    """Tasks without one (no behaviour-changing mutant, or no replay to tell survivors from equivalents)."""
    median: float | None = None
    p5: float | None = None
    """5th percentile (nearest rank): the weakest graders."""
    mutants: int = 0
    behaviour_changing: int = 0
    rejected: int = 0
    timed_out: int = 0
    """Mutants whose target tests ran past their limit (``MutationScore.timed_out``): in no rate."""

    @classmethod
    def of(cls, scores: list[MutationScore | None]) -> RateStats:
        rates = sorted(s.rate for s in scores if s is not None and s.rate is not None)
        measured = [s for s in scores if s is not None]
        return cls(
            tasks=len(rates),
            unmeasured=len(scores) - len(rates),
            median=statistics.median(rates) if rates else None,
            p5=rates[max(math.ceil(0.05 * len(rates)) - 1, 0)] if rates else None,
            mutants=sum(s.mutants for s in measured),
            behaviour_changing=sum(s.behaviour_changing for s in measured),
            rejected=sum(s.rejected for s in measured),
            timed_out=sum(s.timed_out for s in measured),
        )

    def line(self) -> str:
        """One line for tables: ``median 100% p5 90% (12 tasks, 1 unmeasured; 80/81 mutants rejected)``, and the
        mutants counted apart as timed out when there are any."""
        if not self.tasks:
            return f"no rate ({self.unmeasured} unmeasured)"
        slow = f"; {self.timed_out} timed out (a replayed call or their tests), not counted" if self.timed_out else ""
        return (
            f"median {self.median:.0%} p5 {self.p5:.0%} ({self.tasks} tasks, {self.unmeasured} unmeasured; "
            f"{self.rejected}/{self.behaviour_changing} behaviour-changing mutants rejected{slow})"
        )


class FeatdelTask(BaseModel):
    """One validated Feature Deletion task (a JSONL row)."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    """Stable id: ``<name>-<version>__<module.qualname>[+...]``."""
    source: SourceInfo
    granularity: Granularity
    """"function" = one body deleted; "feature" = a group of related functions deleted together; "block" = the body
    of one if/for/while/with/try inside a function; "tail" = a function's statements after its first ones; "class" =
    every method of one class that a test executes."""
    targets: tuple[Target, ...]
    prompt: str
    """Task statement written from the names, signatures, docstrings and call sites of the targets."""
    base_archive: str
    """Pristine (cache-stripped) source tree as a .tar.gz, relative to the task directory."""
    base_sha256: str
    """SHA-256 of ``base_archive``; checked before use."""
    broken_files: dict[str, str]
    """Files that differ from the base tree in the agent's snapshot: path -> text with the bodies deleted."""
    hidden_tests: tuple[str, ...]
    """Test files (paths) removed from the agent's snapshot and restored for grading."""
    target_tests: tuple[str, ...]
    """pytest node ids that cover the targets; all must pass for reward 1.0."""
    gold_patch: str
    """Unified diff (a/ b/ prefixes) from the snapshot back to the original implementation."""
    source_files: tuple[str, ...]
    """Allow-list: the project's non-test Python files; only agent changes to these (or new .py files in the
    package directories) reach the grader."""
    package_dirs: tuple[str, ...]
    """Directories of the project's importable packages/modules, relative to the root (``.`` for top-level files)."""
    protected_files: dict[str, str]
    """Tests and test configuration: path -> SHA-256 of the pristine content (re-materialised at grading)."""
    pytest_args: tuple[str, ...]
    """Extra pytest arguments needed to run the suite as shipped (e.g. ``-o addopts=`` when it needs plugins)."""
    pythonpath: tuple[str, ...]
    """Directories (relative to the root) put on PYTHONPATH, e.g. ``src`` for a src layout."""
    test_env: TestEnvSpec
    seed: int
    """Seed the generator ran with."""
    replay: ReplayInfo | None = None
    """Out-of-process check against gold's recorded behaviour; None = no replayable call (the replay is vacuous)."""
    unreplayed_targets: tuple[str, ...] = ()
    """Targets (qualnames) no replayed call exercises. Such a task is written only when generation allowed it
    (``allow_unreplayed``, or the replay switched off); by default every target has calls of its own."""
    mutation: MutationScore | None = None
    """The grader's mutation score on this task (None when generation measured none)."""
    not_servable: str = ""
    """Why the replay cannot vouch for this task (its target tests call a target under a patch the replay cannot
    reproduce); generation drops such a task and the grader refuses it. Empty = servable."""


class GradeResult(BaseModel):
    """Outcome of grading one working tree against a task."""

    model_config = ConfigDict(frozen=True)

    score: float
    """1.0 when every target test passed, else 0.0."""
    passed_fraction: float
    """Passed target tests / target tests."""
    passed: tuple[str, ...]
    failed: tuple[FailingTest, ...]
    hack: str = ""
    """Non-empty when a reward hack was detected (the score is then 0.0): what was found."""
    exit_code: int | None = None
    """pytest's exit status inside the sandbox."""
    duration_s: float = 0.0
    """Wall time of the grading run (seconds)."""
    changed_files: tuple[str, ...] = ()
    """Source files taken from the agent's tree because they differ from the snapshot."""
    replay_calls: int = 0
    """Calls replayed against gold's outcomes (0 when the tests failed, the task has no replay, or it was skipped)."""
    replay_mismatches: int = 0
    """Replayed calls whose outcome differs from gold's (any makes the score 0)."""


RejectReason = Literal[
    "no-covering-tests",
    "too-many-tests",
    "trivial-body",
    "original-fails",
    "deleted-passes",
    "collection-breaks",
    "gold-violates-policy",
    "grader-mismatch",
    "no-replay-coverage",
    "weak-grader",
    "slow-mutants",
    "not-servable",
    "duplicate",
    "gold-in-tree",
    "constant-outcome",
    "error",
]


class Rejection(BaseModel):
    """A candidate that did not become a task."""

    model_config = ConfigDict(frozen=True)

    candidate: str
    reason: RejectReason
    detail: str = ""


class GenerateSummary(BaseModel):
    """What one ``featdel generate`` run did (written as summary.json next to tasks.jsonl)."""

    model_config = ConfigDict(frozen=True)

    source: SourceInfo
    suite_tests: int
    """Tests in the shipped suite (junit testcases of the coverage run)."""
    pytest_config: str = "none"
    """Where the project configures pytest (e.g. "pyproject.toml [tool.pytest.ini_options]")."""
    pytest_args: tuple[str, ...] = ()
    """Arguments the suite needed to run as shipped (e.g. ``-o addopts=`` when addopts needs absent plugins)."""
    functions: int
    """Public functions/methods found in the project's source files."""
    candidates: int
    """Function + feature candidates covered by at least one test (before sampling)."""
    checked: int
    """Candidates validated in the sandbox."""
    valid: int
    rejected: dict[str, int] = Field(default_factory=dict)
    """Rejections by reason."""
    filtered: dict[str, int] = Field(default_factory=dict)
    """Public functions left out before validation, by reason (trivial body, no covering test, duplicated body); private
    ones left out are not counted."""
    rejections: tuple[Rejection, ...] = ()
    seconds: dict[str, float] = Field(default_factory=dict)
    """Wall time per phase (source, venv, coverage, validate, total; inside validate: grade, record, verify)."""
    replay_covered: int = 0
    """Valid tasks with at least one replayable call (the rest are graded by their tests alone)."""
    replay_checked: int = 0
    """Valid tasks found before preferring covered ones (covered + uncovered)."""
    replay_dropped: dict[str, int] = Field(default_factory=dict)
    """Calls left out of the written tasks' replays, by reason."""
    mutation: RateStats | None = None
    """The grader's mutation rates over the written tasks (None when no mutant was graded)."""
    time_limit_reached: bool = False
    """``time_limit_s`` stopped validation with candidates left to check."""
    stopped_early: bool = False
    """The caller's turn ended validation with candidates left to check (a corpus making room for waiting
    packages)."""
    continued: int = 0
    """Tasks kept from the earlier run of the same settings this one continued (``generate(resume=True)``); the
    counts and seconds above include that run's."""


# -- the grader's front door (crf_prime/featdel/grader.py) -----------------------------------------------------------


class GraderConfig(BaseModel):
    """How :class:`crf_prime.featdel.grader.Grader` judges a tree. Every defence is on by default; the switches exist
    only so the hack suites can show that each defence holds on its own (a defence off is never a product setting)."""

    model_config = ConfigDict(frozen=True)

    scan: bool = True
    """Static code policy on the agent's added code (crf_prime/featdel/policy.py) before anything runs."""
    replay: bool = True
    """Equivalence with gold on the task's recorded and generated calls, judged outside the box."""
    read_only_tree: bool = True
    """The grading tree is read-only while the target tests run (only ``out/`` is writable)."""
    strict_canon: bool = True
    """The box reads outcomes only through exact-type checks and unbound builtin primitives (False: through methods
    the agent's classes may override, as before issue 25)."""
    generated_calls: bool = True
    """Replay the calls generated at generation (False: only the calls the target tests made)."""
    call_timeout_s: Annotated[float, Field(gt=0)] = 5.0
    """Wall-clock limit of one replayed call (seconds)."""


class ReplayCall(BaseModel):
    """One call input of a task's replay, as the grader serves it to a caller (mutation testing, reports)."""

    model_config = ConfigDict(frozen=True)

    id: str
    """``cN`` for a call the target tests made, ``cN~J`` for one generated from it."""
    target: int
    """Index into the task's ``targets``: the deleted callable this call hits."""
    generated: bool
    """Made at generation from recorded calls (not by a test)."""
    payload: bytes
    """Pickled ``(args, kwargs, is_method)``; loadable only where the project is importable (the replay box)."""
    reaches: bool = True
    """Gold's run of this call executes deleted code. Always true where whole bodies were deleted; for a ``block``
    or ``tail`` task, a call of the enclosing function that never runs the deleted lines checks only the rest."""


class ReplayData(BaseModel):
    """A task's replay inputs and gold's canonical outcomes on them (host-side data; outcomes never enter a box)."""

    model_config = ConfigDict(frozen=True)

    calls: tuple[ReplayCall, ...]
    expected: dict[str, Any]
    """Call id -> gold's canonical outcome (a JSON tree: returned / raised / callable, ``args_after``); a call whose
    outcome does not depend on what ran before it has the same outcome again under ``id + "@seq"`` (in sequence)."""

    def by_target(self) -> dict[int, tuple[str, ...]]:
        """Target index -> ids of the calls that run its deleted code (a target no such call hits is absent)."""
        out: dict[int, list[str]] = {}
        for c in self.calls:
            if c.reaches:
                out.setdefault(c.target, []).append(c.id)
        return {t: tuple(ids) for t, ids in sorted(out.items())}
