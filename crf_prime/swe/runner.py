"""Prepare an instance's repository in a runtime, and grade the agent's change the way the swebench harness does.

The runtime is anything with verifiers' ``async run(argv, env) -> ProgramResult`` and ``async write(path, data)``
(``verifiers.v1.Runtime``), so this module does not import verifiers. Two placements:

* container (docker / prime / ...): the ``sweb.eval`` image already holds the repo at ``base_commit`` in
  ``/testbed`` with its conda env; every command goes through ``runtime.run``.
* local (verifiers' subprocess runtime): the repo is cloned from a local mirror into the runtime's directory and
  the test command runs in crf-prime's bubblewrap sandbox (:class:`crf_prime.sandbox.Sandbox`), never bare.

Grading never trusts the agent's tree. Local placement (the grader runs on the host): the agent's files are read
without following symlinks and without git (:mod:`crf_prime.swe.workspace`), the allowed source changes
(:mod:`crf_prime.swe.changes`) are written into a fresh clone of the mirror at ``base_commit`` in a grader-owned
temp dir, the test patch is applied there with grader-owned git (:mod:`crf_prime.swe.gitenv`), and the tests run in
the box on a copy of that tree in the box's size-capped ``/tmp`` (the grading dir is read-only there but for the
report dir); the grading dir is then removed by :func:`crf_prime.swe.workspace.remove_tree`, which never raises.
Container placement: the same steps run in the instance's container with hardened git (no hooks, fsmonitor, replace
objects, excludes or ``core.worktree``) and scratch files in a fresh ``mktemp`` dir. Either way the verdict comes
from pytest's junit report (written outside the graded tree; django and sympy: the test output) and the exit status
the box or runtime reported (:func:`crf_prime.swe.grading.grade_run`); a change that does not apply is
unresolved (swebench's "Patch Apply Failed"); git or runtime failures raise :class:`SweInfraError`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from crf_prime.errors import InfraError
from crf_prime.featdel import hide_test_id
from crf_prime.placement import GRADING_LIMITS, RUNTIME_MARGIN_S, GradingConfig, RuntimeLike, run_in_runtime
from crf_prime.sandbox import Sandbox, SandboxLimits, SandboxUnavailable
from crf_prime.swe.changes import Selection, never_graded_dir, path_problem, select_changes
from crf_prime.swe.directives import is_test_path, patch_files
from crf_prime.swe.evalscript import eval_script
from crf_prime.swe.forgery import ForgeryCheck, check_forgery
from crf_prime.swe.gitenv import GIT_ENV, git_argv, git_shell
from crf_prime.swe.goldjudge import GoldRecord, GoldVerdict, ReplayEnv, cached_record, judge, record_gold, strip_tests
from crf_prime.swe.grading import APPLY_PATCH_FAIL, GradeReport, frame_log
from crf_prime.swe.instance import SweInstance
from crf_prime.swe.parseworker import grade_run_off_loop
from crf_prime.swe.report import JUNIT_FILE, MAX_REPORT_BYTES
from crf_prime.swe.specs import repo_spec
from crf_prime.swe.workspace import Entry, TreeTooLarge, escaped, read_tree, remove_file, remove_tree, write_file

logger = logging.getLogger(__name__)

SWE_GRADING_LIMITS = GRADING_LIMITS.model_copy(
    update={"wall_seconds": 1800.0, "output_bytes": 20_000_000, "tmp_size_mb": 1024}
)
"""swebench's test timeout (1800 s; hitting it grades as unresolved), room for a large repo's test log, and the
size of the box's private /tmp, which holds the local placement's copy of the graded tree."""
GRADE_DIR = "/tmp/crf-grade"
"""Local placement: where, inside the box, the tests run on a copy of the graded tree (a size-capped tmpfs)."""


class SweGradingConfig(GradingConfig):
    """Where and how an instance's tests run (``[env.taskset.task.grading]``, the same table as feature-deletion's):
    ``limits.wall_seconds`` is the test command's timeout in either placement; ``unsandboxed`` and ``python`` (default:
    this process's interpreter, whose bin dir leads PATH) apply to the local placement."""

    limits: SandboxLimits = SWE_GRADING_LIMITS
    """Limits of the test run; hitting ``wall_seconds`` grades as unresolved, like the swebench harness."""
    gold_judge: bool = True
    """An attempt whose tests resolve must also agree with the gold patch on gold's calls of the functions gold
    changes, recorded during the FAIL_TO_PASS tests, and on generated variations (:mod:`crf_prime.swe.goldjudge`);
    local placement only. The verdict goes in ``trace.info["swebench"]["gold_judge"]``."""


class SweInfraError(InfraError):
    """The environment could not prepare or run the tests (image, git, runtime, harness timeout)."""


class EvalRun(BaseModel):
    """One grading run: the patch that was graded, the framed test log and the verdict."""

    model_config = ConfigDict(frozen=True)

    model_patch: str
    """The agent's change as graded (allowed source changes only)."""
    log: str
    """Test output framed by the grader with start/end markers and the exit status the box reported."""
    report: GradeReport
    timed_out: bool = False
    """Whether the test command hit its timeout (graded as unresolved, like swebench)."""
    dropped: dict[str, str] = {}
    """Paths the agent changed that were graded at their base state, with why (:mod:`crf_prime.swe.changes`)."""
    forgery: str = ""
    """The forgery policy's findings on the added code (empty: none)."""
    suspected_forgery: bool = False
    """Whether added code uses constructs outside the forgery policy's allow-list."""
    gold_judge: GoldVerdict = GoldVerdict(verdict="not-run")
    """Whether the change agrees with gold on gold's calls (:mod:`crf_prime.swe.goldjudge`)."""


_DIFF_START = re.compile(r"^diff --git ", re.M)


def split_diff(diff: str) -> list[str]:
    """A ``git diff`` split into one chunk per file (each starting with ``diff --git``)."""
    starts = [m.start() for m in _DIFF_START.finditer(diff)]
    ends = [*starts[1:], len(diff)] if starts else []
    return [diff[a:b] for a, b in zip(starts, ends, strict=True)]


def drop_test_files(diff: str, also: set[str] | frozenset[str] = frozenset()) -> str:
    """``diff`` without the chunks that touch test files (:func:`is_test_path`) or any path in ``also``."""
    kept = []
    for chunk in split_diff(diff):
        paths = patch_files(chunk.split("\n", 1)[0])
        if paths and (is_test_path(paths[0]) or paths[0] in also):
            continue
        kept.append(chunk)
    return "".join(kept)


_NEW_MODE = re.compile(r"^new (?:file )?mode (\d+)$", re.M)


def filter_diff(diff: str, *, base_paths: set[str], test_paths: set[str]) -> tuple[str, dict[str, str]]:
    """``diff`` (``--no-renames``) restricted to allowed source changes; all chunks of a path go together."""
    base_dirs = {p.split("/", 1)[0] for p in base_paths if "/" in p}
    by_path: dict[str, list[str]] = {}
    for chunk in split_diff(diff):
        paths = patch_files(chunk.split("\n", 1)[0])
        by_path.setdefault(paths[0] if paths else "", []).append(chunk)
    kept, dropped = [], {}
    for path, chunks in by_path.items():
        text = "".join(chunks)
        why = path_problem(path, tracked=path in base_paths, base_dirs=base_dirs, test_paths=test_paths)
        modes = _NEW_MODE.findall(text)
        if not why and any(m not in ("100644", "100755") for m in modes):
            why = "symlink or submodule"
        if not why and ("\nGIT binary patch\n" in text or "\nBinary files " in text):
            why = "binary content"
        if why:
            dropped[path] = why
        else:
            kept.append(text)
    return "".join(kept), dropped


async def _run(runtime: RuntimeLike, script: str, *, timeout: float | None = None) -> Any:
    try:
        return await asyncio.wait_for(runtime.run(["bash", "-c", script], {}), timeout)
    except TimeoutError as e:
        raise SweInfraError(f"runtime command did not finish within {timeout}s: {script[:200]!r}") from e


async def _must(runtime: RuntimeLike, script: str, what: str, *, timeout: float | None = 600.0) -> str:
    result = await _run(runtime, script, timeout=timeout)
    if result.exit_code != 0:
        detail = (result.stderr or result.stdout or "").strip()[-2000:]
        raise SweInfraError(f"{what} failed (exit {result.exit_code}): {detail}")
    return result.stdout


class SweRunner:
    """Setup, patch capture and grading for one instance in one runtime."""

    def __init__(
        self,
        instance: SweInstance,
        *,
        repo_dir: str,
        grading: GradingConfig | None = None,
        reinstall: bool = True,
        local: bool = False,
        mirror: Path | None = None,
    ) -> None:
        self.instance = instance
        self.repo_dir = repo_dir
        self.grading = grading or SweGradingConfig()
        self.test_timeout = self.grading.limits.wall_seconds
        self.reinstall = reinstall
        self.local_python = (self.grading.python or sys.executable) if local else None
        """Set for the local placement: the interpreter whose bin dir leads PATH in the sandboxed test run."""
        self.mirror = mirror
        """Local placement: the grader-owned git repository the fresh grading tree is cloned from."""
        self.spec = repo_spec(instance)

    @property
    def _q(self) -> str:
        return shlex.quote(self.repo_dir)

    # ---- setup ---------------------------------------------------------------------------------------------
    async def clone_local(self, runtime: RuntimeLike, mirror: Path) -> None:
        """Local placement: clone ``mirror`` (a git repo holding ``base_commit``) into ``repo_dir``."""
        if not (mirror / ".git").exists() and not (mirror / "HEAD").exists():
            raise SweInfraError(
                f"instance {self.instance.instance_id!r}: no git repository for {self.instance.repo!r} at {mirror}"
            )
        await _must(
            runtime,
            f"git clone -q --no-hardlinks {shlex.quote(str(mirror))} {self._q} && git -C {self._q} remote remove origin",
            f"cloning {mirror}",
        )

    async def prepare(self, runtime: RuntimeLike, *, hide_future: bool = True) -> None:
        """Leave ``repo_dir`` at ``base_commit`` with a clean tree (test patch withheld).

        With ``hide_future`` every ref that is not an ancestor of ``base_commit`` is deleted and the reflogs are
        expired, so ``git log --all`` / ``git reflog`` do not hand the agent the upstream fix (sweb.eval images keep
        the reflog of their ``reset --hard``). Historical tags stay (setuptools_scm versions need them); the
        unreachable objects stay too until a ``git gc --prune=now``, which is too slow per rollout on big repos.
        """
        base = shlex.quote(self.instance.base_commit)
        probe = await _run(runtime, f"git -C {self._q} rev-parse --verify -q {base}^{{commit}}", timeout=120)
        if probe.exit_code != 0:
            raise SweInfraError(
                f"instance {self.instance.instance_id!r}: {self.repo_dir} is not a git repo holding base_commit "
                f"{self.instance.base_commit} (wrong or missing image?): {(probe.stderr or probe.stdout).strip()[-500:]}"
            )
        # the image's /testbed may belong to another uid: trust exactly this repo, for these commands only
        trust = f"export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0={self._q}; "
        script = f"{trust}cd {self._q} && git -c advice.detachedHead=false checkout -q -f {base} && git clean -q -fd"
        if hide_future:
            script += (
                " && git for-each-ref --format='%(refname)' | while read -r ref; do "
                f'git merge-base --is-ancestor "$ref" {base} 2>/dev/null || git update-ref -d "$ref"; done'
                " && git reflog expire --expire=now --all"
            )
        await _must(runtime, script, "checking out base_commit")

    async def empty_workspace(self) -> None:
        """Local placement, after grading: remove what the agent left in its directory (whatever its depth and modes;
        the runtime's own teardown cannot remove a deep or mode-000 tree), keeping the empty directory. Errors are
        logged, never raised: the verdict stands."""
        if self.local_python is None:
            return
        root = Path(self.repo_dir)
        errors = await asyncio.to_thread(remove_tree, root)
        await asyncio.to_thread(root.mkdir, exist_ok=True)
        if errors:
            logger.error("could not empty the rollout's directory %s: %s", root, "; ".join(errors[:5]))

    # ---- grading -------------------------------------------------------------------------------------------
    @property
    def _test_paths(self) -> set[str]:
        return set(patch_files(self.instance.test_patch))

    async def apply_gold(self, runtime: RuntimeLike) -> None:
        """Apply the instance's gold patch to the freshly set-up working tree (for ``validate()``)."""
        if self.local_python is not None:
            await asyncio.to_thread(self._apply_gold_local)
            return
        scratch = (await _must(runtime, "mktemp -d /tmp/crf-swe.XXXXXXXX", "creating a scratch dir")).strip()
        await runtime.write(f"{scratch}/gold.patch", self.instance.patch.encode())
        await _must(
            runtime, f"cd {self._q} && {self._git('apply', '--binary', f'{scratch}/gold.patch')}", "applying gold"
        )

    def _apply_gold_local(self) -> None:
        with tempfile.TemporaryDirectory(prefix="crf-swe-gold-") as tmp:
            patch = Path(tmp) / "gold.patch"
            patch.write_text(self.instance.patch)
            _host_git(Path(self.repo_dir), "apply", "--binary", str(patch), what="applying the gold patch")

    async def evaluate(self, runtime: RuntimeLike, *, baseline: dict[str, str] | None = None) -> EvalRun:
        """Grade the agent's change on a fresh tree at ``base_commit`` (see the module docstring).

        ``baseline``: container placement, :meth:`untracked` as taken after setup (None: every untracked file,
        ignored build outputs included, is removed before the tests, so compiled repos rebuild in the install step).
        """
        if self.local_python is not None:
            return await self._evaluate_local()
        return await self._evaluate_in_runtime(runtime, baseline)

    async def _grade(
        self,
        output: str,
        exit_code: int | None,
        timed_out: bool,
        *,
        prepare: str,
        model_patch: str,
        dropped: dict[str, str],
        check: ForgeryCheck,
        truncated: bool,
        junit: bytes | None,
        py_paths: set[str],
    ) -> EvalRun:
        """The verdict, parsed in a child process (a 20 MB log must not stall the event loop); see
        :func:`grade_run`."""
        report = await grade_run_off_loop(
            self.instance.instance_id,
            output,
            exit_code,
            self.spec.log_parser,
            self.instance.FAIL_TO_PASS,
            self.instance.PASS_TO_PASS,
            xfail_ok=self.instance.GOLD_XFAIL,
            timed_out=timed_out,
            truncated=truncated,
            junit=junit,
            py_paths=py_paths if self.spec.junit else None,
        )
        if check.certain:
            report = self._unresolved(f"the fix imports the test runner (certain forgery): {check.detail}")
        note = f"{TESTS_TIMEOUT_NOTE} {self.test_timeout:g}s" if timed_out else ""
        log = await asyncio.to_thread(frame_log, prepare, output, exit_code, note)
        return EvalRun(
            model_patch=model_patch,
            log=log,
            report=report,
            timed_out=timed_out,
            dropped=_escaped_keys(dropped),
            forgery=check.detail,
            suspected_forgery=check.suspected,
        )

    def _unresolved(self, reason: str) -> GradeReport:
        return GradeReport(
            instance_id=self.instance.instance_id,
            found=False,
            reason=reason,
            f2p_failure=self.instance.FAIL_TO_PASS,
            p2p_failure=self.instance.PASS_TO_PASS,
        )

    # ---- local placement: a fresh tree in a grader-owned dir, tests in the box ----------------------------------
    async def _evaluate_local(self) -> EvalRun:
        if self.mirror is None:
            raise SweInfraError(f"instance {self.instance.instance_id!r}: local grading needs the mirror path")
        scratch = Path(tempfile.mkdtemp(prefix="crf-swe-"))
        try:
            prepared = await asyncio.to_thread(self._materialise, scratch)
            if isinstance(prepared, EvalRun):
                return prepared
            model_patch, selection, check, py_paths = prepared
            out, err, code, timed_out, truncated = await self._run_sandboxed(scratch)
            junit = await asyncio.to_thread(_read_report, scratch / "out" / JUNIT_FILE) if self.spec.junit else None
            graded = await self._grade(
                out,
                code,
                timed_out,
                prepare=err,
                model_patch=model_patch,
                dropped=selection.dropped,
                check=check,
                truncated=truncated,
                junit=junit,
                py_paths=py_paths,
            )
            return await asyncio.to_thread(self._judged, graded, scratch / "judge" / "repo")
        finally:
            await _cleanup(scratch)

    def _gold_switch(self) -> bool:
        return bool(getattr(self.grading, "gold_judge", True))

    def _judged(self, graded: EvalRun, agent_repo: Path) -> EvalRun:
        """Local placement: a resolved attempt must agree with gold on gold's calls (:mod:`crf_prime.swe.goldjudge`)."""
        if not self._gold_switch():
            return graded.model_copy(update={"gold_judge": GoldVerdict(verdict="off")})
        if not graded.report.resolved:
            return graded
        record = cached_record(self._gold_key(), self.gold_record)
        verdict = judge(record, agent_repo, sandbox=Sandbox(self.grading), env=self._replay_env())
        update: dict[str, object] = {"gold_judge": verdict}
        if verdict.verdict == "disagree":
            reason = (
                f"the change disagrees with gold on {verdict.mismatches} of {verdict.calls} calls: {verdict.reason}"
            )
            update["report"] = self._unresolved(reason)
        return graded.model_copy(update=update)

    def _replay_env(self) -> ReplayEnv:
        assert self.local_python is not None
        python = Path(self.local_python)
        return ReplayEnv(
            python=python, venv=Path(sys.prefix) if python == Path(sys.executable) else python.parent.parent
        )

    def _gold_key(self) -> tuple:
        i = self.instance
        return (i.instance_id, i.base_commit, i.patch, i.test_patch, str(self.mirror), self.local_python)

    def gold_record(self, work: Path) -> GoldRecord:
        """Gold's tree (base + gold patch + test patch) in ``work``, and its record."""
        assert self.mirror is not None
        tree = work / "tree"
        _host_git(None, "clone", "-q", "--no-hardlinks", "--no-checkout", str(self.mirror), str(tree), what="cloning")
        _host_git(tree, "checkout", "-q", "--detach", self.instance.base_commit, what="checking out base_commit")
        touched = [p for p in patch_files(self.instance.patch) if p.endswith(".py")]
        base_sources = {p: (tree / p).read_text(errors="replace") for p in touched if (tree / p).is_file()}
        for name, patch in (("gold.patch", self.instance.patch), ("test.patch", self.instance.test_patch)):
            (work / name).write_text(patch)
            _host_git(tree, "apply", "--binary", str(work / name), what=f"applying the {name.split('.')[0]} patch")
        if not self.spec.junit:
            return GoldRecord(not_applicable="the test runner is not pytest (the recorder is a pytest plugin)")
        return record_gold(
            self.instance.instance_id,
            tree,
            base_sources=base_sources,
            gold_patch=self.instance.patch,
            test_paths=self._test_paths,
            fail_to_pass=self.instance.FAIL_TO_PASS,
            sandbox=Sandbox(self.grading),
            env=self._replay_env(),
            work=work / "record",
        )

    def _materialise(self, scratch: Path) -> tuple[str, Selection, ForgeryCheck, set[str]] | EvalRun:
        """Clone the mirror at ``base_commit`` into ``scratch/repo``, write the allowed changes, apply the test patch.

        Also returns the ``.py`` paths of the graded tree (junit report ids are resolved against them)."""
        assert self.mirror is not None
        fresh = scratch / "repo"
        base = self.instance.base_commit
        _host_git(None, "clone", "-q", "--no-hardlinks", "--no-checkout", str(self.mirror), str(fresh), what="cloning")
        _host_git(fresh, "checkout", "-q", "--detach", base, what="checking out base_commit")
        base_tree = read_tree(fresh, never_graded_dir)
        try:
            agent_tree = read_tree(Path(self.repo_dir), never_graded_dir)
        except TreeTooLarge as e:
            return EvalRun(model_patch="", log="", report=self._unresolved(f"workspace refused: {e}"))
        selection = select_changes(base_tree, agent_tree, self._test_paths)
        check = _checked(
            {p: _text(base_tree.get(p)) for p in selection.kept},
            {p: _text(e) for p, e in selection.kept.items() if e is not None},
            base_tree,
            {p: _text(e) for p, e in base_tree.items() if p.endswith(".py")},  # for the base tree's gadgets
        )
        try:
            for path, entry in selection.kept.items():
                if entry is None:
                    remove_file(fresh, path)
            for path, entry in selection.kept.items():
                if entry is not None:
                    write_file(fresh, path, entry.data, executable=entry.executable)
        except OSError as e:
            report = self._unresolved(f"{APPLY_PATCH_FAIL}: {e}")
            return EvalRun(model_patch="", log="", report=report, dropped=_escaped_keys(selection.dropped))
        _host_git(fresh, "add", "-A", what="recording the graded change")
        model_patch = _host_git(
            fresh, "diff", "--cached", "--binary", "--no-color", "--no-renames", "--no-ext-diff", base, what="diffing"
        )
        if self._gold_switch():  # the graded change without tests, for the gold judge
            judged = scratch / "judge" / "repo"
            shutil.copytree(fresh, judged, symlinks=True, ignore=shutil.ignore_patterns(".git"))
            strip_tests(judged, self._test_paths)
        (scratch / "test.patch").write_text(self.instance.test_patch)
        _host_git(fresh, "apply", "--binary", str(scratch / "test.patch"), what="applying the test patch")
        (scratch / "bin").mkdir()
        (scratch / "out").mkdir()
        script = eval_script(
            self.instance,
            repo_dir=str(fresh),
            reinstall=self.reinstall,
            spec=self.spec,
            junit_path=str(scratch / "out" / JUNIT_FILE) if self.spec.junit else None,
            copy_to=GRADE_DIR,
            plugin_dir=str(hide_test_id.install_into(scratch / "lib")),
        )
        (scratch / "bin" / "eval.sh").write_text(script)
        graded = {p for p, e in selection.kept.items() if e is not None} | set(base_tree) | self._test_paths
        py_paths = {p for p in graded if p.endswith(".py") and selection.kept.get(p, True) is not None}
        return model_patch, selection, check, py_paths

    async def _run_sandboxed(self, scratch: Path) -> tuple[str, str, int | None, bool, bool]:
        """The eval script in the box: ``scratch`` read-only but for ``scratch/out`` (the junit report); the tests
        run on a copy of ``scratch/repo`` in the box's size-capped private /tmp."""

        assert self.local_python is not None
        python = Path(self.local_python)
        prefix = Path(sys.prefix) if Path(self.local_python) == Path(sys.executable) else python.parent.parent
        try:
            sandbox = Sandbox(self.grading)
            result = await asyncio.wait_for(
                sandbox.arun(
                    ["bash", str(scratch / "bin" / "eval.sh")],
                    workdir=scratch,
                    cwd=scratch / "repo",
                    ro_binds=[prefix],
                    writable=[scratch / "out"],
                    env={"PATH": f"{python.parent}:/usr/local/bin:/usr/bin:/bin", "HOME": GRADE_DIR},
                ),
                self.test_timeout + RUNTIME_MARGIN_S,
            )
        except SandboxUnavailable as e:
            raise SweInfraError(f"cannot run the tests sandboxed: {e}") from e
        except TimeoutError as e:
            raise SweInfraError(f"the sandboxed test run did not return within {self.test_timeout}s + margin") from e
        timed_out = result.limit_hit == "wall"
        return result.stdout, result.stderr, result.exit_code, timed_out, result.stdout_truncated

    # ---- container placement: the same steps inside the instance's container -----------------------------------
    def _git(self, *args: str) -> str:
        return git_shell(*args, git_dir=f"{self.repo_dir}/.git", work_tree=self.repo_dir)

    async def untracked(self, runtime: RuntimeLike) -> dict[str, str]:
        """Container placement: every untracked path (ignored ones included: build outputs) -> its SHA-1, ``link:``
        + target for a symlink, '' for anything else; taken right after :meth:`prepare`. Grading keeps exactly these
        (unchanged) and removes every other untracked path. Nothing but regular files is opened (``find -type``)."""
        listed = f"cd {self._q} && {self._git('ls-files', '-o', '-z')}"
        files = "xargs -0 -r sh -c 'find \"$@\" -maxdepth 0 -type f -print0' sh | xargs -0 -r sha1sum -z --"
        links = 'xargs -0 -r sh -c \'find "$@" -maxdepth 0 -type l -printf "link:%l  %p\\0"\' sh'
        out = {p: "" for p in (await _must(runtime, listed, "listing untracked files")).split("\0") if p}
        for pipeline in (files, links):
            for record in (await _must(runtime, f"{listed} | {pipeline}", "hashing untracked files")).split("\0"):
                digest, sep, path = record.partition("  ")
                if sep and path in out:
                    out[path] = digest
        return out

    async def _evaluate_in_runtime(self, runtime: RuntimeLike, baseline: dict[str, str] | None) -> EvalRun:
        base = self.instance.base_commit
        q = shlex.quote
        scratch = (await _must(runtime, "mktemp -d /tmp/crf-swe.XXXXXXXX", "creating a scratch dir")).strip()
        # untracked files the agent made or changed (ignored or excluded ones too) are part of its change
        now = await self.untracked(runtime)
        extra = sorted(p for p, d in now.items() if baseline is None or p not in baseline or baseline[p] != d)
        regular = [p for p in extra if now[p] and not now[p].startswith("link:")]
        await runtime.write(f"{scratch}/extra", "".join(f"{p}\0" for p in extra).encode())
        await runtime.write(f"{scratch}/regular", "".join(f"{p}\0" for p in regular).encode())
        add_regular = self._git(
            "add", "-f", "--ignore-errors", f"--pathspec-from-file={scratch}/regular", "--pathspec-file-nul"
        )
        # --ignore-errors: an entry git cannot index (a nested repo without a commit) is left out, not fatal;
        # whatever is left out is not graded and is removed below
        diff = await _must(
            runtime,
            f"cd {self._q} && {{ {self._git('add', '-A', '--ignore-errors')}; {add_regular}; }} >/dev/null 2>&1; "
            f"{self._git('diff', '--cached', '--binary', '--no-color', '--no-renames', '--no-ext-diff', '--no-textconv', base)}"
            f" && {self._git('reset', '-q')}",
            "capturing the agent's diff",
        )
        listing = await _must(
            runtime, f"cd {self._q} && {self._git('ls-tree', '-r', '--name-only', '-z', base)}", "listing base"
        )
        base_paths = {p for p in listing.split("\0") if p}
        model_patch, dropped = filter_diff(diff, base_paths=base_paths, test_paths=self._test_paths)
        originals = {}
        for path in sorted(p for p in patch_files(model_patch) if p.endswith(".py") and p in base_paths):
            show = self._git("show", f"{base}:{path}")
            originals[path] = await _must(runtime, f"cd {self._q} && {show}", "reading a base file")
        # back to base: tracked files reset, untracked ones removed unless they are setup's (build outputs)
        clean = self._git("clean", "-q", "-ffdx") if baseline is None else self._git("clean", "-q", "-ffd")
        remove = f"xargs -0 -r rm -rf -- < {q(scratch + '/extra')}"
        reset = f"cd {self._q} && {remove} && {self._git('reset', '-q', '--hard', base)} && {clean}"
        await _must(runtime, reset, "resetting to base")
        if model_patch.strip():
            await runtime.write(f"{scratch}/model.patch", model_patch.encode())
            applied = await _run(runtime, f"cd {self._q} && {self._git('apply', '--binary', f'{scratch}/model.patch')}")
            if applied.exit_code != 0:
                report = self._unresolved(f"{APPLY_PATCH_FAIL}: {(applied.stderr or applied.stdout).strip()[-500:]}")
                return EvalRun(model_patch=model_patch, log="", report=report, dropped=dropped)
        changed = {}
        for path in sorted(p for p in patch_files(model_patch) if p.endswith(".py")):
            probe = await _run(runtime, f"cat {q(f'{self.repo_dir}/{path}')}")
            if probe.exit_code == 0:
                changed[path] = probe.stdout
        check = _checked(originals, changed, base_paths)
        await runtime.write(f"{scratch}/test.patch", self.instance.test_patch.encode())
        apply_tests = self._git("apply", "--binary", f"{scratch}/test.patch")
        await _must(runtime, f"cd {self._q} && {apply_tests}", "applying the test patch")
        junit_path = f"{scratch}/out/{JUNIT_FILE}"
        await _must(runtime, f"mkdir {q(scratch + '/out')} {q(scratch + '/lib')}", "creating the report dir")
        plugin = Path(hide_test_id.__file__).read_bytes()
        await runtime.write(f"{scratch}/lib/{hide_test_id.MODULE}.py", plugin)
        script = eval_script(
            self.instance,
            repo_dir=self.repo_dir,
            reinstall=self.reinstall,
            spec=self.spec,
            junit_path=junit_path if self.spec.junit else None,
            plugin_dir=f"{scratch}/lib",
        )
        await runtime.write(f"{scratch}/eval.sh", script.encode())
        result = await run_in_runtime(runtime, ["bash", f"{scratch}/eval.sh"], {}, wall_seconds=self.test_timeout)
        junit = None
        if self.spec.junit:
            read = await _run(runtime, f"test -f {q(junit_path)} && head -c {MAX_REPORT_BYTES + 1} {q(junit_path)}")
            junit = read.stdout.encode("utf-8", "surrogateescape") if read.exit_code == 0 else None
        py_paths = {p for p in base_paths | set(patch_files(model_patch)) | self._test_paths if p.endswith(".py")}
        graded = await self._grade(
            result.stdout,
            result.exit_code,
            result.timed_out,
            prepare=result.stderr,
            model_patch=model_patch,
            dropped=dropped,
            check=check,
            truncated=False,
            junit=junit,
            py_paths=py_paths,
        )
        if self._gold_switch() and graded.report.resolved:
            why = "container placement: the gold judge runs only in the local placement (its replay box is the host's sandbox)"
            return graded.model_copy(update={"gold_judge": GoldVerdict(verdict="not-applicable", reason=why)})
        return graded


TESTS_TIMEOUT_NOTE = ">>>>> Tests Timed Out: after"


def _checked(
    originals: dict[str, str],
    changed: dict[str, str],
    base_paths: Iterable[str],
    base_sources: Mapping[str, str] | None = None,
) -> ForgeryCheck:
    """:func:`check_forgery`, where a checker that runs out of stack or memory on the added code is a suspected
    forgery (code built to exhaust the checker), never a crash of the rollout."""
    try:
        return check_forgery(originals, changed, base_paths, base_sources)
    except (RecursionError, MemoryError) as e:
        return ForgeryCheck(suspected=True, certain=False, detail=f"the forgery check gave up ({type(e).__name__})")


def _escaped_keys(paths: dict[str, str]) -> dict[str, str]:
    """Paths made valid UTF-8 for ``trace.info`` (file names need not be)."""
    return {escaped(p): why for p, why in paths.items()}


def _read_report(path: Path) -> bytes | None:
    """The junit report, or None when pytest did not write one (a regular file only, size-capped)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return f.read(MAX_REPORT_BYTES + 1)


async def _cleanup(scratch: Path) -> None:
    """Remove the grading dir; a failure is logged and never replaces the verdict (or the error) being returned."""
    try:
        errors = await asyncio.to_thread(remove_tree, scratch)
    except Exception as e:  # remove_tree returns its errors; this is a last line of defence
        errors = [f"{type(e).__name__}: {e}"]
    if errors:
        logger.error("could not remove the grading dir %s: %s", scratch, "; ".join(errors[:5]))


def _text(entry: Entry | None) -> str:
    return entry.data.decode("utf-8", errors="replace") if entry is not None and entry.kind == "file" else ""


def _host_git(repo: Path | None, *args: str, what: str) -> str:
    """Grader-owned git on the host: only on trees the grader created, with :mod:`crf_prime.swe.gitenv` settings."""
    argv = git_argv(*args) if repo is None else git_argv(*args, git_dir=str(repo / ".git"), work_tree=str(repo))
    env = {**os.environ, **GIT_ENV}
    for key in (
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    ):
        env.pop(key, None)
    result = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, errors="replace", check=False)
    if result.returncode != 0:
        raise SweInfraError(f"{what} failed (exit {result.returncode}): {result.stderr.strip()[-2000:]}")
    return result.stdout
