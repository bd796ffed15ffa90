"""Feature Deletion taskset (verifiers 0.4.0 v1): re-implement a deleted, tested feature of a real project.

Data vs behaviour as in ``verifiers/v1/task.py``: ``FeatureDeletionData`` carries one validated row written by
``crf-prime featdel generate`` (``crf_prime.featdel.models.FeatdelTask``) plus the task directory that holds its base
archive; ``FeatureDeletionTask`` materialises the snapshot (``setup``), checks the gold patch (``validate``), and grades
(``@vf.reward``) in a fresh, pristine copy inside the crf-prime sandbox, taking only the agent's changes to the
project's source files. After grading it writes the channel-2 hint for prime-rl's ``opsd`` into ``trace.info["hint"]``.
Recipe: Cursor's Composer 2.5 "Feature Deletion" synthetic tasks; grader design: crf_prime/featdel/grade.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import shlex
import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import verifiers.v1 as vf
from pydantic import Field

from crf_prime.errors import InfraError
from crf_prime.featdel import hide_test_id, lookup_guard
from crf_prime.featdel.corpus_build import load_split
from crf_prime.featdel.deletion import apply_unified_diff
from crf_prime.featdel.generate import DEFAULT_SOURCE, GenerateConfig, generate, load_tasks
from crf_prime.featdel.grade import (
    allowed_new_file,
    collect_changes,
    grader_test_files,
    guarded_files,
    materialise,
    snapshot_files,
)
from crf_prime.featdel.grader import Grader
from crf_prime.featdel.models import FeatdelTask, GradeResult
from crf_prime.featdel.runner import PytestRun, parse_junit
from crf_prime.featdel.source import cache_root, make_archive
from crf_prime.featdel.testenv import ensure_test_env, spec_key
from crf_prime.hints import FailingTest, HintTaskConfig, attach_hint_async, hint_writer
from crf_prime.placement import GradingConfig, local_workdir, run_in_runtime
from crf_prime.sandbox import Sandbox

if TYPE_CHECKING:
    from verifiers.v1.runtimes import Runtime

GRADE_KEY = "featdel_grade"
"""``trace.info`` key holding the grade (score, passed fraction, failing tests, hack) of the rollout."""


class FeatureDeletionData(vf.TaskData):
    """One Feature Deletion task: the generated row and where its base archive lives."""

    featdel: FeatdelTask
    """The validated task row (targets, snapshot edits, hidden target tests, gold patch)."""
    task_dir: str
    """Absolute path of the generated task directory (holds ``bases/*.tar.gz``)."""
    sandbox_ro_binds: list[str] = []
    """Host paths the crf-prime SandboxHarness shows read-only in the agent's box: the task's test venv (pytest +
    the project's dependencies, never the project), so the agent can run the visible tests."""


class FeatureDeletionTaskConfig(vf.TaskConfig, HintTaskConfig):
    """Run-time knobs under ``--env.taskset.task.*``."""

    grading: GradingConfig = GradingConfig()
    """Where and under which limits the hidden tests run (``[...env.taskset.task.grading]``, the same table as
    swebench-lite's): ``limits.wall_seconds`` (300) bounds the grading run in either placement, ``unsandboxed``
    grades without bubblewrap (explicit opt-in, for hosts that cannot run it), ``python`` is the interpreter with
    pytest and the project's dependencies when grading in the runtime (default ``python3``; the sandbox placement
    uses the task's test venv)."""
    grade_in: Literal["auto", "sandbox", "runtime"] = "auto"
    """Where the hidden tests run: "sandbox" = crf-prime's bubblewrap box on this host (the agent never touched the
    grader's interpreter); "runtime" = a fresh directory inside the rollout's runtime via ``runtime.run`` (for
    container runtimes whose image holds the project's test environment); "auto" = sandbox for the local subprocess
    runtime, runtime otherwise."""


def _default_tasks() -> Path | None:
    value = os.environ.get("CRF_FEATDEL_TASKS")
    return Path(value) if value else None


class FeatureDeletionConfig(vf.TasksetConfig):
    """Which tasks load, under ``--env.taskset.*`` (``--taskset.*`` for vf-validate)."""

    tasks: Path | None = Field(default_factory=_default_tasks)
    """Task directory (or its tasks.jsonl) from ``crf-prime featdel generate``; default ``$CRF_FEATDEL_TASKS``. When
    unset, tasks are generated from ``source`` into the crf-prime cache on first use."""
    source: str = DEFAULT_SOURCE
    """Project to generate from when ``tasks`` is unset: a local directory or ``pypi:NAME==VERSION``."""
    max_tasks: int = Field(default=8, ge=1)
    """Tasks to generate from ``source`` (ignored with ``tasks``)."""
    seed: int = 0
    """Generation seed (ignored with ``tasks``)."""
    tasks_per_package: int | None = Field(default=None, ge=1)
    """Load at most this many tasks per package snapshot (same base archive), picked with ``split_seed``; None =
    every task. Every task's snapshot holds the other tasks' deleted bodies intact, so tasks of one package teach
    each other's answers within a run; 1 removes that (see docs/feature_deletion.md, "What a policy can see")."""
    split_seed: int = 0
    """Seed of the per-package pick (``tasks_per_package``); another seed picks other tasks of each package."""
    corpus_split: Literal["train", "eval"] | None = None
    """With ``tasks`` naming a corpus directory (``crf-prime featdel corpus``): load only this split (projects never
    straddle the two); None = every row of ``tasks.jsonl``."""
    task: FeatureDeletionTaskConfig = FeatureDeletionTaskConfig()


class FeatureDeletionTask(vf.Task[FeatureDeletionData, vf.State, FeatureDeletionTaskConfig]):
    """Setup writes the snapshot; grading re-materialises pristine tests and runs the hidden target tests."""

    @property
    def key(self) -> str:
        return self.data.featdel.task_id

    @property
    def row(self) -> FeatdelTask:
        return self.data.featdel

    async def setup(self, trace: vf.Trace, runtime: Runtime) -> None:

        workdir = local_workdir(runtime)
        if workdir is not None:
            await asyncio.to_thread(ensure_test_env, self.row.test_env)
            await asyncio.to_thread(materialise, self.row, Path(self.data.task_dir), workdir, hidden=False)
            return
        files = await asyncio.to_thread(_snapshot_bytes, self.row, Path(self.data.task_dir))
        for rel, data in sorted(files.items()):
            await runtime.write(rel, data)

    async def validate(self, runtime: Runtime) -> bool | None:
        """Gold check for vf-validate: apply the gold patch to the snapshot in the runtime, grade, expect 1.0."""

        broken = {rel: (await runtime.read(rel)).decode() for rel in self.row.broken_files}
        for rel, text in apply_unified_diff(broken, self.row.gold_patch).items():
            await runtime.write(rel, text.encode())
        result = await self._grade(runtime)
        return result.score == 1.0 and not result.hack

    async def _grade(self, runtime: Runtime) -> GradeResult:
        """Grade the runtime's current tree. Infrastructure failures (sandbox, task directory) raise."""
        changes = await self._collect(runtime)
        where = self.config.grade_in
        if where == "auto":
            where = "sandbox" if local_workdir(runtime) is not None else "runtime"
        if where == "runtime":
            return await self._grade_in_runtime(runtime, changes)
        return await asyncio.to_thread(self._grader().grade, changes)

    def _grader(self):
        """The task's :class:`crf_prime.featdel.grader.Grader` (test venv built on first use, in the caller's thread)."""

        return Grader(self.row, Path(self.data.task_dir), sandbox=Sandbox(self.config.grading))

    async def _grade_in_runtime(self, runtime: Runtime, changes: dict[str, str | None]) -> GradeResult:
        """Same fresh-copy grading, executed with ``runtime.run`` in a new directory of the runtime."""

        grader = self._grader()
        refused = await asyncio.to_thread(grader.screen, changes)
        if refused is not None:
            return refused
        with tempfile.TemporaryDirectory(prefix="crf-featdel-grade-") as tmp:
            await asyncio.to_thread(grader.build_tree, changes, Path(tmp) / "repo")
            await asyncio.to_thread(make_archive, Path(tmp) / "repo", Path(tmp) / "repo.tar.gz")
            archive = (Path(tmp) / "repo.tar.gz").read_bytes()
        remote = f"/tmp/crf-featdel-grade-{uuid.uuid4().hex}"
        await runtime.write(f"{remote}/repo.tar.gz", archive)
        python = self.config.grading.python or "python3"
        args = [*self.row.pytest_args, *self.row.target_tests]
        unpack = f"mkdir -p {remote}/repo && tar -xzf {remote}/repo.tar.gz -C {remote}/repo"
        unpacked = await runtime.run(["sh", "-c", unpack], {})
        if unpacked.exit_code != 0:
            raise InfraError(f"grading in the runtime: unpacking the grading tree failed: {unpacked.stderr[-500:]}")
        # the grader's plugin, as in the sandbox: no test id in the environment, no test module readable by the code
        await runtime.write(f"{remote}/grader/{hide_test_id.MODULE}.py", Path(hide_test_id.__file__).read_bytes())
        guard = Path(lookup_guard.__file__).read_bytes()  # computed getattr judged when it runs, as in the sandbox
        await runtime.write(f"{remote}/grader/{hide_test_id.LOOKUP_MODULE}.py", guard)
        sites = grader.lookup_sites(changes)
        if sites is not None:
            rules = json.dumps(lookup_guard.settings({f"{remote}/repo/{rel}": lines for rel, lines in sites.items()}))
            await runtime.write(f"{remote}/grader/{lookup_guard.RULES}", rules.encode())
        guarded = guarded_files(self.row)
        if guarded:
            settings = hide_test_id.guard_settings(f"{remote}/repo", guarded)
            await runtime.write(f"{remote}/grader/{hide_test_id.GUARD}", settings.encode())
        pytest = [python, "-s", "-m", "pytest", "-p", "no:cacheprovider", "-p", hide_test_id.MODULE, "-q"]
        pytest += [f"--rootdir={remote}/repo", f"--junitxml={remote}/junit.xml", *args]
        paths = [os.path.normpath(f"{remote}/repo/{p}") for p in self.row.pythonpath] + [f"{remote}/grader"]
        env = {
            "PYTHONPATH": ":".join(paths),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1",
        }
        script = f'cd {shlex.quote(remote)}/repo && exec "$@"'
        result = await run_in_runtime(
            runtime, ["sh", "-c", script, "sh", *pytest], env, wall_seconds=self.config.grading.limits.wall_seconds
        )
        found = (await runtime.run(["test", "-f", f"{remote}/junit.xml"], {})).exit_code == 0
        outcomes = (
            parse_junit((await runtime.read(f"{remote}/junit.xml", max_bytes=50_000_000)).decode()) if found else {}
        )
        await runtime.run(["rm", "-rf", remote], {})
        if result.exit_code == 127 or (result.exit_code == 1 and "No module named pytest" in result.stderr):
            raise InfraError(
                f"grading in the runtime: {python!r} cannot run pytest there "
                f"(set --env.taskset.task.grading.python or grade_in='sandbox'): {result.stderr[-500:]}"
            )
        run = PytestRun(
            exit_code=result.exit_code,
            outcomes=outcomes,
            junit_found=found,
            duration_s=result.duration_s,
            limit_hit="wall" if result.timed_out else None,
            stdout=result.stdout,
            stderr=result.stderr,
        )
        # the replay verdict runs in crf-prime's sandbox on this host even when the tests ran in the runtime: it
        # needs only the project's source, and gold's outcomes never leave the host
        return await asyncio.to_thread(grader.finish, grader.score_run(run, changes), changes)

    async def _collect(self, runtime: Runtime) -> dict[str, str | None]:

        task_dir = Path(self.data.task_dir)
        workdir = local_workdir(runtime)
        if workdir is not None:
            return await asyncio.to_thread(collect_changes, self.row, task_dir, workdir)
        # container runtimes: read the allow-listed files back through the runtime API
        before = await asyncio.to_thread(snapshot_files, self.row, task_dir)
        listed = await runtime.run(["sh", "-c", 'for f; do [ -f "$f" ] && echo "$f"; done; true', "sh", *before], {})
        present = set(listed.stdout.splitlines())
        changes: dict[str, str | None] = {}
        for rel, text in before.items():
            if rel not in present:
                changes[rel] = None
                continue
            now = (await runtime.read(rel, max_bytes=20_000_000)).decode("utf-8", "surrogateescape")
            if now != text:
                changes[rel] = now
        dirs = [d for d in self.row.package_dirs if d not in (".", "src")]
        if dirs:
            listing = await runtime.run(["find", *dirs, "-name", "*.py", "-type", "f"], {})
            for rel in sorted(listing.stdout.split()):
                if rel not in before and allowed_new_file(self.row, rel):
                    changes[rel] = (await runtime.read(rel)).decode("utf-8", "surrogateescape")
        return changes

    async def _graded(self, trace: vf.Trace, runtime: Runtime) -> dict[str, Any]:
        """Grade once per rollout (the metric and the reward share it via ``trace.info``) and attach the hint."""
        cached = trace.info.get(GRADE_KEY)
        if cached is not None:
            return cached

        result = await self._grade(runtime)
        graded = json.loads(result.model_dump_json())
        trace.info[GRADE_KEY] = graded
        sources = (
            await asyncio.to_thread(grader_test_files, self.row, Path(self.data.task_dir)) if result.failed else {}
        )
        await attach_hint_async(
            trace,
            failing_tests=hint_failures(result),
            test_sources=sources,
            writer=hint_writer(self.config.hint_writer),
            target=self.config.hint_target,
        )
        return graded

    @vf.metric
    async def passed_fraction(self, trace: vf.Trace, runtime: Runtime) -> float:
        """Fraction of the hidden target tests that pass."""
        return float((await self._graded(trace, runtime))["passed_fraction"])

    @vf.reward(weight=1.0)
    async def tests_pass(self, trace: vf.Trace, runtime: Runtime) -> float:
        """1.0 only when every hidden target test passes in the pristine copy (and no hack was detected)."""
        return float((await self._graded(trace, runtime))["score"])


def hint_failures(result: GradeResult) -> list[FailingTest]:
    """The grade as channel-2 facts: failing target tests (their failure text only locates test-file lines, see
    ``crf_prime.hints.evidence``), and notes the grader writes from its own findings: the code policy's verdict on the
    agent's source, the replay's counts (never the replayed values: the agent's code produced those)."""
    failing = [f for f in result.failed if f.name != "replay"]
    if result.replay_mismatches:
        note = (
            f"{result.replay_mismatches} of {result.replay_calls} calls the grader replayed return, raise or mutate "
            "differently from the original implementation"
        )
        failing.append(FailingTest(name="replay", note=note))
    if result.hack:
        failing.insert(0, FailingTest(name="grader", note=f"reward hack detected: {result.hack}"))
    return failing


class FeatureDeletionTaskset(vf.Taskset[FeatureDeletionTask, FeatureDeletionConfig]):
    """Loads validated Feature Deletion tasks from a task directory (or generates them from a source)."""

    def load(self) -> list[FeatureDeletionTask]:

        task_dir = self._task_dir()
        tasks = []
        if self.config.corpus_split is not None:
            loaded = load_split(task_dir, self.config.corpus_split)
        else:
            loaded = load_tasks(task_dir)
        rows = per_package(loaded, self.config.tasks_per_package, self.config.split_seed)
        for idx, row in enumerate(rows):
            venv = cache_root() / "venvs" / spec_key(row.test_env)
            prompt = (
                f"{row.prompt}\n\nA Python with pytest and the project's dependencies (not the project itself) is at "
                f"`{venv}/bin/python`; run the visible tests with `{venv}/bin/python -m pytest -q`."
            )
            data = FeatureDeletionData(
                idx=idx,  # verifiers 0.4.0 sets it while iterating; the commit prime-rl pins leaves it to load()
                id=row.task_id,
                name=row.task_id,
                prompt=prompt,
                featdel=row,
                task_dir=str(task_dir),
                sandbox_ro_binds=[str(venv)],
            )
            tasks.append(FeatureDeletionTask(data, self.config.task))
        return tasks

    def _task_dir(self) -> Path:
        if self.config.tasks is not None:
            return resolve_task_dir(self.config.tasks)

        key = hashlib.sha256(f"{self.config.source}|{self.config.max_tasks}|{self.config.seed}".encode()).hexdigest()
        out = cache_root() / "generated" / key[:16]
        if not (out / "tasks.jsonl").is_file():
            generate(
                GenerateConfig(
                    source=self.config.source,
                    out=out,
                    max_tasks=self.config.max_tasks,
                    seed=self.config.seed,
                    unsandboxed=self.config.task.grading.unsandboxed,
                )
            )
        return out


def per_package(rows: list[FeatdelTask], limit: int | None, seed: int = 0) -> list[FeatdelTask]:
    """At most ``limit`` rows per package snapshot (``base_sha256``), picked per package with ``seed``, in the
    original order; all rows when ``limit`` is None."""
    if limit is None:
        return list(rows)
    groups: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(row.base_sha256, []).append(i)
    keep: set[int] = set()
    for key, idx in groups.items():
        random.Random(f"{seed}:{key}").shuffle(idx)
        keep.update(idx[:limit])
    return [row for i, row in enumerate(rows) if i in keep]


def resolve_task_dir(given: Path | str) -> Path:
    """``taskset.tasks`` is a task directory or its ``tasks.jsonl``; anything else raises naming the field and path."""
    path = Path(given).expanduser().resolve()
    if path.is_dir() and (path / "tasks.jsonl").is_file():
        return path
    if path.is_file() and path.name == "tasks.jsonl":
        return path.parent
    if path.is_file():
        why = "is a file other than tasks.jsonl (task rows name the base archive next to their tasks.jsonl)"
    elif path.is_dir():
        why = "is a directory without tasks.jsonl"
    else:
        why = "does not exist"
    raise ValueError(
        f"taskset.tasks: {str(given)!r} {why}; give a task directory written by 'crf-prime featdel generate' "
        "or the tasks.jsonl inside it"
    )


def _snapshot_bytes(row: FeatdelTask, task_dir: Path) -> dict[str, bytes]:

    with tempfile.TemporaryDirectory(prefix="crf-featdel-snap-") as tmp:
        materialise(row, task_dir, Path(tmp), hidden=False)
        return {p.relative_to(tmp).as_posix(): p.read_bytes() for p in Path(tmp).rglob("*") if p.is_file()}
