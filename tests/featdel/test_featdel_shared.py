"""Gold's verdict from one shared run of the union of the target tests on the original tree: as strict as one run
per task (a target test failing on the original is never accepted), and a task whose gold does not rebuild the
original byte for byte is graded by its own run. Real sandbox, real pytest, a tiny local project. Also: junit keys
reported back as the node ids ``--deselect`` takes."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from featdel_support import generated_once

import crf_prime.featdel.generate as gen
import crf_prime.featdel.shared as shared
from crf_prime.featdel.deletion import apply_unified_diff, unified_diff
from crf_prime.featdel.generate import GenerateConfig, generate, load_tasks, validate_batch
from crf_prime.featdel.runner import node_id
from crf_prime.featdel.testenv import ensure_test_env
from crf_prime.placement import GradingSandbox
from crf_prime.sandbox import Sandbox

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

LIB = '''\
"""A tiny library."""


def slugify(text, sep="-"):
    """Lower-case words of ``text`` joined by ``sep``."""
    words = [w for w in text.lower().split() if w]
    return sep.join(words)


def clamp(x, lo, hi):
    """Limit ``x`` to [lo, hi]."""
    if x < lo:
        return lo
    return min(x, hi)


def total(values):
    """Sum of the positive values."""
    out = 0
    for v in values:
        if v > 0:
            out += v
    return out
'''

TESTS = '''\
from minishare import clamp, slugify, total


def test_slugify():
    assert slugify("Hello  World") == "hello-world"


def test_clamp():
    assert clamp(5, 0, 3) == 3 and clamp(-1, 0, 3) == 0


def test_total():
    assert total([1, -2, 3]) == 4


def test_writes_into_its_tree():
    """Passes where the tree is writable (the suite's baseline run), fails in the read-only grading tree."""
    with open("scratch.txt", "w") as fh:
        fh.write("x")
'''


@pytest.fixture(scope="module")
def generated():
    def generate_into(out: Path) -> None:
        root = out.parents[1] / "src-minishare"  # in the run directory, outside generated/ (hidden from the box)
        files = {
            "pyproject.toml": '[project]\nname = "minishare"\nversion = "0.1"\n',
            "minishare/__init__.py": LIB,
            "tests/test_minishare.py": TESTS,
        }
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        generate(
            GenerateConfig(source=str(root), out=out, max_tasks=3, workers=1, granularities=["function"], replay=False)
        )

    out = generated_once("minishare", generate_into)  # one generation for both xdist workers
    tasks = load_tasks(out)
    assert sorted(t.targets[0].qualname for t in tasks) == ["clamp", "slugify", "total"]
    return out, {t.targets[0].qualname: t for t in tasks}


class Spy:
    """Counts the shared union runs and the tasks' own gold runs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.union: list[tuple[str, ...]] = []
        self.own_gold: list[str] = []
        real_run, real_grade = shared.grading_run, gen.grade_changes

        def run(task, *args, **kwargs):
            self.union.append(task.target_tests)
            return real_run(task, *args, **kwargs)

        def grade(task, task_dir, changes, **kwargs):
            if changes:  # the deleted grade passes no changes; gold passes its files
                self.own_gold.append(task.task_id)
            return real_grade(task, task_dir, changes, **kwargs)

        monkeypatch.setattr(shared, "grading_run", run)
        monkeypatch.setattr(gen, "grade_changes", grade)


def _batch(tasks, out: Path) -> dict:
    env = ensure_test_env(tasks[0].test_env)
    with ThreadPoolExecutor(max_workers=2) as pool:
        return validate_batch(tasks, out, sandbox=Sandbox(GradingSandbox()), env=env, pool=pool)


def test_a_target_test_failing_on_the_original_is_never_accepted(generated, monkeypatch: pytest.MonkeyPatch) -> None:
    out, by = generated
    bad = by["slugify"].model_copy(
        update={
            "task_id": by["slugify"].task_id + "-bad",
            "target_tests": (*by["slugify"].target_tests, "tests/test_minishare.py::test_writes_into_its_tree"),
        }
    )
    spy = Spy(monkeypatch)
    verdicts = _batch([by["clamp"], bad, by["total"]], out)
    assert len(spy.union) == 1 and spy.own_gold == []  # one shared gold run decided all three
    assert set(spy.union[0]) == {*by["clamp"].target_tests, *bad.target_tests, *by["total"].target_tests}
    assert verdicts[by["clamp"].task_id] is None and verdicts[by["total"].task_id] is None
    rejection = verdicts[bad.task_id]
    assert rejection is not None and rejection.reason == "original-fails"
    assert "test_writes_into_its_tree" in rejection.detail


def test_a_gold_that_differs_from_the_original_is_graded_by_its_own_run(
    generated, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, by = generated
    task = by["total"]
    path = task.targets[0].path
    gold = apply_unified_diff(dict(task.broken_files), task.gold_patch)
    assert shared.original_gold(task, out) == gold
    changed = gold[path] + "# a comment the original does not have\n"
    other = task.model_copy(
        update={"task_id": task.task_id + "-other", "gold_patch": unified_diff(path, task.broken_files[path], changed)}
    )
    assert shared.original_gold(other, out) is None
    spy = Spy(monkeypatch)
    verdicts = _batch([by["clamp"], other, by["slugify"]], out)
    assert spy.own_gold == [other.task_id]  # its own gold run, on its own reconstructed tree
    assert len(spy.union) == 1 and set(spy.union[0]) == {*by["clamp"].target_tests, *by["slugify"].target_tests}
    assert verdicts == {by["clamp"].task_id: None, other.task_id: None, by["slugify"].task_id: None}


def test_shared_results_match_one_run_per_task(generated) -> None:
    out, by = generated
    tasks = list(by.values())
    env = ensure_test_env(tasks[0].test_env)
    box = Sandbox(GradingSandbox())
    together = shared.shared_gold(tasks, out, sandbox=box, env=env)
    for t in tasks:
        alone = gen.grade_changes(t, out, shared.original_gold(t, out), sandbox=box, env=env)
        assert (
            (together[t.task_id].score, together[t.task_id].passed)
            == (alone.score, alone.passed)
            == (
                1.0,
                t.target_tests,
            )
        )


def test_junit_keys_are_reported_as_node_ids(tmp_path: Path) -> None:
    for rel in ("tests/test_a.py", "pkg/tests/test_b.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert node_id(tmp_path, ("tests.test_a", "test_x[1.5-a]")) == "tests/test_a.py::test_x[1.5-a]"
    assert node_id(tmp_path, ("pkg.tests.test_b.TestC", "test_y")) == "pkg/tests/test_b.py::TestC::test_y"
    assert node_id(tmp_path, ("", "tests.test_a")) == "tests/test_a.py"  # a collection error
    assert node_id(tmp_path, ("gone.module", "test_z")) == "gone.module::test_z"  # no such file: as reported
