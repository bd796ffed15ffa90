"""``tasks_per_package``: a run can load at most N tasks per package snapshot, so tasks don't teach each other."""

from __future__ import annotations

from pathlib import Path

import pytest
from featdel_support import INFLECTION, generated
from pydantic import ValidationError

from crf_prime.featdel.deletion import apply_unified_diff, function_text


def _taskset(task_dir: Path, **kw):
    from feature_deletion.taskset import FeatureDeletionConfig, FeatureDeletionTaskset

    return FeatureDeletionTaskset(FeatureDeletionConfig(id="feature-deletion", tasks=task_dir, **kw))


def test_per_package_pick_is_bounded_seeded_and_order_preserving() -> None:
    from feature_deletion.taskset import per_package

    _, tasks, _ = generated(INFLECTION, 2)
    a, b = tasks
    other = b.model_copy(update={"task_id": "other-pkg", "base_sha256": "0" * 64})
    rows = [a, b, other]
    assert per_package(rows, None) == rows
    one = per_package(rows, 1)
    assert len(one) == 2 and one[-1] is other and one[0] in (a, b)
    assert per_package(rows, 1, seed=3) == per_package(rows, 1, seed=3)
    picks = {per_package(rows, 1, seed=s)[0].task_id for s in range(20)}
    assert picks == {a.task_id, b.task_id}  # the seed decides which task of the package is kept
    assert per_package(rows, 2) == rows


@pytest.mark.bwrap
@pytest.mark.slow
def test_taskset_loads_one_task_per_package(tmp_path: Path) -> None:
    task_dir, tasks, _ = generated(INFLECTION, 2)
    assert len(tasks) == 2 and tasks[0].base_sha256 == tasks[1].base_sha256
    # why it matters: each task's snapshot holds the other task's deleted body intact
    first, second = tasks
    path, qualname = first.targets[0].path, first.targets[0].qualname
    answer = function_text(apply_unified_diff(dict(first.broken_files), first.gold_patch)[path], qualname)
    assert "raise NotImplementedError" not in answer and answer in second.broken_files[path]
    assert len(_taskset(task_dir).load()) == 2
    loaded = _taskset(task_dir, tasks_per_package=1).load()
    assert [t.key for t in loaded] in ([first.task_id], [second.task_id])
    with pytest.raises(ValidationError):
        _taskset(task_dir, tasks_per_package=0)
