"""environments/feature_deletion on real verifiers 0.4.0: task hooks on a subprocess runtime, the real vf-validate and
vf-eval CLIs (the model played by crf_prime.loopback replaying a scripted agent), hints in trace.info."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import verifiers.v1 as vf
from featdel_support import INFLECTION, generated
from verifiers.v1.runtimes import provision_runtime
from vf_cli_support import VALIDATE_HAS_NOOP, first_user_text, tool_messages, traces_by_task, vf_eval, vf_validate

from crf_prime.featdel import grade, lookup_guard
from crf_prime.featdel.deletion import apply_unified_diff
from crf_prime.featdel.models import FeatdelTask
from crf_prime.loopback import LoopbackOpenAI, Reply
from crf_prime.placement import GradingConfig

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


def _taskset(task_dir: Path):
    from feature_deletion.taskset import FeatureDeletionConfig, FeatureDeletionTaskset

    return FeatureDeletionTaskset(FeatureDeletionConfig(id="feature-deletion", tasks=task_dir))


def _trace(task) -> vf.Trace:
    return vf.Trace(
        agent=vf.AgentInfo(config=vf.AgentConfig()),
        task=vf.TraceTask(type="FeatureDeletionTask", data=task.data, key=task.key),
        nodes=[vf.MessageNode(parent=None, message=vf.UserMessage(content=task.data.prompt_text), sampled=False)],
    )


@pytest.fixture(scope="module")
def task_dir() -> Path:
    return generated(INFLECTION, 2)[0]


@pytest.fixture
async def runtime() -> AsyncIterator[vf.Runtime]:
    async with provision_runtime(vf.SubprocessConfig()) as rt:
        yield rt


def test_module_exports_one_taskset_and_the_sandbox_harness() -> None:
    import feature_deletion

    from crf_prime.harness import SandboxHarness

    assert feature_deletion.__all__ == ["FeatureDeletionTaskset", "SandboxHarness"]
    assert feature_deletion.SandboxHarness is SandboxHarness
    assert issubclass(feature_deletion.FeatureDeletionTaskset, vf.Taskset)


def test_taskset_rows(task_dir: Path) -> None:
    tasks = _taskset(task_dir).load()
    assert [t.key for t in tasks] == [
        json.loads(x)["task_id"] for x in (task_dir / "tasks.jsonl").read_text().splitlines()
    ]
    assert [t.data.idx for t in tasks] == list(range(len(tasks)))  # set by load() on every verifiers version
    for t in tasks:
        (venv,) = t.data.sandbox_ro_binds
        assert f"{venv}/bin/python -m pytest" in t.data.prompt_text
        assert t.data.prompt_text.startswith(t.data.featdel.prompt)


async def test_untouched_scores_zero_with_hint_and_gold_scores_one(task_dir: Path, runtime: vf.Runtime) -> None:
    task = _taskset(task_dir).load()[0]
    row: FeatdelTask = task.data.featdel
    trace = _trace(task)
    await task.setup(trace, runtime)
    workdir = Path(runtime.workdir)  # type: ignore[attr-defined]
    assert not any((workdir / rel).exists() for rel in row.hidden_tests)
    assert (workdir / row.targets[0].path).read_text() == row.broken_files[row.targets[0].path]
    await task.score(trace, runtime)
    assert trace.rewards["tests_pass"].score == 0.0
    assert trace.metrics["passed_fraction"] < 1.0
    hint = trace.info["hint"]
    failing = trace.info["featdel_grade"]["failed"]
    assert failing and hint and any(f["name"].split("::")[-1].split("[")[0] in hint for f in failing)

    for rel, text in apply_unified_diff(dict(row.broken_files), row.gold_patch).items():
        await runtime.write(rel, text.encode())
    solved = _trace(task)
    await task.score(solved, runtime)
    assert solved.rewards["tests_pass"].score == 1.0 and solved.metrics["passed_fraction"] == 1.0
    assert solved.info["hint"] == ""


async def test_validate_applies_gold(task_dir: Path, runtime: vf.Runtime) -> None:
    task = _taskset(task_dir).load()[1]
    await task.setup(_trace(task), runtime)
    assert await task.validate(runtime) is True


async def test_infrastructure_failure_raises(task_dir: Path, runtime: vf.Runtime, tmp_path: Path) -> None:
    broken_dir = tmp_path / "tasks"
    shutil.copytree(task_dir, broken_dir)
    task = _taskset(broken_dir).load()[0]
    trace = _trace(task)
    await task.setup(trace, runtime)
    bad_row = task.data.featdel.model_copy(update={"base_sha256": "0" * 64})
    bad = type(task)(task.data.model_copy(update={"featdel": bad_row}), task.config)
    with pytest.raises(Exception, match="SHA-256 mismatch"):
        await bad.score(trace, runtime)
    assert "tests_pass" not in trace.info.get("featdel_grade", {})


def test_vf_validate_cli(task_dir: Path, tmp_path: Path) -> None:
    summary, rows = vf_validate("feature-deletion", tmp_path / "outputs", "--taskset.tasks", str(task_dir), timeout=400)
    assert summary["total"] == 2 and summary["outcomes"]["valid"] == 2
    assert all(r["gold"]["valid"] is True for r in rows)
    if VALIDATE_HAS_NOOP:  # verifiers 0.4.0 also scores the untouched snapshot
        assert all(r["noop"]["reward"] == 0.0 for r in rows)


def _call(name: str, **args: object) -> dict:
    return {"name": name, "arguments": json.dumps(args)}


def _gold_edits(row: FeatdelTask) -> list[dict]:
    """One edit tool call per gold-patch hunk: old = context + removed lines, new = context + added lines."""
    calls, path, old, new = [], "", [], []
    for line in [*row.gold_patch.splitlines(keepends=True), "@@ end\n"]:
        if line.startswith("+++ b/"):
            path = line[6:].strip()
        elif line.startswith("@@") or line.startswith("--- "):
            if old:
                calls.append(_call("edit", path=path, old_str="".join(old), new_str="".join(new)))
            old, new = [], []
        elif line[:1] in (" ", "-", "+"):
            if line[0] in (" ", "-"):
                old.append(line[1:])
            if line[0] in (" ", "+"):
                new.append(line[1:])
    return calls


def test_vf_eval_scripted_agents_gold_scores_one_and_doing_nothing_scores_zero(task_dir: Path, tmp_path: Path) -> None:
    """One vf-eval run of both tasks (``-n 2``; the model replies by task): on the first the scripted agent writes gold
    (1.0, no hint), on the second it submits without a change (0, a hint)."""
    gold_row, idle_row = (t.data.featdel for t in _taskset(task_dir).load())
    gold_replies = [Reply(tool_calls=[c]) for c in _gold_edits(gold_row)]
    gold_replies += [
        Reply(tool_calls=[_call("bash", command="ls")]),
        Reply(content="done", tool_calls=[_call("submit", summary="re-implemented")]),
    ]
    idle_replies = [Reply(content="done", tool_calls=[_call("submit", summary="nothing")])]
    scripts = {row.prompt.split("\n", 1)[0]: list(replies) for row, replies in ((gold_row, gold_replies), (idle_row, idle_replies))}  # fmt: skip
    assert len(scripts) == 2  # each task's first line names its target

    def reply(body: dict) -> Reply:
        (script,) = [s for first_line, s in scripts.items() if first_line in first_user_text(body)]
        return script.pop(0)

    with LoopbackOpenAI(reply) as server:
        out = tmp_path / "outputs"
        found = vf_eval(
            "feature-deletion", server.base_url, out, "--env.taskset.tasks", str(task_dir), timeout=400, examples=2
        )
        requests = list(server.requests)
    traces = traces_by_task(found)
    assert sorted(traces) == sorted([gold_row.task_id, idle_row.task_id])
    for trace in traces.values():
        assert trace["ok"], trace["errors"]
        assert trace["agent"]["config"]["harness"]["id"] == "feature-deletion"  # the taskset's bundled SandboxHarness
    assert all([t["function"]["name"] for t in r["tools"]] == ["bash", "view", "edit", "submit"] for r in requests)
    assert len(requests) == len(gold_replies) + len(idle_replies) and not any(scripts.values())

    gold = traces[gold_row.task_id]
    tools = tool_messages(gold)
    edits = tools[: len(gold_replies) - 2]
    assert len(edits) == len(gold_row.targets) and all(
        t.endswith(f"edited {r.path}") for t, r in zip(edits, gold_row.targets, strict=True)
    )
    assert "inflection" in tools[len(gold_replies) - 2].split()  # `ls` in the box lists the snapshot
    assert gold["rewards"]["tests_pass"]["score"] == 1.0
    assert gold["metrics"]["passed_fraction"] == 1.0
    assert gold["info"]["hint"] == ""

    idle = traces[idle_row.task_id]
    assert idle["rewards"]["tests_pass"]["score"] == 0.0
    assert idle["metrics"]["passed_fraction"] < 1.0
    assert idle["info"]["hint"] != ""


class _RemoteView:
    """A real subprocess runtime seen only through the Runtime API (run/read/write), as a container runtime is."""

    def __init__(self, inner: vf.Runtime) -> None:
        self._inner = inner

    async def run(self, argv, env):
        return await self._inner.run(argv, env)

    async def read(self, path, max_bytes=None):
        return await self._inner.read(path, max_bytes)

    async def write(self, path, data):
        await self._inner.write(path, data)


async def test_grading_through_the_runtime_api(
    task_dir: Path, runtime: vf.Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The container code path: snapshot written, edits read back and tests run via runtime.write/read/run."""
    from feature_deletion.taskset import FeatureDeletionConfig, FeatureDeletionTaskConfig, FeatureDeletionTaskset

    from crf_prime.featdel.testenv import ensure_test_env

    tasks = FeatureDeletionTaskset(FeatureDeletionConfig(id="feature-deletion", tasks=task_dir)).load()
    python = str(ensure_test_env(tasks[0].data.featdel.test_env).python)
    config = FeatureDeletionConfig(
        id="feature-deletion", tasks=task_dir, task=FeatureDeletionTaskConfig(grading=GradingConfig(python=python))
    )
    task = FeatureDeletionTaskset(config).load()[0]
    assert task.config.grade_in == "auto"
    remote = _RemoteView(runtime)
    trace = _trace(task)
    await task.setup(trace, remote)  # type: ignore[arg-type]
    row = task.data.featdel
    workdir = Path(runtime.workdir)  # type: ignore[attr-defined]
    assert (workdir / row.targets[0].path).read_text() == row.broken_files[row.targets[0].path]
    await task.score(trace, remote)  # type: ignore[arg-type]
    assert trace.rewards["tests_pass"].score == 0.0 and trace.info["hint"]
    # a forging conftest.py and an edited hidden test in the runtime do not count either
    (workdir / "conftest.py").write_text(
        "import pytest\n\ndef pytest_collection_modifyitems(items):\n    items.clear()\n"
    )
    assert await task.validate(remote) is True  # type: ignore[arg-type]
    solved = _trace(task)
    await task.score(solved, remote)  # type: ignore[arg-type]
    assert solved.rewards["tests_pass"].score == 1.0 and solved.info["featdel_grade"]["exit_code"] == 0
    assert solved.info["featdel_grade"]["replay_calls"] > 0  # the replay verdict ran on this host
    assert solved.info["featdel_grade"]["changed_files"] == list(row.broken_files)
    assert not list(Path("/tmp").glob("crf-featdel-grade-*/junit.xml"))  # the grading directory was removed
    # the grader's pytest plugin runs in the runtime too: the project's code cannot open a test module there (the
    # replay box has no tests: a missing file is fine; the guard's PermissionError is not)
    target = workdir / row.targets[0].path
    gold = target.read_text()
    peek = f"\n\ntry:\n    with open({row.hidden_tests[0]!r}) as _fh:\n        _fh.read()\nexcept FileNotFoundError:\n    pass\n"
    # and the lookup guard (switched on here): a computed lookup of a function's globals gets the default there (the
    # module imports); without the guard (and so with the scan's static rule) it does not count
    probe = (
        "\n\ndef _crf_probe():\n    pass\n\n\n"
        'if getattr(_crf_probe, "__glo" + "bals__", None) is not None:\n    raise ImportError("no lookup guard")\n'
    )
    for code, (module, setting), scores in (
        (peek, (grade, "GUARD_TEST_FILES"), ((True, 0.0), (False, 1.0))),
        (probe, (lookup_guard, "ENABLED"), ((True, 1.0), (False, 0.0))),
    ):
        target.write_text(gold + code)
        for on, score in scores:
            monkeypatch.setattr(module, setting, on)
            attempt = _trace(task)
            await task.score(attempt, remote)  # type: ignore[arg-type]
            assert attempt.rewards["tests_pass"].score == score
    target.write_text(gold)
