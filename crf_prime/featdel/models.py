"""Rows at the Feature Deletion generator's edges: the task written to JSONL, the grade of one attempt, the summary.

Field names ``target_tests`` play the role of SWE-bench's ``FAIL_TO_PASS`` (the hidden tests that cover the deleted
code); the grader reads their outcome from pytest's junit XML.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Granularity = Literal["function", "feature", "block", "tail", "class"]


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


class FeatdelTask(BaseModel):
    """One validated Feature Deletion task (a JSONL row)."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    """Stable id: ``<name>-<version>__<module.qualname>[+...]``."""
    source: SourceInfo
    granularity: Granularity
    """"function" = one body deleted; "feature" = a group of related functions deleted together; "block" = the body
    of one if/for/while/with/try inside a function; "tail" = a function's statements after its first ones; "class" =
    every method of one class."""
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
    not_servable: str = ""
    """Why the replay cannot vouch for this task (its target tests call a target under a patch the replay cannot
    reproduce); generation drops such a task and the grader refuses it. Empty = servable."""


class FailedTest(BaseModel):
    """A target test that did not pass at grading."""

    model_config = ConfigDict(frozen=True)

    name: str
    """pytest node id."""
    message: str = ""
    """Failure / error message from the junit XML (first lines), or why it is missing."""


class GradeResult(BaseModel):
    """Outcome of grading one working tree against a task."""

    model_config = ConfigDict(frozen=True)

    score: float
    """1.0 when every target test passed, else 0.0."""
    passed_fraction: float
    """Passed target tests / target tests."""
    passed: tuple[str, ...]
    failed: tuple[FailedTest, ...]
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
    "not-servable",
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
    """Public functions left out before validation, by reason (trivial body, no covering test, too central)."""
    rejections: tuple[Rejection, ...] = ()
    seconds: dict[str, float] = Field(default_factory=dict)
    """Wall time per phase (source, venv, coverage, validate, total)."""
    replay_covered: int = 0
    """Valid tasks with at least one replayable call (the rest are graded by their tests alone)."""
    replay_checked: int = 0
    """Valid tasks found before preferring covered ones (covered + uncovered)."""
    replay_dropped: dict[str, int] = Field(default_factory=dict)
    """Calls left out of the written tasks' replays, by reason."""


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


class ReplayData(BaseModel):
    """A task's replay inputs and gold's canonical outcomes on them (host-side data; outcomes never enter a box)."""

    model_config = ConfigDict(frozen=True)

    calls: tuple[ReplayCall, ...]
    expected: dict[str, Any]
    """Call id -> gold's canonical outcome (a JSON tree: returned / raised / callable, ``args_after``)."""

    def by_target(self) -> dict[int, tuple[str, ...]]:
        """Target index -> ids of the calls that hit it (a target no call hits is absent)."""
        out: dict[int, list[str]] = {}
        for c in self.calls:
            out.setdefault(c.target, []).append(c.id)
        return {t: tuple(ids) for t, ids in sorted(out.items())}
