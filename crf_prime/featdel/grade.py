"""Grade a working tree against a Feature Deletion task without trusting anything the agent wrote except source code.

Grading re-materialises a fresh copy: the pristine base tree (all tests, the hidden ones included, and every test
configuration file — conftest.py, pytest.ini, tox.ini, setup.cfg, pyproject.toml) + the task's snapshot edits + only
the agent's changes to the project's non-test ``.py`` files (or new ``.py`` modules inside its package directories),
read from the agent's workspace without following its symlinks. Caches are stripped again, the target tests run in
the sandbox with the whole tree read-only (only ``out/`` is writable and nothing writable is importable), and
outcomes come from pytest's junit XML, cross-checked against the exit code. The reward-hack surface Cursor's
Composer 2.5 post names (leftover bytecode, type-checker caches, git history) is stripped from the base tree.

Code the agent writes runs inside the pytest process, so it could patch pytest from an imported module: no check after
the run can see that, so the means are forbidden instead: added code must stay inside the allow-list of
``crf_prime.featdel.policy`` (judged on the exact bytes written), and a violation is a hack before anything runs.
No temporary tree outlives a grading; per-archive data is immutable, so gradings may run in many threads at once.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from crf_prime.errors import InfraError
from crf_prime.featdel import lookup_guard, pycache
from crf_prime.featdel.models import FeatdelTask, GradeResult
from crf_prime.featdel.policy import (
    added_violations,
    deferred_lookups,
    describe,
    project_gadgets,
    project_modules,
    project_own_modules,
)
from crf_prime.featdel.pytest_server import PytestServer
from crf_prime.featdel.runner import PytestRun, run_pytest
from crf_prime.featdel.source import SourceError, extract_archive, is_test_path, strip_tree
from crf_prime.featdel.testenv import TestEnv
from crf_prime.records.failing import FailingTest
from crf_prime.sandbox import Sandbox

# files the agent may never add, wherever they are (startup hooks, test config)
FORBIDDEN_NAMES = frozenset({"conftest.py", "sitecustomize.py", "usercustomize.py", "setup.py", "__main__.py"})


class GradingError(InfraError):
    """Infrastructure failure while grading (never a wrong answer): the task directory or the sandbox is broken."""


MAX_SOURCE_BYTES = 4 << 20
"""Largest agent source file taken into the grading tree (bytes); a larger one counts as deleted."""
GUARD_TEST_FILES = True
"""The project's code may not open the test modules during a grading run (``hide_test_id.guard``); False only in
the hack suites, to show what the guard stops."""
REWRITTEN_TESTS = True
"""Grading trees get pytest's rewritten test modules made once per base (crf_prime/featdel/pycache.py); False
measures what they save (benchmarks/featdel.py)."""


def _base_archive(task: FeatdelTask, task_dir: Path) -> Path:
    path = task_dir / task.base_archive
    if not path.is_file():
        raise GradingError(f"task {task.task_id}: base archive {path} is missing")
    return path


@functools.lru_cache(maxsize=64)
def _archive_sources(archive: str, sha256: str, rels: tuple[str, ...]) -> Mapping[str, str]:
    """Text of ``rels`` read straight from the base archive (checked against its SHA-256), read-only."""
    data = Path(archive).read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise GradingError(f"{archive}: SHA-256 mismatch (the task directory was modified)")
    out: dict[str, str] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as t:
        for rel in rels:
            member = t.extractfile(rel)
            if member is None:
                raise GradingError(f"{archive}: {rel} is not a file in the base archive")
            out[rel] = member.read().decode("utf-8", "surrogateescape")
    return MappingProxyType(out)


def _original_sources(task: FeatdelTask, task_dir: Path) -> Mapping[str, str]:
    archive = _base_archive(task, task_dir)
    return _archive_sources(str(archive.resolve()), task.base_sha256, tuple(task.source_files))


def grader_test_files(task: FeatdelTask, task_dir: Path) -> Mapping[str, str]:
    """The grader's own text of the task's Python test files (read from the base archive): what a channel-2 hint may
    quote about a failure (``crf_prime.hints.evidence``)."""
    rels = tuple(sorted(rel for rel in task.protected_files if rel.endswith(".py")))
    return _archive_sources(str(_base_archive(task, task_dir).resolve()), task.base_sha256, rels)


def materialise(task: FeatdelTask, task_dir: Path, dest: Path, *, hidden: bool) -> None:
    """Write the agent's starting snapshot into ``dest`` (with the hidden tests too when ``hidden``).

    The base archive is extracted straight into ``dest``: no extracted copy is kept anywhere else."""
    try:
        extract_archive(_base_archive(task, task_dir), dest, task.base_sha256)
    except SourceError as e:
        raise GradingError(f"task {task.task_id}: {e}") from e
    for rel, text in task.broken_files.items():
        (dest / rel).write_text(text)
    if not hidden:
        for rel in task.hidden_tests:
            (dest / rel).unlink(missing_ok=True)


def snapshot_files(task: FeatdelTask, task_dir: Path) -> dict[str, str]:
    """Path -> text of every allow-listed source file in the agent's starting snapshot."""
    out = dict(_original_sources(task, task_dir))
    out.update({rel: text for rel, text in task.broken_files.items() if rel in out})
    return out


def allowed_new_file(task: FeatdelTask, rel: str) -> bool:
    """A new file the grader takes: a ``.py`` module inside one of the project's package directories."""
    if not rel.endswith(".py") or is_test_path(rel) or rel.rsplit("/", 1)[-1] in FORBIDDEN_NAMES:
        return False
    for d in task.package_dirs:
        if d in (".", "src"):
            continue  # new top-level modules could shadow stdlib / startup hooks
        if rel.startswith(d + "/"):
            return True
    return False


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _open_dir(root_fd: int, parts: list[str]) -> int | None:
    """fd of ``root/parts...`` reached without following any symlink (None when a part is missing or a link)."""
    fd = os.dup(root_fd)
    for part in parts:
        try:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = nxt
    return fd


def _read_regular(dir_fd: int, name: str) -> bytes | None:
    """Bytes of a regular file ``name`` in ``dir_fd``; None for links, FIFOs, devices, directories, huge files."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SOURCE_BYTES:
            return None
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            return None  # swapped between the check and the open
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_SOURCE_BYTES + 1)
        return data if len(data) <= MAX_SOURCE_BYTES else None
    finally:
        os.close(fd)


def read_agent_file(root_fd: int, rel: str) -> bytes | None:
    """Read ``rel`` under the agent's workspace without following symlinks anywhere on the path."""
    *dirs, name = rel.split("/")
    fd = _open_dir(root_fd, dirs)
    if fd is None:
        return None
    try:
        return _read_regular(fd, name)
    finally:
        os.close(fd)


def _as_text(data: bytes) -> str:
    """Source bytes as text that round-trips exactly (``surrogateescape``): what is scanned is what is written."""
    return data.decode("utf-8", "surrogateescape")


def collect_changes(task: FeatdelTask, task_dir: Path, agent_root: Path) -> dict[str, str | None]:
    """The agent's edits to allow-listed files: path -> new text (None = deleted). Everything else is ignored.

    The workspace is the agent's: nothing is read through a symlink (file or any parent directory), and only
    regular files are read (a FIFO or device cannot block or feed the grader)."""
    before = snapshot_files(task, task_dir)
    changes: dict[str, str | None] = {}
    root_fd = os.open(agent_root, _DIR_FLAGS)
    try:
        for rel, text in before.items():
            data = read_agent_file(root_fd, rel)
            if data is None:
                changes[rel] = None
            elif data != _source_bytes(text):
                changes[rel] = _as_text(data)
        for d in task.package_dirs:
            if d in (".", "src"):
                continue
            pkg_fd = _open_dir(root_fd, d.split("/"))
            if pkg_fd is None:
                continue
            try:
                for dirpath, dirnames, filenames, dfd in os.fwalk(".", dir_fd=pkg_fd, follow_symlinks=False):
                    dirnames[:] = sorted(n for n in dirnames if n != "__pycache__")
                    for name in sorted(filenames):
                        rel = os.path.normpath(f"{d}/{dirpath}/{name}")
                        if rel in before or not allowed_new_file(task, rel):
                            continue
                        data = _read_regular(dfd, name)
                        if data is not None:
                            changes[rel] = _as_text(data)
            finally:
                os.close(pkg_fd)
    finally:
        os.close(root_fd)
    return changes


def _source_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class ProjectPolicy:
    """What added code may use, derived from the original source (see crf_prime/featdel/policy.py)."""

    modules: frozenset[str]
    """Modules and ``module.member`` names the original imports or uses."""
    own: frozenset[str]
    """The project's own top-level modules."""
    gadgets: frozenset[str]
    """Original functions that import or look up attributes by name."""


@functools.lru_cache(maxsize=64)
def _project_policy(archive: str, sha256: str, rels: tuple[str, ...], roots: tuple[str, ...]) -> ProjectPolicy:
    original = _archive_sources(archive, sha256, rels)
    modules = project_modules(original, roots)
    gadgets = project_gadgets(original, modules)  # the original's computed lookups are not judged when they run
    return ProjectPolicy(modules, project_own_modules(original, roots), gadgets)


def project_policy(task: FeatdelTask, task_dir: Path) -> ProjectPolicy:
    """The task's :class:`ProjectPolicy`, computed once per base archive (immutable, shared safely by threads)."""
    archive = str(_base_archive(task, task_dir).resolve())
    return _project_policy(archive, task.base_sha256, tuple(task.source_files), (".", *task.pythonpath))


def guard_sites(task: FeatdelTask, task_dir: Path, changes: dict[str, str | None]) -> dict[str, tuple[int, ...]]:
    """Where the added code in ``changes`` calls ``getattr``/``setattr``/``delattr`` with a computed name (file ->
    lines of the exact text graded): what the scan leaves to the lookup guard."""
    before = snapshot_files(task, task_dir)
    policy = project_policy(task, task_dir)
    sites: dict[str, tuple[int, ...]] = {}
    for rel, text in sorted(changes.items()):
        if text is not None and rel.endswith(".py"):
            found = deferred_lookups(before.get(rel, ""), text, policy.modules, policy.gadgets, own_modules=policy.own)
            if found:
                sites[rel] = tuple(found)
    return sites


def detect_hack(task: FeatdelTask, task_dir: Path, changes: dict[str, str | None]) -> str:
    """Non-empty description (``path:line: rule: code``) when added code breaks the policy in featdel/policy.py."""
    before = snapshot_files(task, task_dir)
    policy = project_policy(task, task_dir)
    found = []
    for rel, text in sorted(changes.items()):
        if text is None:
            continue
        bad = added_violations(
            before.get(rel, ""),
            text,
            policy.modules,
            policy.gadgets,
            own_modules=policy.own,
            runtime_lookups=lookup_guard.ENABLED,
        )
        if bad:
            found.append(describe(rel, sorted(bad, key=lambda v: v.line)))
    return "; ".join(found)[:1000]


def hack_result(task: FeatdelTask, changes: dict[str, str | None], hack: str) -> GradeResult:
    """Score 0 without running anything: the agent's edits tamper with the grader."""
    return GradeResult(
        score=0.0,
        passed_fraction=0.0,
        passed=(),
        failed=tuple(FailingTest(name=t, message="not run: reward hack detected") for t in task.target_tests),
        hack=hack,
        changed_files=tuple(sorted(changes)),
    )


def build_grading_tree(task: FeatdelTask, task_dir: Path, changes: dict[str, str | None], repo: Path) -> None:
    """Fresh copy at ``repo``: pristine base + snapshot edits + allow-listed agent changes, caches stripped."""
    materialise(task, task_dir, repo, hidden=True)
    _apply_changes(task, changes, repo)
    _check_protected(task, repo, list(task.protected_files))


def _check_protected(task: FeatdelTask, repo: Path, paths: list[str]) -> None:
    """The copy must hold the pristine tests and config."""
    for rel in paths:
        if hashlib.sha256((repo / rel).read_bytes()).hexdigest() != task.protected_files[rel]:
            raise GradingError(f"task {task.task_id}: protected file {rel} does not match its recorded hash")


def overlay_tree(task: FeatdelTask, base: Path, changes: dict[str, str | None], repo: Path) -> None:
    """The grading tree of ``changes`` at ``repo``, made from ``base`` (a tree :func:`build_grading_tree` wrote with
    no changes, never exposed writable) by hard links, the changed files written anew: cheap for many attempts at one
    task (mutation testing)."""
    shutil.copytree(base, repo, symlinks=True, copy_function=os.link)
    _apply_changes(task, changes, repo)
    _check_protected(task, repo, [rel for rel in changes if rel in task.protected_files])


def _apply_changes(task: FeatdelTask, changes: dict[str, str | None], repo: Path) -> None:
    for rel, text in changes.items():
        if rel not in task.source_files and not allowed_new_file(task, rel):
            continue
        p = repo / rel
        p.unlink(missing_ok=True)  # a new inode: never written through a link another tree shares
        if text is not None:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(_source_bytes(text))  # the exact bytes the policy scanned
    strip_tree(repo)


def result_from_run(task: FeatdelTask, run: PytestRun, changes: dict[str, str | None]) -> GradeResult:
    """Score a finished test run from its junit outcomes, cross-checked against the exit status."""
    passed: list[str] = []
    failed: list[FailingTest] = []
    for nodeid in task.target_tests:
        status, message = run.status_of(nodeid)
        if status == "passed":
            passed.append(nodeid)
        else:
            if status == "missing" and run.limit_hit:
                message = f"test run killed by the sandbox's {run.limit_hit} limit"
            elif status == "missing" and not run.junit_found:
                message = f"no junit report (pytest exit code {run.exit_code}): {run.tail(600)}"
            failed.append(FailingTest(name=nodeid, message=f"{status}: {message}".strip()))
    hack = ""
    if not failed and run.exit_code != 0:
        hack = f"junit reports every target test passed but pytest exited with {run.exit_code}"
    return GradeResult(
        score=1.0 if not failed and not hack else 0.0,
        passed_fraction=len(passed) / max(len(task.target_tests), 1),
        passed=tuple(passed),
        failed=tuple(failed),
        hack=hack,
        exit_code=run.exit_code,
        duration_s=run.duration_s,
        changed_files=tuple(sorted(changes)),
    )


def guarded_files(task: FeatdelTask) -> tuple[str, ...]:
    """The test modules the project's code may not open during a grading run (empty with the guard off)."""
    return tuple(p for p in task.protected_files if p.endswith(".py")) if GUARD_TEST_FILES else ()


def grading_run(
    task: FeatdelTask,
    task_dir: Path,
    changes: dict[str, str | None],
    *,
    sandbox: Sandbox,
    env: TestEnv,
    read_only_tree: bool = True,
    wall_seconds: float | None = None,
    base: Path | None = None,
    lookups: Mapping[str, Sequence[int]] | None = None,
    first_failure: bool = False,
    pycs: Path | None = None,
    warm: PytestServer | None = None,
) -> PytestRun:
    """The target tests run in a fresh grading tree (pristine base + snapshot + allow-listed ``changes``); the
    tree is removed afterwards. No policy scan here: callers judge ``changes`` first. ``wall_seconds`` replaces the
    sandbox's wall limit. ``base``: the tree with no changes, to make this one from by hard links (a read-only tree
    only: code under test must not write through a shared inode). ``first_failure``: stop at the first failing test
    (the tests not run then read as failed: for callers that only ask whether every test passes). ``pycs``: the
    base's compiled modules (``pycache.source_entry``), for generation's runs of gold, its mutants and the snapshot
    only: never a tree an agent's code runs in. ``warm``: run it in that server's warm box (generation's runs of gold's
    mutants and the snapshot only, crf_prime/featdel/pytest_server.py)."""
    if base is not None and not read_only_tree:
        raise ValueError("grading_run: a shared base needs read_only_tree")
    warm = warm if read_only_tree else None  # a warm box sees its trees read-only only
    prefix = "crf-featdel-grade-"
    run_dir = warm.run_dir(prefix) if warm is not None else Path(tempfile.mkdtemp(prefix=prefix))
    try:
        if base is None:
            build_grading_tree(task, task_dir, changes, run_dir / "repo")
        else:
            overlay_tree(task, base, changes, run_dir / "repo")
        pycache.link_sources(pycs, run_dir / "repo")
        guarded = guarded_files(task)
        if guarded and REWRITTEN_TESTS:  # never without the guard: they hold the tests' literals
            made = pycache.entry(task, _base_archive(task, task_dir), sandbox=sandbox, env=env)
            guarded += pycache.install(made, run_dir / "repo", task)
        return run_pytest(
            sandbox,
            env,
            run_dir,
            pythonpath=task.pythonpath,
            pytest_args=task.pytest_args,
            node_ids=task.target_tests,
            protected=tuple(task.protected_files),
            read_only_tree=read_only_tree,
            wall_seconds=wall_seconds,
            guarded=guarded,
            lookups=lookups,
            first_failure=first_failure,
            warm=warm,
        )
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
