"""The featdel test support shares generated task sets between xdist workers through the run directory: a worker
that finds a set there reads it back, so what it reads must be what generate returned to the worker that wrote it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from featdel_support import INFLECTION, generated

from crf_prime.featdel.generate import load_tasks
from crf_prime.featdel.models import GenerateSummary


@pytest.mark.bwrap
@pytest.mark.slow
def test_a_generated_set_reads_back_from_the_run_directory_as_generated() -> None:
    task_dir, tasks, summary = generated(INFLECTION, 2)
    assert task_dir.parent == Path(os.environ["CRF_TEST_RUN_DIR"]) / "generated"
    assert len(tasks) == 2 and tuple(load_tasks(task_dir)) == tasks
    assert GenerateSummary.model_validate_json((task_dir / "summary.json").read_text()) == summary
