"""Reading the agent's workspace (``collect_changes``) never follows the agent's symlinks nor blocks on special files."""

from __future__ import annotations

import os
import shutil
import stat
import threading
from pathlib import Path

import pytest
from featdel_support import INFLECTION, agent_tree, generated

from crf_prime.featdel.grade import collect_changes
from crf_prime.featdel.models import FeatdelTask

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

HOST_SECRET = "HOST_ONLY = 'a host file outside the agent workspace'\n"


@pytest.fixture(scope="module")
def case() -> tuple[Path, FeatdelTask]:
    task_dir, tasks, _ = generated(INFLECTION, 2)
    return task_dir, tasks[0]


@pytest.fixture
def tree(case, tmp_path: Path) -> Path:
    task_dir, task = case
    return agent_tree(task, task_dir, tmp_path / "agent")


def _pkg(task: FeatdelTask) -> str:
    return next(d for d in task.package_dirs if d not in (".", "src"))


def _collect(task: FeatdelTask, task_dir: Path, tree: Path) -> dict[str, str | None]:
    """collect_changes in a daemon thread, so a grader blocked on a FIFO fails the test instead of hanging it."""
    box: list[dict[str, str | None]] = []
    worker = threading.Thread(target=lambda: box.append(collect_changes(task, task_dir, tree)), daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "collect_changes blocked"
    return box[0]


def test_symlinked_source_file_is_not_read(case, tree: Path, tmp_path: Path) -> None:
    task_dir, task = case
    host = tmp_path / "host_secret.py"
    host.write_text(HOST_SECRET)
    rel = task.targets[0].path
    (tree / rel).unlink()
    (tree / rel).symlink_to(host)
    changes = _collect(task, task_dir, tree)
    assert changes == {rel: None}  # a link counts as a deleted file; the host file is never read


def test_symlinked_package_directory_is_not_read(case, tree: Path, tmp_path: Path) -> None:
    task_dir, task = case
    pkg = _pkg(task)
    outside = tmp_path / "outside_pkg"
    shutil.copytree(tree / pkg, outside)
    for p in outside.rglob("*.py"):
        p.write_text(HOST_SECRET)
    (outside / "extra_module.py").write_text(HOST_SECRET)
    shutil.rmtree(tree / pkg)
    (tree / pkg).symlink_to(outside, target_is_directory=True)
    changes = _collect(task, task_dir, tree)
    assert changes == {rel: None for rel in task.source_files if rel.startswith(pkg + "/")}


def test_symlinked_new_module_is_not_read(case, tree: Path, tmp_path: Path) -> None:
    task_dir, task = case
    host = tmp_path / "host_secret.py"
    host.write_text(HOST_SECRET)
    (tree / _pkg(task) / "linked.py").symlink_to(host)
    (tree / _pkg(task) / "real.py").write_text("VALUE = 1\n")
    assert _collect(task, task_dir, tree) == {f"{_pkg(task)}/real.py": "VALUE = 1\n"}


def test_fifo_and_device_do_not_block_the_grader(case, tree: Path) -> None:
    task_dir, task = case
    rel = task.targets[0].path
    (tree / rel).unlink()
    os.mkfifo(tree / rel)  # a writer-less FIFO: a plain open() for reading blocks forever
    os.mkfifo(tree / _pkg(task) / "new_fifo.py")
    zero = tree / _pkg(task) / "zero.py"
    try:
        os.mknod(zero, stat.S_IFCHR | 0o644, os.makedev(1, 5))  # /dev/zero: reading never ends
    except PermissionError:
        zero = None
    changes = _collect(task, task_dir, tree)
    assert changes == {rel: None}
    assert zero is None or zero.is_char_device()
