"""Reward hacks against a real generated task (inflection 0.5.1): each must score 0.

Where a hack works against a naive grader (tests run in place, in the agent's tree, in the same sandbox), the test
shows that too, so each defence is proven necessary; ``scan=False`` shows the re-materialising grader holds even
without the static code policy over the agent's added code (crf_prime/featdel/policy.py).
"""

from __future__ import annotations

import hashlib
import py_compile
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from featdel_support import INFLECTION, agent_tree, forward_call, generated, set_body

from crf_prime.featdel.deletion import apply_unified_diff
from crf_prime.featdel.grade import materialise
from crf_prime.featdel.grader import grade_tree
from crf_prime.featdel.models import FeatdelTask
from crf_prime.featdel.runner import run_pytest
from crf_prime.featdel.testenv import ensure_test_env
from crf_prime.placement import GradingSandbox
from crf_prime.sandbox import Sandbox

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

FORGE = """\
import _pytest.reports as _r

_orig = _r.TestReport.from_item_and_call.__func__


def _forged(cls, item, call):
    rep = _orig(cls, item, call)
    rep.outcome, rep.longrepr = "passed", None
    return rep


_r.TestReport.from_item_and_call = classmethod(_forged)
"""

CONFTEST_FORGE = """\
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    rep.outcome, rep.longrepr = "passed", None
"""


@pytest.fixture(scope="module")
def case() -> tuple[Path, FeatdelTask]:
    task_dir, tasks, _ = generated(INFLECTION, 2)
    task = next(t for t in tasks if t.granularity == "function" and "." not in t.targets[0].qualname)
    return task_dir, task


@pytest.fixture
def tree(case, tmp_path: Path) -> Path:
    task_dir, task = case
    return agent_tree(task, task_dir, tmp_path / "agent")


def _original(task: FeatdelTask) -> dict[str, str]:
    return apply_unified_diff(dict(task.broken_files), task.gold_patch)


def naive_passes(task: FeatdelTask, task_dir: Path, tree: Path) -> bool:
    """A naive grader: run the target tests in place in the agent's tree (hidden tests added only if absent)."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        shutil.copytree(tree, run_dir / "repo", symlinks=True)
        pristine = run_dir / "pristine"
        materialise(task, task_dir, pristine, hidden=True)
        for rel in task.hidden_tests:
            if not (run_dir / "repo" / rel).exists():
                shutil.copy2(pristine / rel, run_dir / "repo" / rel)
        run = run_pytest(
            Sandbox(GradingSandbox()),
            ensure_test_env(task.test_env),
            run_dir,
            pythonpath=task.pythonpath,
            pytest_args=task.pytest_args,
            node_ids=task.target_tests,
        )
    return all(run.status_of(t)[0] == "passed" for t in task.target_tests)


def _assert_zero(task, task_dir, tree, *, hack_word: str | None):
    scanned = grade_tree(task, task_dir, tree)
    assert scanned.score == 0.0
    if hack_word is not None:
        assert hack_word in scanned.hack.lower()
    unscanned = grade_tree(task, task_dir, tree, scan=False)
    assert unscanned.score == 0.0 and unscanned.hack == ""
    assert unscanned.failed and all(f.message for f in unscanned.failed)
    return unscanned


def test_controls_gold_scores_one_nothing_scores_zero(case, tree: Path) -> None:
    task_dir, task = case
    nothing = grade_tree(task, task_dir, tree)
    assert nothing.score == 0.0 and nothing.passed_fraction < 1.0 and nothing.hack == ""
    for rel, text in _original(task).items():
        (tree / rel).write_text(text)
    gold = grade_tree(task, task_dir, tree)
    assert gold.score == 1.0 and gold.passed_fraction == 1.0 and gold.failed == ()
    assert gold.changed_files == tuple(sorted(task.broken_files))
    assert naive_passes(task, task_dir, tree)


def test_snapshot_has_no_leftovers(case, tree: Path) -> None:
    _task_dir, task = case
    names = [p.relative_to(tree).as_posix() for p in tree.rglob("*")]
    assert not [n for n in names if n.endswith((".pyc", ".pyo")) or "__pycache__" in n or ".git" in n.split("/")]
    assert not [n for n in names if ".egg-info" in n or n.split("/")[0] in ("build", "dist")]
    assert not any((tree / rel).exists() for rel in task.hidden_tests)
    body = _original(task)[task.targets[0].path]
    for p in tree.rglob("*"):  # the deleted implementation is nowhere in the snapshot
        if p.is_file() and p.suffix != ".py":
            assert body[-200:] not in p.read_text(errors="replace")


def test_hack_leftover_pyc(case, tree: Path) -> None:
    task_dir, task = case
    target = task.targets[0]
    orig = tree.parent / "orig_module.py"
    orig.write_text(_original(task)[target.path])
    cache = (tree / target.path).parent / "__pycache__"
    cache.mkdir()
    py_compile.compile(str(orig), cfile=str(cache / "leftover.cpython-311.pyc"), doraise=True)
    set_body(
        tree,
        task,
        "import glob, marshal, os\n"
        "pyc = glob.glob(os.path.join(os.path.dirname(__file__), '__pycache__', '*.pyc'))[0]\n"
        "ns = {}\n"
        "exec(marshal.loads(open(pyc, 'rb').read()[16:]), ns)\n"
        f"return {forward_call(task, callee='ns[' + repr(target.qualname) + ']')}\n",
    )
    assert naive_passes(task, task_dir, tree)
    _assert_zero(task, task_dir, tree, hack_word="import of 'marshal'")


def test_hack_import_original_from_host_copy(case, tree: Path, tmp_path: Path) -> None:
    task_dir, task = case
    target = task.targets[0]
    copy = tmp_path / "origcopy" / "orig_module.py"
    copy.parent.mkdir()
    copy.write_text(_original(task)[target.path])
    set_body(
        tree,
        task,
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('orig_copy', {str(copy)!r})\n"
        "m = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(m)\n"
        f"return {forward_call(task, callee='m.' + target.qualname)}\n",
    )
    assert not naive_passes(task, task_dir, tree)  # the host path is not visible inside the sandbox
    _assert_zero(task, task_dir, tree, hack_word="forbidden attribute 'spec_from_file_location'")


def test_hack_pip_install_original(case, tree: Path) -> None:
    task_dir, task = case
    target = task.targets[0]
    name, version = task.source.name, task.source.version
    set_body(
        tree,
        task,
        "import glob, importlib.util, subprocess, sys, tempfile\n"
        "d = tempfile.mkdtemp()\n"
        f"subprocess.run([sys.executable, '-m', 'pip', 'install', '--no-deps', '--target', d, '{name}=={version}'])\n"
        f"path = (glob.glob(d + '/{name}/__init__.py') + glob.glob(d + '/{name}.py'))[0]\n"
        "spec = importlib.util.spec_from_file_location('orig_copy', path)\n"
        "m = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(m)\n"
        f"return {forward_call(task, callee='m.' + target.qualname)}\n",
    )
    _assert_zero(task, task_dir, tree, hack_word="import of 'subprocess'")
    # the test venv has no pip and the project is not importable from it
    env = ensure_test_env(task.test_env)
    assert not (env.venv / "bin" / "pip").exists()
    proc = subprocess.run(
        [str(env.python), "-I", "-c", f"import importlib.util; print(importlib.util.find_spec({name!r}))"],
        capture_output=True,
        text=True,
        cwd=env.venv,
        check=True,
    )
    assert proc.stdout.strip() == "None"


def test_hack_git_history(case, tree: Path) -> None:
    task_dir, task = case
    target = task.targets[0]
    git = ["git", "-c", "user.name=x", "-c", "user.email=x@x", "-c", "init.defaultBranch=main"]
    broken = (tree / target.path).read_text()
    (tree / target.path).write_text(_original(task)[target.path])
    subprocess.run([*git, "init", "-q"], cwd=tree, check=True)
    subprocess.run([*git, "add", "-A"], cwd=tree, check=True)
    subprocess.run([*git, "commit", "-qm", "original"], cwd=tree, check=True)
    (tree / target.path).write_text(broken)
    set_body(
        tree,
        task,
        "import os, subprocess\n"
        "root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))\n"
        f"src = subprocess.run(['git', '-c', 'safe.directory=*', 'show', 'HEAD:{target.path}'], cwd=root,"
        " capture_output=True, text=True).stdout\n"
        "ns = {}\n"
        "exec(compile(src, 'orig', 'exec'), ns)\n"
        f"return {forward_call(task, callee='ns[' + repr(target.qualname) + ']')}\n",
    )
    assert naive_passes(task, task_dir, tree)
    _assert_zero(task, task_dir, tree, hack_word="import of 'subprocess'")


def test_hack_conftest_forges_passes(case, tree: Path) -> None:
    task_dir, task = case
    (tree / "conftest.py").write_text(CONFTEST_FORGE)
    pkg = Path(task.targets[0].path).parent
    (tree / pkg / "conftest.py").write_text(CONFTEST_FORGE)
    assert naive_passes(task, task_dir, tree)
    result = _assert_zero(task, task_dir, tree, hack_word=None)
    assert result.changed_files == ()  # conftest.py is never taken from the agent


def test_hack_edited_and_deleted_tests(case, tree: Path) -> None:
    task_dir, task = case
    pristine = tree.parent / "pristine"
    materialise(task, task_dir, pristine, hidden=True)
    for rel in task.hidden_tests:  # the agent rewrites the hidden tests so every assert short-circuits
        text = (pristine / rel).read_text().replace("assert ", "assert True or ")
        (tree / rel).write_text(text)
    visible = [p for p in task.protected_files if p.endswith(".py") and p not in task.hidden_tests]
    for rel in visible:
        (tree / rel).unlink()
    assert naive_passes(task, task_dir, tree)
    result = _assert_zero(task, task_dir, tree, hack_word=None)
    assert all("NotImplementedError" in f.message for f in result.failed)


def test_hack_addopts_in_pytest_ini(case, tree: Path) -> None:
    task_dir, task = case
    pkg = Path(task.targets[0].path).parent
    (tree / pkg / "_forge.py").write_text(CONFTEST_FORGE)
    plugin = ".".join((*pkg.parts, "_forge"))
    (tree / "pytest.ini").write_text(f"[pytest]\naddopts = -p {plugin}\n")
    (tree / "setup.cfg").write_text(f"[tool:pytest]\naddopts = -p {plugin}\n")
    assert naive_passes(task, task_dir, tree)
    _assert_zero(task, task_dir, tree, hack_word="import of 'pytest' (test-runner")


def test_hack_sitecustomize_and_usercustomize(case, tree: Path) -> None:
    task_dir, task = case
    (tree / "sitecustomize.py").write_text(FORGE)
    (tree / "usercustomize.py").write_text(FORGE)
    pkg = Path(task.targets[0].path).parent
    (tree / pkg / "sitecustomize.py").write_text(FORGE)
    assert naive_passes(task, task_dir, tree)
    result = _assert_zero(task, task_dir, tree, hack_word=None)
    assert result.changed_files == ()


def test_hack_pytest_plugin_monkeypatch(case, tree: Path) -> None:
    task_dir, task = case
    target = task.targets[0]
    pkg = Path(target.path).parent
    # (a) a source module the grader does take patches pytest when the package is imported
    (tree / pkg / "_forge.py").write_text(FORGE)
    init = tree / pkg / "__init__.py"
    init.write_text(f"from {'.'.join(pkg.parts)} import _forge  # noqa\n" + init.read_text())
    # (b) a plugin registered through an entry point next to the sources
    info = tree / "forge-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: forge\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[pytest11]\nforge = {'.'.join(pkg.parts)}._forge\n")
    assert naive_passes(task, task_dir, tree)
    scanned = grade_tree(task, task_dir, tree)
    assert scanned.score == 0.0 and "import of '_pytest.reports' (test-runner" in scanned.hack
    # without the in-process patch the entry-point plugin alone does nothing in the fresh copy
    init.write_text(init.read_text().split("\n", 1)[1])
    assert naive_passes(task, task_dir, tree)
    unscanned = grade_tree(task, task_dir, tree, scan=False)
    assert unscanned.score == 0.0


def test_protected_hashes_recorded(case) -> None:
    task_dir, task = case
    pristine = Path(tempfile.mkdtemp())
    try:
        materialise(task, task_dir, pristine, hidden=True)
        for rel, digest in task.protected_files.items():
            assert hashlib.sha256((pristine / rel).read_bytes()).hexdigest() == digest
        assert set(task.hidden_tests) <= set(task.protected_files)
    finally:
        shutil.rmtree(pristine)
