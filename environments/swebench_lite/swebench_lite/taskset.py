"""SWE-bench-lite as a verifiers v1 taskset (id ``swebench-lite``).

Data: one :class:`SweData` row per instance (the whole SWE-bench row rides on the wire, so the env server rebuilds
the task without loading the dataset). Behaviour (:class:`SweTask`): ``setup`` leaves the repo at ``base_commit``
with the test patch withheld; the ``resolved`` reward re-materialises the agent's change, applies the test patch,
runs the repo's test command on the test directives and grades FAIL_TO_PASS / PASS_TO_PASS with swebench's rules
(``crf_prime.swe``); ``validate`` applies the gold patch and must resolve. Infrastructure failures raise.

Placement: real instances use their ``sweb.eval.x86_64.<id>`` image on the docker / prime runtimes (repo in
``/testbed``). With ``repos_dir`` set, each repo is cloned from a local git mirror into the subprocess runtime and
the tests run in crf-prime's bubblewrap sandbox (how the offline mini SWE-bench fixture runs).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

import verifiers.v1 as vf
from pydantic import Field

from crf_prime.hints import FailingTest, HintTaskConfig, attach_hint_async, hint_writer
from crf_prime.hints.evidence import patch_new_lines
from crf_prime.placement import local_workdir
from crf_prime.swe.dataset import LITE, load_instances
from crf_prime.swe.instance import SweInstance
from crf_prime.swe.parseworker import failure_messages_off_loop
from crf_prime.swe.runner import EvalRun, SweGradingConfig, SweInfraError, SweRunner

logger = logging.getLogger(__name__)

TESTBED = "/testbed"
MAX_INFO_PATCH_CHARS = 200_000
"""The graded patch kept in ``trace.info["swebench"]`` is cut here (a vendored file must not bloat every trace)."""

SYSTEM_PROMPT = (
    "You are working in a checkout of the repository {repo} at {workdir}. Resolve the issue below by editing the "
    "repository's source files. Do not modify or add tests: hidden tests decide whether the issue is resolved."
)


class SweData(vf.TaskData):
    """One SWE-bench instance as task wire data."""

    instance: SweInstance
    """The SWE-bench row (issue, base commit, gold + test patches, F2P / P2P)."""
    mirror: str | None = None
    """Local placement: host path of a git repository holding ``base_commit`` (None: use the image's /testbed)."""
    sandbox_ro_binds: list[str] = Field(default_factory=list)
    """Local placement: host paths the sandboxed harness shows read-only (the Python prefix, so the agent can run
    the tests); read by :class:`crf_prime.harness.SandboxHarness`."""


class SweTaskConfig(vf.TaskConfig, HintTaskConfig):
    """Run-time knobs of each task (``--env.taskset.task.*``)."""

    grading: SweGradingConfig = Field(default_factory=SweGradingConfig)
    """Where and under which limits the tests run (``[...env.taskset.task.grading]``, the same table as
    feature-deletion's): ``limits.wall_seconds`` (1800) is the test command's timeout, hitting it grades as
    unresolved like the swebench harness; local placement only: ``python`` (default: this process's interpreter)
    leads PATH, ``unsandboxed`` runs the tests without bubblewrap (explicit opt-in; never a fallback)."""
    reinstall: bool = True
    """Re-run the repo's install step before the tests, as the swebench eval script does (compiled repos need it)."""
    hide_future_commits: bool = True
    """In setup, delete refs that are not ancestors of base_commit and expire reflogs, so git history does not hold
    the upstream fix."""
    reject_suspected_forgery: bool = False
    """Score unresolved when the fix's added code is outside the forgery policy's allow-list (``suspected_forgery``
    = 1; crf_prime.swe.forgery), not only when it is a certain forgery. Stricter: some honest fixes are refused."""
    hints: bool = True
    """Write a channel-2 hint from the failing FAIL_TO_PASS tests into ``trace.info["hint"]`` after scoring."""


class SweTask(vf.Task[SweData, vf.State, SweTaskConfig]):
    """Behaviour of one SWE-bench instance."""

    def __init__(self, data: SweData, config: SweTaskConfig | None = None) -> None:
        super().__init__(data, config)
        self._runs: dict[str, asyncio.Future[EvalRun]] = {}
        self._untracked: dict[str, dict[str, str]] = {}
        """Container placement: untracked files (build outputs) per trace right after setup, kept by grading."""

    @property
    def key(self) -> str:
        return self.data.instance.instance_id

    # ---- placement -------------------------------------------------------------------------------------------
    def _runner(self, runtime: vf.Runtime) -> SweRunner:
        local = self.data.mirror is not None
        if local:
            workdir = local_workdir(runtime)
            if workdir is None:
                raise SweInfraError(
                    f"instance {self.key!r} uses a local mirror (repos_dir), which needs the subprocess runtime; "
                    f"got {runtime.type!r}. Unset repos_dir to run the sweb.eval image on docker / prime."
                )
            repo_dir = str(workdir)
        else:
            repo_dir = self.data.workdir or TESTBED
        return SweRunner(
            self.data.instance,
            repo_dir=repo_dir,
            grading=self.config.grading,
            reinstall=self.config.reinstall,
            local=local,
            mirror=Path(self.data.mirror) if local and self.data.mirror else None,
        )

    def runtime_env(self) -> dict[str, str]:
        """Local placement: the task's Python leads PATH, so the agent (and the tests) run with its packages."""
        if self.data.mirror is None:
            return {}
        python = Path(self.config.grading.python or sys.executable)
        return {"PATH": f"{python.parent}:/usr/local/bin:/usr/bin:/bin"}

    async def setup(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        runner = self._runner(runtime)
        if self.data.mirror is not None:
            await runner.clone_local(runtime, Path(self.data.mirror))
        await runner.prepare(runtime, hide_future=self.config.hide_future_commits)
        if self.data.mirror is None:
            self._untracked[trace.id] = await runner.untracked(runtime)

    async def validate(self, runtime: vf.Runtime) -> bool | None:
        """Gold check: the gold patch applied to the set-up repo must resolve the instance."""
        runner = self._runner(runtime)
        baseline = await runner.untracked(runtime) if self.data.mirror is None else None
        await runner.apply_gold(runtime)
        run = await runner.evaluate(runtime, baseline=baseline)
        unlisted = sorted(set(run.report.f2p_xfail) - set(self.data.instance.GOLD_XFAIL))
        if unlisted:
            logger.warning(
                "instance %s: the gold patch leaves FAIL_TO_PASS tests XFAIL %s; list them in the row's GOLD_XFAIL "
                "column, or XFAIL is not accepted as a pass",
                self.key,
                unlisted,
            )
        return run.report.resolved

    # ---- scoring ---------------------------------------------------------------------------------------------
    async def _evaluation(self, trace: vf.Trace, runtime: vf.Runtime) -> EvalRun:
        """One grading run per trace, shared by the metrics and the reward (metrics are scored first)."""
        future = self._runs.get(trace.id)
        if future is None:
            baseline = self._untracked.pop(trace.id, None)
            future = asyncio.ensure_future(self._runner(runtime).evaluate(runtime, baseline=baseline))
            self._runs[trace.id] = future
        return await asyncio.shield(future)

    @vf.metric
    async def f2p_pass(self, trace: vf.Trace, runtime: vf.Runtime) -> float:
        """Share of FAIL_TO_PASS tests that pass after the agent's change."""
        return (await self._evaluation(trace, runtime)).report.f2p_fraction

    @vf.metric
    async def p2p_pass(self, trace: vf.Trace, runtime: vf.Runtime) -> float:
        """Share of PASS_TO_PASS tests that still pass after the agent's change."""
        return (await self._evaluation(trace, runtime)).report.p2p_fraction

    @vf.metric
    async def suspected_forgery(self, trace: vf.Trace, runtime: vf.Runtime) -> float:
        """1.0 when the fix's added code uses constructs outside the forgery policy's allow-list (crf_prime.swe.forgery)."""
        return 1.0 if (await self._evaluation(trace, runtime)).suspected_forgery else 0.0

    @vf.reward(weight=1.0)
    async def resolved(self, trace: vf.Trace, runtime: vf.Runtime) -> float:
        """1.0 when every FAIL_TO_PASS and every PASS_TO_PASS test passes (swebench ``RESOLVED_FULL``), else 0.0."""
        try:
            run = await self._evaluation(trace, runtime)
        finally:
            self._runs.pop(trace.id, None)
            await self._runner(runtime).empty_workspace()
        report = run.report
        trace.info["swebench"] = {
            "instance_id": report.instance_id,
            "resolution": report.resolution,
            "log_trusted": report.found,
            "reason": report.reason,
            "test_exit_code": report.exit_code,
            "timed_out": run.timed_out,
            "f2p_failure": list(report.f2p_failure),
            "p2p_failure": list(report.p2p_failure),
            "model_patch": run.model_patch[:MAX_INFO_PATCH_CHARS],
            "model_patch_chars": len(run.model_patch),
            "dropped": dict(list(run.dropped.items())[:200]),
            "forgery": run.forgery,
            "gold_judge": run.gold_judge.model_dump(),
        }
        if self.config.hints:
            messages = await failure_messages_off_loop(run.log)
            failing = [FailingTest(name=t, message=messages.get(t, report.reason)) for t in report.f2p_failure]
            await attach_hint_async(
                trace,
                failing_tests=failing,
                test_sources=patch_new_lines(self.data.instance.test_patch),  # grader-side test lines only
                writer=hint_writer(self.config.hint_writer),
                target=self.config.hint_target,
            )
        if run.suspected_forgery and self.config.reject_suspected_forgery:
            trace.info["swebench"]["resolution"] = "RESOLVED_NO"
            trace.info["swebench"]["reason"] = f"suspected forgery: {run.forgery}"
            return 0.0
        return 1.0 if report.resolved else 0.0


class SweTasksetConfig(vf.TasksetConfig):
    """Which instances load, and where they run (``--env.taskset.*``)."""

    dataset: str = LITE
    """Hugging Face dataset id (needs the ``hf`` extra) or a local .json / .jsonl / .parquet file."""
    split: str = "test"
    """Dataset split (Lite: ``test`` = 300, ``dev`` = 23)."""
    instance_ids: list[str] | None = None
    """Keep only these instances (in this order); unknown ids are an error."""
    repos: list[str] | None = None
    """Keep only instances of these ``owner/name`` repositories."""
    registry: str = "swebench"
    """Image namespace: ``<registry>/sweb.eval.x86_64.<id>:latest`` with ``__`` spelled ``_1776_`` (Docker Hub);
    empty = the local harness name ``sweb.eval.x86_64.<id>:latest``."""
    image_template: str | None = None
    """Overrides ``registry``: a format string with ``{instance_id}`` (and ``{instance_id_1776}``)."""
    workdir: str = TESTBED
    """Where the repo lives in the image."""
    repos_dir: Path | None = None
    """Local placement: directory of git mirrors named ``<owner>__<name>``; tasks then need no image and run on
    the subprocess runtime with sandboxed tests."""
    include_hints_text: bool = False
    """Append the issue's ``hints_text`` (pre-fix discussion) to the prompt."""
    system_prompt_template: str | None = SYSTEM_PROMPT
    """System prompt (``{repo}``, ``{workdir}`` filled in); None = no system prompt."""
    task: SweTaskConfig = Field(default_factory=SweTaskConfig)


class SweTaskset(vf.Taskset[SweTask, SweTasksetConfig]):
    """SWE-bench-lite instances as verifiers tasks."""

    def _image(self, instance: SweInstance) -> str:
        template = self.config.image_template
        if template is not None:
            return template.format(
                instance_id=instance.instance_id, instance_id_1776=instance.instance_id.replace("__", "_1776_")
            )
        return instance.image(self.config.registry)

    def _data(self, instance: SweInstance) -> dict[str, Any]:
        prompt = instance.problem_statement
        if self.config.include_hints_text and instance.hints_text.strip():
            prompt += f"\n\nHints (discussion before the fix):\n{instance.hints_text}"
        local = self.config.repos_dir is not None
        workdir = None if local else self.config.workdir
        data: dict[str, Any] = {
            "id": instance.instance_id,
            "name": instance.instance_id,
            "prompt": prompt,
            "instance": instance,
            "image": None if local else self._image(instance),
            "workdir": workdir,
        }
        if local:
            assert self.config.repos_dir is not None
            data["mirror"] = str((self.config.repos_dir / instance.repo.replace("/", "__")).resolve())
            data["sandbox_ro_binds"] = [sys.prefix]
        if self.config.system_prompt_template is not None:
            data["system_prompt"] = self.config.system_prompt_template.format(
                repo=instance.repo, workdir=workdir or "the current directory"
            )
        return data

    def load(self) -> list[SweTask]:
        instances = load_instances(
            self.config.dataset, self.config.split, instance_ids=self.config.instance_ids, repos=self.config.repos
        )
        # idx: verifiers 0.4.0 sets it while iterating; the commit prime-rl pins leaves it to load()
        return [SweTask(SweData(idx=idx, **self._data(i)), self.config.task) for idx, i in enumerate(instances)]
