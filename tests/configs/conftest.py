"""Fixtures of the configs suite."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def launch(tmp_path: Path) -> Path:
    """A launch directory holding every input the ladder's sources name (relative paths, as in the TOMLs)."""
    for rel in ("tasks/featdel-train/tasks.jsonl", "tasks/featdel-eval/tasks.jsonl", "replay/states.jsonl"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    (tmp_path / "replay/run").mkdir()
    (tmp_path / "replay/run/journal.jsonl").write_text("")
    return tmp_path
