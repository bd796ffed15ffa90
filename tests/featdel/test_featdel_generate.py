"""Generator end to end on real pinned PyPI packages and on local projects, in the bubblewrap sandbox."""

from __future__ import annotations

import json
import os
import shutil
import stat
import textwrap
from pathlib import Path

import pytest
from featdel_support import (
    INFLECTION,
    TOOLZ,
    agent_tree,
    cold_suite_cache,
    generated,
    generated_in_private_tmp,
)

from crf_prime.cli import main
from crf_prime.featdel import baseline, lookup_guard, suite_cache
from crf_prime.featdel.generate import DEFAULT_SOURCE, GenerateConfig, generate, load_tasks, validate_task
from crf_prime.featdel.grader import grade_tree
from crf_prime.featdel.source import SourceError
from crf_prime.featdel.testenv import ensure_test_env
from crf_prime.placement import GradingSandbox
from crf_prime.sandbox import Sandbox

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


@pytest.mark.parametrize("source", [TOOLZ, INFLECTION])
def test_real_package_gold_passes_deleted_fails(source: str, tmp_path: Path) -> None:
    task_dir, tasks, summary = generated(source, 2)
    assert summary.valid == len(tasks) == 2
    assert summary.suite_tests > 100 and summary.candidates >= 3
    assert summary.checked == summary.valid + sum(summary.rejected.values())
    assert [t.task_id for t in load_tasks(task_dir)] == [t.task_id for t in tasks]
    for task in tasks:
        assert task.target_tests and task.hidden_tests and task.gold_patch.startswith("--- a/")
        assert "NotImplementedError" in task.prompt and task.targets[0].qualname.rsplit(".", 1)[-1] in task.prompt
        tree = agent_tree(task, task_dir, tmp_path / task.task_id)
        deleted = grade_tree(task, task_dir, tree)
        assert deleted.score == 0.0 and deleted.failed
        for rel, text in task.broken_files.items():
            assert "raise NotImplementedError" in (tree / rel).read_text() == text
        from crf_prime.featdel.deletion import apply_unified_diff

        for rel, text in apply_unified_diff(dict(task.broken_files), task.gold_patch).items():
            (tree / rel).write_text(text)
        gold = grade_tree(task, task_dir, tree)
        assert gold.score == 1.0 and set(gold.passed) == set(task.target_tests)


def test_deterministic_for_a_seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the shared set ran from an empty suite cache (the coverage baseline ran once); again with the entries that run
    # stored (it does not run), with another worker count: the same rows in the same order, the same base archive
    a, _, _ = generated(INFLECTION, 2, seed=0)
    suites, baseline_runs = cold_suite_cache(INFLECTION, 2, seed=0)
    assert baseline_runs == 1
    shutil.copytree(suites, tmp_path / "suites")
    monkeypatch.setattr(suite_cache, "cache_dir", lambda: tmp_path / "suites")
    runs: list[bool] = []
    real = baseline.run_pytest
    monkeypatch.setattr(baseline, "run_pytest", lambda *a, **k: runs.append(True) or real(*a, **k))
    warm_dir = tmp_path / "warm"
    generate(GenerateConfig(source=INFLECTION, out=warm_dir, max_tasks=2, seed=0, workers=1))
    assert runs == []
    assert (warm_dir / "tasks.jsonl").read_bytes() == (a / "tasks.jsonl").read_bytes()
    assert (a / "bases").exists() and sorted(p.name for p in (a / "bases").iterdir()) == ["inflection-0.5.1.tar.gz"]
    assert (a / "bases" / "inflection-0.5.1.tar.gz").read_bytes() == (
        warm_dir / "bases" / "inflection-0.5.1.tar.gz"
    ).read_bytes()
    # seed 7's set is generated once per run and shared with test_featdel_cleanup, which checks its temporary trees
    c_dir = generated_in_private_tmp(INFLECTION, 2, seed=7)[0]
    ids = lambda d: [json.loads(line)["task_id"] for line in (d / "tasks.jsonl").read_text().splitlines()]  # noqa: E731
    assert ids(c_dir) != ids(a)


def _project(root: Path, test_body: str, extra: dict[str, str] | None = None) -> Path:
    files = {
        "pyproject.toml": '[project]\nname = "minilib"\nversion = "0.1"\n\n[tool.pytest.ini_options]\naddopts = "-q"\n',
        "minilib/__init__.py": textwrap.dedent(
            '''\
            """A tiny library."""


            def slugify(text: str, sep: str = "-") -> str:
                """Lower-case words of ``text`` joined by ``sep``."""
                words = [w for w in text.lower().split() if w]
                return sep.join(words)


            def clamp(x: float, lo: float, hi: float) -> float:
                """Limit ``x`` to [lo, hi]."""
                if x < lo:
                    return lo
                return min(x, hi)


            class Stack:
                """LIFO."""

                def __init__(self):
                    self.items = []

                def push(self, x):
                    """Add on top."""
                    self.items.append(x)
                    return len(self.items)

                def pop(self):
                    """Remove the top."""
                    item = self.items[-1]
                    del self.items[-1]
                    return item
            '''
        ),
        "tests/test_minilib.py": test_body,
        **(extra or {}),
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


GOOD_TESTS = textwrap.dedent(
    """\
    from minilib import Stack, clamp, slugify


    def test_slugify():
        assert slugify("Hello  World") == "hello-world"


    def test_clamp():
        assert clamp(5, 0, 3) == 3 and clamp(-1, 0, 3) == 0


    def test_clamp_tolerant():
        try:
            clamp(1, 0, 2)
        except Exception:
            pass


    def test_stack():
        s = Stack()
        assert s.push(1) == 1 and s.push(2) == 2
        assert s.pop() == 2
    """
)


def test_local_project_with_features_and_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _project(tmp_path / "minilib", GOOD_TESTS, {"minilib/__pycache__/x.pyc": "junk", ".git/HEAD": "x"})
    out = tmp_path / "out"
    rc = main(["featdel", "generate", "--source", str(src), "--out", str(out), "--max-tasks", "10", "--seed", "1"])
    assert rc == 0
    tasks = load_tasks(out)
    summary = json.loads((out / "summary.json").read_text())
    ids = sorted(t.task_id for t in tasks)
    assert ids == sorted(
        [
            "minilib-local__minilib.slugify",
            "minilib-local__minilib.clamp",
            "minilib-local__minilib.Stack.push",
            "minilib-local__minilib.Stack.pop",
            "minilib-local__feature__minilib.Stack",
        ]
    )
    feature = next(t for t in tasks if t.granularity == "feature")
    assert [t.qualname for t in feature.targets] == ["Stack.push", "Stack.pop"]
    assert summary["filtered"] == {}
    assert summary["pytest_config"] == "pyproject.toml [tool.pytest.ini_options]" and summary["pytest_args"] == []
    assert summary["valid"] == 5
    captured = capsys.readouterr()
    assert "Feature Deletion: minilib local" in captured.out
    # not a terminal: progress arrives as plain lines while the run goes, ending with every task validated
    prefix = "crf-prime featdel generate: "
    lines = [line.removeprefix(prefix) for line in captured.err.splitlines() if line.startswith(prefix)]
    assert lines[:6] == [
        "setting up the suite 0/1",
        "setting up the suite 1/1",
        "fetching source 0/1",
        "test venv 0/1",
        "suite + coverage 0/1",
        "validating tasks 0/10",
    ]
    assert lines[-1] == "validating tasks 5/10"
    # written with the umask's modes (0755 / 0644 under 022), not mkdtemp's 0700
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~umask
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.rglob("*") if p.is_file()} == {0o666 & ~umask}
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.rglob("*") if p.is_dir()} == {0o777 & ~umask}
    assert main(["featdel", "validate", "--task-dir", str(out)]) == 0
    # tamper with a row: validation must now fail and exit non-zero
    rows = (out / "tasks.jsonl").read_text().splitlines()
    bad = json.loads(rows[0])
    bad["gold_patch"] = ""
    (out / "tasks.jsonl").write_text("\n".join([json.dumps(bad), *rows[1:]]) + "\n")
    assert main(["featdel", "validate", "--task-dir", str(out)]) == 1
    (out / "tasks.jsonl").write_text("{not json\n")
    assert main(["featdel", "validate", "--task-dir", str(out)]) == 2
    assert "tasks.jsonl:1: invalid task row" in capsys.readouterr().err


def test_coverage_is_not_proof(tmp_path: Path) -> None:
    """clamp is covered by a test that swallows exceptions only: that test must not become its target alone."""
    tests = GOOD_TESTS.replace("def test_clamp():\n    assert clamp(5, 0, 3) == 3 and clamp(-1, 0, 3) == 0\n", "")
    src = _project(tmp_path / "minilib", tests)
    tasks, summary = generate(GenerateConfig(source=str(src), out=tmp_path / "out", max_tasks=10))
    assert "minilib-local__minilib.clamp" not in {t.task_id for t in tasks}
    assert any(
        r.candidate == "minilib-local__minilib.clamp" and r.reason == "deleted-passes" for r in summary.rejections
    )
    assert summary.rejected == {"deleted-passes": 1}


def test_gold_violating_the_code_policy_is_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """slugify's original body uses eval: an agent writing it back would be scored as a hack, so no task. push
    looks its method up by a computed name, judged when it runs with the lookup guard on: a task, gold passes."""
    monkeypatch.setattr(lookup_guard, "ENABLED", True)
    src = _project(tmp_path / "minilib", GOOD_TESTS)
    init = src / "minilib" / "__init__.py"
    line = "    words = [w for w in text.lower().split() if w]\n"
    text = init.read_text().replace(line, '    words = eval("[w for w in t.lower().split() if w]", {"t": text})\n')
    init.write_text(text.replace("self.items.append(x)", 'getattr(self.items, "app" + "end")(x)'))
    tasks, summary = generate(GenerateConfig(source=str(src), out=tmp_path / "out", max_tasks=10))
    assert "minilib-local__minilib.slugify" not in {t.task_id for t in tasks}
    assert "minilib-local__minilib.Stack.push" in {t.task_id for t in tasks}  # validated: gold scored 1.0
    [rej] = [r for r in summary.rejections if r.reason == "gold-violates-policy"]
    assert rej.candidate == "minilib-local__minilib.slugify"
    assert rej.detail.startswith("minilib/__init__.py:") and "forbidden name 'eval'" in rej.detail
    assert summary.rejected == {"gold-violates-policy": 1}


TWINS = {
    "twins/__init__.py": '''
        def first_positive(values):
            """The first value above zero (None without one)."""
            for value in values:
                if value > 0:
                    return value
            return None


        def first_above_zero(numbers):
            """first_positive under other names: the corpus keeps one of the two (a near duplicate)."""
            for n in numbers:
                if n > 0:
                    return n
            return None


        def last_negative(values):
            """The last value below zero (None without one)."""
            found = None
            for value in values:
                if value < 0:
                    found = value
            return found
        ''',
    "tests/test_twins.py": """
        from twins import first_above_zero, first_positive, last_negative


        def test_first_positive():
            assert first_positive([-1, 0, 4, 5]) == 4 and first_positive([-2]) is None


        def test_first_above_zero():
            assert first_above_zero([0, 7, 1]) == 7 and first_above_zero([]) is None


        def test_last_negative():
            assert last_negative([-1, 2, -3, 4]) == -3 and last_negative([1]) is None
        """,
}


def test_a_copy_of_a_validated_task_s_code_is_not_validated_again(tmp_path: Path) -> None:
    """first_above_zero is first_positive under other names (the corpus's near-duplicate key): both are in the first
    batch, so the second waits for the next batch, where the first is validated and the copy is rejected as a
    duplicate without being recorded, graded or verified. last_negative, after them, is checked as ever."""
    root = tmp_path / "twins"
    for rel, text in TWINS.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text).lstrip())
    cfg = GenerateConfig(source=str(root), out=tmp_path / "out", max_tasks=10, granularities=["function"])
    tasks, summary = generate(cfg)
    ids = sorted(t.task_id.rsplit(".", 1)[-1] for t in tasks)
    assert len(ids) == 2 and "last_negative" in ids and summary.rejected == {"duplicate": 1}
    [rej] = summary.rejections
    kept = next(i for i in ids if i != "last_negative")
    assert {rej.candidate.rsplit(".", 1)[-1], kept} == {"first_positive", "first_above_zero"}
    assert rej.detail == f"the code of twins-local__twins.{kept}" and summary.checked == 3


def test_suite_failing_as_shipped_is_a_clear_error(tmp_path: Path) -> None:
    src = _project(tmp_path / "minilib", GOOD_TESTS + "\n\ndef test_broken():\n    assert slugify('A') == 'b'\n")
    with pytest.raises(
        SourceError, match=r"(?s)does not pass as shipped.*\n  tests/test_minilib\.py::test_broken: failed.*--deselect"
    ):
        generate(GenerateConfig(source=str(src), out=tmp_path / "out"))
    assert not (tmp_path / "out").exists()  # nothing half-written
    tasks, _ = generate(
        GenerateConfig(
            source=str(src), out=tmp_path / "out", deselect=["tests/test_minilib.py::test_broken"], max_tasks=1
        )
    )
    assert len(tasks) == 1 and "--deselect" in tasks[0].pytest_args
    task = tasks[0]
    env = ensure_test_env(task.test_env)
    assert validate_task(task, tmp_path / "out", sandbox=Sandbox(GradingSandbox()), env=env) is None


def test_the_command_sets_the_suite_up_as_a_corpus_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``featdel generate`` runs the setup loop first: a test failing as shipped is deselected and the table says
    so, where the library call above refuses; ``--no-auto-setup`` refuses as the library does, writing nothing."""
    src = _project(tmp_path / "minilib", GOOD_TESTS + "\n\ndef test_broken():\n    assert slugify('A') == 'b'\n")
    out = tmp_path / "out"
    argv = ["featdel", "generate", "--source", str(src), "--out", str(out), "--max-tasks", "1"]
    assert main([*argv, "--no-auto-setup"]) != 0
    assert "does not pass as shipped" in capsys.readouterr().err and not out.exists()
    assert main(argv) == 0
    assert "deselected 1 of " in " ".join(capsys.readouterr().out.split())
    [task] = load_tasks(out)
    assert "tests/test_minilib.py::test_broken" in task.pytest_args


def test_bad_sources_fail_clearly(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="pypi:NAME==VERSION"):
        generate(GenerateConfig(source="pypi:toolz", out=tmp_path / "o"))
    with pytest.raises(SourceError, match="not a directory"):
        generate(GenerateConfig(source=str(tmp_path / "missing"), out=tmp_path / "o"))
    assert DEFAULT_SOURCE == TOOLZ


@pytest.mark.parametrize("value", ["0", "-1"])
def test_max_tasks_out_of_range_is_bad_input_before_any_work(tmp_path: Path, capsys, value: str) -> None:
    out = tmp_path / "out"
    assert (
        main(["featdel", "generate", "--source", str(tmp_path / "none"), "--out", str(out), "--max-tasks", value]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("crf-prime featdel generate: error: ") and "--max-tasks" in err
    assert sorted(tmp_path.iterdir()) == []


def test_out_of_the_wrong_kind_is_bad_input(tmp_path: Path, capsys) -> None:
    src = _project(tmp_path / "minilib", GOOD_TESTS)
    file = tmp_path / "file"
    file.write_text("x")
    assert main(["featdel", "generate", "--source", str(src), "--out", str(file)]) == 2
    assert capsys.readouterr().err == (
        f"crf-prime featdel generate: error: out: {file} is a file; this output is a directory\n"
    )
    other = tmp_path / "other"
    (other / "keep").mkdir(parents=True)
    assert main(["featdel", "generate", "--source", str(src), "--out", str(other)]) == 2
    assert "out: " in capsys.readouterr().err and (other / "keep").is_dir()
    assert main(["featdel", "validate", "--task-dir", str(file)]) == 2
    assert capsys.readouterr().err == (
        f"crf-prime featdel validate: error: task_dir: {file} is a file; give a directory written by featdel generate\n"
    )
    assert file.read_text() == "x"


def test_a_failed_run_leaves_no_staging_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import crf_prime.featdel.generate as gen

    def broken(*args, **kwargs):
        raise RuntimeError("sandbox broke")

    monkeypatch.setattr(gen, "validate_task", broken)
    src = _project(tmp_path / "src" / "minilib", GOOD_TESTS)
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(RuntimeError, match="sandbox broke"):
        generate(GenerateConfig(source=str(src), out=work / "out", max_tasks=1))
    assert sorted(p.name for p in work.iterdir()) == []


def test_first_failure_stops_the_run_and_scores_the_same(tmp_path: Path) -> None:
    """Validation and mutation testing only ask whether every target test passes: ``first_failure`` stops the
    deleted tree's run at its first failure (the tests not run read as failed) and the verdict is the same."""
    from crf_prime.featdel.grader import Grader

    task_dir, tasks, _ = generated(TOOLZ, 2)
    task = max(tasks, key=lambda t: len(t.target_tests))
    assert len(task.target_tests) >= 2
    grader = Grader(task, task_dir)
    whole = grader.score_run(grader.run_tests({}), {})
    first = grader.score_run(run := grader.run_tests({}, first_failure=True), {})
    assert whole.score == first.score == 0.0 and len(first.failed) == len(task.target_tests) - len(first.passed)
    statuses = [run.status_of(t)[0] for t in task.target_tests]
    assert statuses.count("failed") + statuses.count("error") == 1
    assert statuses.count("missing") == len(task.target_tests) - len(first.passed) - 1
