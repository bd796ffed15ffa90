"""Prepare an instance's repository in a runtime, and grade the agent's change the way the swebench harness does.

The runtime is anything with verifiers' ``async run(argv, env) -> ProgramResult`` and ``async write(path, data)``
(``verifiers.v1.Runtime``), so this module does not import verifiers. Two placements:

* container (docker / prime / ...): the ``sweb.eval`` image already holds the repo at ``base_commit`` in
  ``/testbed`` with its conda env; every command goes through ``runtime.run``.
* local (verifiers' subprocess runtime): the repo is cloned from a local mirror into the runtime's directory and
  the test command runs in crf-prime's bubblewrap sandbox (:class:`crf_prime.sandbox.Sandbox`), never bare.

Grading re-materialises the tree instead of trusting it: the agent's change is captured as a diff of non-test
files, the repo is reset to ``base_commit`` (dropping edited tests and added ``conftest.py`` files), that diff
and then the test patch are applied, and the test command restricted to the directives runs under a timeout.
Git or runtime failures raise :class:`SweInfraError`: they are never scored as a wrong answer.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import sys
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from crf_prime.swe.directives import is_test_path, patch_files
from crf_prime.swe.evalscript import eval_script
from crf_prime.swe.grading import TESTS_TIMEOUT, GradeReport, grade_log
from crf_prime.swe.instance import SweInstance
from crf_prime.swe.specs import repo_spec

WORK = ".git/crf-swe"
"""Scratch dir for patches and the eval script, inside ``.git`` so it never shows up in a diff."""

HARNESS_MARGIN_S = 120.0
"""Extra seconds the harness itself may take beyond the test timeout before it counts as an infra failure."""


class SweInfraError(RuntimeError):
    """The environment could not prepare or run the tests (image, git, runtime, harness timeout)."""


class RuntimeLike(Protocol):
    async def run(self, argv: list[str], env: dict[str, str]) -> Any: ...
    async def write(self, path: str, data: bytes) -> None: ...


class EvalRun(BaseModel):
    """One grading run: the patch that was graded, the framed test log and the verdict."""

    model_config = ConfigDict(frozen=True)

    model_patch: str
    """The agent's change as graded (non-test files only)."""
    log: str
    """Test output with the start/end markers and the recorded exit code."""
    report: GradeReport
    timed_out: bool = False
    """Whether the test command hit its timeout (graded as unresolved, like swebench)."""


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
        test_timeout: float = 1800.0,
        reinstall: bool = True,
        local_python: str | None = None,
        unsandboxed: bool = False,
    ) -> None:
        self.instance = instance
        self.repo_dir = repo_dir
        self.test_timeout = test_timeout
        self.reinstall = reinstall
        self.local_python = local_python
        """Set for the local placement: the interpreter whose bin dir leads PATH in the sandboxed test run."""
        self.unsandboxed = unsandboxed
        self.spec = repo_spec(instance)

    @property
    def _q(self) -> str:
        return shlex.quote(self.repo_dir)

    @property
    def _work(self) -> str:
        return f"{self.repo_dir}/{WORK}"

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
        trust = "" if self.local_python is not None else f"git config --global --add safe.directory {self._q}; "
        script = f"cd {self._q} && {trust}git -c advice.detachedHead=false checkout -q -f {base} && git clean -q -fd"
        if hide_future:
            script += (
                " && git for-each-ref --format='%(refname)' | while read -r ref; do "
                f'git merge-base --is-ancestor "$ref" {base} 2>/dev/null || git update-ref -d "$ref"; done'
                " && git reflog expire --expire=now --all"
            )
        await _must(runtime, script, "checking out base_commit")

    # ---- grading -------------------------------------------------------------------------------------------
    async def capture_patch(self, runtime: RuntimeLike) -> str:
        """The agent's change against ``base_commit`` (new files included), test files removed."""
        base = shlex.quote(self.instance.base_commit)
        diff = await _must(
            runtime,
            f"cd {self._q} && git add -A >/dev/null && git -c core.fileMode=false diff --cached --binary --no-color "
            f"--no-ext-diff {base} && git reset -q",
            "capturing the agent's diff",
        )
        return drop_test_files(diff, also=set(patch_files(self.instance.test_patch)))

    async def _apply(self, runtime: RuntimeLike, patch: str, name: str, what: str) -> None:
        path = f"{self._work}/{name}"
        await _must(runtime, f"mkdir -p {shlex.quote(self._work)}", "creating the scratch dir")
        await runtime.write(path, patch.encode())
        await _must(runtime, f"cd {self._q} && git apply --binary -v {shlex.quote(path)}", what)

    async def apply_gold(self, runtime: RuntimeLike) -> None:
        """Apply the instance's gold patch to the working tree (for ``validate()``)."""
        await self._apply(runtime, self.instance.patch, "gold.patch", "applying the gold patch")

    async def evaluate(self, runtime: RuntimeLike) -> EvalRun:
        """Grade the current working tree: capture, reset, re-apply, add the test patch, run, grade."""
        model_patch = await self.capture_patch(runtime)
        base = shlex.quote(self.instance.base_commit)
        await _must(runtime, f"cd {self._q} && git reset -q --hard {base} && git clean -q -fd", "resetting to base")
        if model_patch.strip():
            await self._apply(runtime, model_patch, "model.patch", "re-applying the agent's diff")
        await self._apply(runtime, self.instance.test_patch, "test.patch", "applying the test patch")
        script = eval_script(self.instance, repo_dir=self.repo_dir, reinstall=self.reinstall, spec=self.spec)
        await runtime.write(f"{self._work}/eval.sh", script.encode())
        if self.local_python is not None:
            log, timed_out = await self._run_sandboxed()
        else:
            log, timed_out = await self._run_in_runtime(runtime)
        if timed_out:
            log += f"\n{TESTS_TIMEOUT}: after {self.test_timeout:g}s\n"
        report = grade_log(
            self.instance.instance_id, log, self.spec.log_parser, self.instance.FAIL_TO_PASS, self.instance.PASS_TO_PASS
        )
        return EvalRun(model_patch=model_patch, log=log, report=report, timed_out=timed_out)

    async def _run_in_runtime(self, runtime: RuntimeLike) -> tuple[str, bool]:
        t = f"{self.test_timeout:g}"
        script = shlex.quote(f"{self._work}/eval.sh")
        result = await _run(
            runtime,
            f"timeout --kill-after=10 {t} bash {script} 2>&1",
            timeout=self.test_timeout + HARNESS_MARGIN_S,
        )
        return result.stdout, result.exit_code in (124, 137)

    async def _run_sandboxed(self) -> tuple[str, bool]:
        from crf_prime.sandbox import Sandbox, SandboxLimits, SandboxUnavailable

        assert self.local_python is not None
        python = Path(self.local_python)
        prefix = Path(sys.prefix) if Path(self.local_python) == Path(sys.executable) else python.parent.parent
        limits = SandboxLimits(wall_seconds=self.test_timeout, output_bytes=20_000_000, memory_mb=4096, pids=512)
        try:
            sandbox = Sandbox(limits, unsandboxed=self.unsandboxed)
            result = await asyncio.wait_for(
                sandbox.arun(
                    ["bash", f"{self._work}/eval.sh"],
                    workdir=Path(self.repo_dir),
                    ro_binds=[prefix],
                    env={"PATH": f"{python.parent}:/usr/local/bin:/usr/bin:/bin"},
                ),
                self.test_timeout + HARNESS_MARGIN_S,
            )
        except SandboxUnavailable as e:
            raise SweInfraError(f"cannot run the tests sandboxed: {e}") from e
        except TimeoutError as e:
            raise SweInfraError(f"the sandboxed test run did not return within {self.test_timeout}s + margin") from e
        return result.stdout + result.stderr, result.limit_hit == "wall"
