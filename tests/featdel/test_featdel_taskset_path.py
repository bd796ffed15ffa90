"""``taskset.tasks`` of the feature_deletion taskset: a task directory or its tasks.jsonl; a bad path names the
config field and the path the user gave."""

from __future__ import annotations

from pathlib import Path

import pytest


def _load(tasks: Path | str):
    from feature_deletion.taskset import FeatureDeletionConfig, FeatureDeletionTaskset

    return FeatureDeletionTaskset(FeatureDeletionConfig(id="feature-deletion", tasks=tasks)).load()


def test_directory_or_its_tasks_jsonl(tmp_path: Path) -> None:
    from feature_deletion.taskset import resolve_task_dir

    (tmp_path / "tasks.jsonl").write_text("")
    assert resolve_task_dir(tmp_path) == tmp_path.resolve()
    assert resolve_task_dir(tmp_path / "tasks.jsonl") == tmp_path.resolve()
    assert resolve_task_dir(str(tmp_path / "tasks.jsonl")) == tmp_path.resolve()
    assert _load(tmp_path / "tasks.jsonl") == [] and _load(tmp_path) == []


@pytest.mark.parametrize(
    ("rel", "why"),
    [
        ("missing/tasks.jsonl", "does not exist"),
        ("missing", "does not exist"),
        ("other.jsonl", "is a file other than tasks.jsonl (task rows name the base archive next to their tasks.jsonl)"),
        ("empty", "is a directory without tasks.jsonl"),
    ],
)
def test_bad_path_names_the_field_and_the_given_path(tmp_path: Path, rel: str, why: str) -> None:
    (tmp_path / "other.jsonl").write_text("{}\n")
    (tmp_path / "empty").mkdir()
    given = str(tmp_path / rel)
    with pytest.raises(ValueError) as info:
        _load(given)
    assert str(info.value) == (
        f"taskset.tasks: {given!r} {why}; give a task directory written by 'crf-prime featdel generate' "
        "or the tasks.jsonl inside it"
    )
