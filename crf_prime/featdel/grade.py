"""Grade a working tree against a Feature Deletion task without trusting anything the agent wrote except source code.

Grading re-materialises a fresh copy: the pristine base tree (all tests, the hidden ones included, and every test
configuration file — conftest.py, pytest.ini, tox.ini, setup.cfg, pyproject.toml) + the task's snapshot edits + only
the agent's changes to the project's non-test ``.py`` files (or new ``.py`` modules inside its package directories).
Caches are stripped again, the target tests run in the sandbox with test files read-only, and outcomes come from
pytest's junit XML, cross-checked against the exit code. Reward-hack surface: ../shared/hosts/sandbox-and-swebench.md
§3.4 and Cursor's Composer 2.5 post (leftover bytecode, type-checker caches, git history).

Code the agent writes runs inside the pytest process, so it could patch pytest from an imported module: no check after
the run can see that, so the means are forbidden instead. Added code is judged by the AST policy in
``crf_prime.featdel.policy`` (no test-runner or import-machinery modules, no frames, no by-name attribute access, no
exec/eval) and a violation is a hack before anything runs.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import threading
from pathlib import Path

from crf_prime.featdel.models import FailedTest, FeatdelTask, GradeResult
from crf_prime.featdel.policy import added_violations, describe, project_gadgets, project_modules
from crf_prime.featdel.replay import ReplayVerdict, replay_changes
from crf_prime.featdel.runner import PytestRun, make_sandbox, run_pytest
from crf_prime.featdel.source import extract_archive, is_test_path, strip_tree
from crf_prime.featdel.testenv import TestEnv, ensure_test_env

# files the agent may never add, wherever they are (startup hooks, test config)
FORBIDDEN_NAMES = frozenset({"conftest.py", "sitecustomize.py", "usercustomize.py", "setup.py", "__main__.py"})


class GradingError(RuntimeError):
    """Infrastructure failure while grading (never a wrong answer): the task directory or the sandbox is broken."""


_base_lock = threading.Lock()
_base_cache: dict[str, Path] = {}
_policy_cache: dict[str, tuple[frozenset[str], frozenset[str]]] = {}


def _base_tree(task: FeatdelTask, task_dir: Path) -> Path:
    """Extract the task's base archive once per process (checked against its SHA-256)."""
    with _base_lock:
        cached = _base_cache.get(task.base_sha256)
        if cached is not None and cached.is_dir():
            return cached
        dest = Path(tempfile.mkdtemp(prefix="crf-featdel-base-"))
        try:
            extract_archive(task_dir / task.base_archive, dest, task.base_sha256)
        except FileNotFoundError as e:
            raise GradingError(f"task {task.task_id}: base archive {task_dir / task.base_archive} is missing") from e
        _base_cache[task.base_sha256] = dest
        return dest


def materialise(task: FeatdelTask, task_dir: Path, dest: Path, *, hidden: bool) -> None:
    """Write the agent's starting snapshot into ``dest`` (with the hidden tests too when ``hidden``)."""
    shutil.copytree(_base_tree(task, task_dir), dest, dirs_exist_ok=True)
    for rel, text in task.broken_files.items():
        (dest / rel).write_text(text)
    if not hidden:
        for rel in task.hidden_tests:
            (dest / rel).unlink(missing_ok=True)


def snapshot_files(task: FeatdelTask, task_dir: Path) -> dict[str, str]:
    """Path -> text of every allow-listed source file in the agent's starting snapshot."""
    base = _base_tree(task, task_dir)
    out = {rel: (base / rel).read_text() for rel in task.source_files}
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


def collect_changes(task: FeatdelTask, task_dir: Path, agent_root: Path) -> dict[str, str | None]:
    """The agent's edits to allow-listed files: path -> new text (None = deleted). Everything else is ignored."""
    before = snapshot_files(task, task_dir)
    changes: dict[str, str | None] = {}
    for rel, text in before.items():
        p = agent_root / rel
        if not p.is_file() or p.is_symlink():
            changes[rel] = None
            continue
        now = p.read_bytes().decode("utf-8", errors="replace")
        if now != text:
            changes[rel] = now
    for d in task.package_dirs:
        if d in (".", "src"):
            continue
        base = agent_root / d
        if not base.is_dir():
            continue
        for p in sorted(base.rglob("*.py")):
            rel = p.relative_to(agent_root).as_posix()
            fresh = rel not in before and p.is_file() and not p.is_symlink() and "__pycache__" not in rel.split("/")
            if fresh and allowed_new_file(task, rel):
                changes[rel] = p.read_bytes().decode("utf-8", errors="replace")
    return changes


def project_policy(task: FeatdelTask, task_dir: Path) -> tuple[frozenset[str], frozenset[str]]:
    """(modules added code may import: the project's own and those its original source imports; the original's
    by-name gadget functions added code may not reference), computed once per base archive."""
    with _base_lock:
        cached = _policy_cache.get(task.base_sha256)
    if cached is None:
        base = _base_tree(task, task_dir)
        original = {rel: (base / rel).read_text(errors="replace") for rel in task.source_files}
        modules = project_modules(original, (".", *task.pythonpath))
        cached = modules, project_gadgets(original, modules)
        with _base_lock:
            _policy_cache[task.base_sha256] = cached
    return cached


def detect_hack(task: FeatdelTask, task_dir: Path, changes: dict[str, str | None]) -> str:
    """Non-empty description (``path:line: rule: code``) when added code breaks the policy in featdel/policy.py."""
    before = snapshot_files(task, task_dir)
    allowed, gadgets = project_policy(task, task_dir)
    found = []
    for rel, text in sorted(changes.items()):
        if text is None:
            continue
        bad = added_violations(before.get(rel, ""), text, allowed, gadgets)
        if bad:
            found.append(describe(rel, sorted(bad, key=lambda v: v.line)))
    return "; ".join(found)[:1000]


def hack_result(task: FeatdelTask, changes: dict[str, str | None], hack: str) -> GradeResult:
    """Score 0 without running anything: the agent's edits tamper with the grader."""
    return GradeResult(
        score=0.0,
        passed_fraction=0.0,
        passed=(),
        failed=tuple(FailedTest(name=t, message="not run: reward hack detected") for t in task.target_tests),
        hack=hack,
        changed_files=tuple(sorted(changes)),
    )


def build_grading_tree(task: FeatdelTask, task_dir: Path, changes: dict[str, str | None], repo: Path) -> None:
    """Fresh copy at ``repo``: pristine base + snapshot edits + allow-listed agent changes, caches stripped."""
    materialise(task, task_dir, repo, hidden=True)
    for rel, text in changes.items():
        if rel not in task.source_files and not allowed_new_file(task, rel):
            continue
        p = repo / rel
        if text is None:
            p.unlink(missing_ok=True)
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
    strip_tree(repo)
    for rel, digest in task.protected_files.items():  # the copy must hold the pristine tests and config
        if hashlib.sha256((repo / rel).read_bytes()).hexdigest() != digest:
            raise GradingError(f"task {task.task_id}: protected file {rel} does not match its recorded hash")


def result_from_run(task: FeatdelTask, run: PytestRun, changes: dict[str, str | None]) -> GradeResult:
    """Score a finished test run from its junit outcomes, cross-checked against the exit status."""
    passed: list[str] = []
    failed: list[FailedTest] = []
    for nodeid in task.target_tests:
        status, message = run.status_of(nodeid)
        if status == "passed":
            passed.append(nodeid)
        else:
            if status == "missing" and run.limit_hit:
                message = f"test run killed by the sandbox's {run.limit_hit} limit"
            elif status == "missing" and not run.junit_found:
                message = f"no junit report (pytest exit code {run.exit_code}): {run.tail(600)}"
            failed.append(FailedTest(name=nodeid, message=f"{status}: {message}".strip()))
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


def grade_changes(
    task: FeatdelTask,
    task_dir: Path,
    changes: dict[str, str | None],
    *,
    sandbox=None,
    env: TestEnv | None = None,
    wall_seconds: float = 300.0,
    scan: bool = True,
    replay: bool = True,
) -> GradeResult:
    """Grade the agent's source edits: 1.0 only when every target test passes in a fresh, pristine copy and the
    agent's code reproduces gold's outcomes on the task's replayed calls (crf_prime/featdel/replay.py).

    ``scan=False`` skips the static hack scan, ``replay=False`` the replay (tests use them to show each layer holds
    on its own).
    """
    hack = detect_hack(task, task_dir, changes) if scan else ""
    if hack:
        return hack_result(task, changes, hack)
    sandbox = sandbox or make_sandbox(wall_seconds=wall_seconds)
    env = env or ensure_test_env(task.test_env)
    run_dir = Path(tempfile.mkdtemp(prefix="crf-featdel-grade-"))
    try:
        build_grading_tree(task, task_dir, changes, run_dir / "repo")
        run = run_pytest(
            sandbox,
            env,
            run_dir,
            pythonpath=task.pythonpath,
            pytest_args=task.pytest_args,
            node_ids=task.target_tests,
            protected=tuple(task.protected_files),
            wall_seconds=wall_seconds,
        )
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    result = result_from_run(task, run, changes)
    if replay and result.score == 1.0 and task.replay is not None:
        result = with_replay(result, replay_changes(sandbox, env, task, task_dir, changes))
    return result


def with_replay(result: GradeResult, verdict: ReplayVerdict) -> GradeResult:
    """Reward 1.0 needs the tests and the replay: any replayed call that differs from gold's outcome scores 0."""
    update: dict[str, object] = {"replay_calls": verdict.calls, "replay_mismatches": len(verdict.mismatches)}
    if not verdict.ok:
        failed = FailedTest(
            name="replay",
            message=f"{len(verdict.mismatches)} of {verdict.calls} replayed calls differ from the original "
            f"implementation; {verdict.detail}",
        )
        update |= {"score": 0.0, "failed": (*result.failed, failed)}
    return result.model_copy(update=update)


def grade_tree(task: FeatdelTask, task_dir: Path, agent_root: Path, **kwargs) -> GradeResult:
    """Grade the working tree at ``agent_root`` (a local directory the agent edited)."""
    return grade_changes(task, task_dir, collect_changes(task, task_dir, agent_root), **kwargs)
