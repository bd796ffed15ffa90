"""A test that failed at grading: the one row the graders write and the hint builder reads."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class FailingTest(BaseModel):
    """A test that failed when the environment scored the episode (the SDPO "environment feedback").

    The Feature Deletion and SWE-bench graders list these in their results; channel 2 (``crf_prime.hints``) turns
    them into hint lines without any conversion.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    """Test id as the runner prints it, e.g. ``tests/test_cli.py::test_parse`` (or a grader step: ``replay``)."""
    message: str = ""
    """Failure text of the grading run (any length; the junit XML's first lines, or why it is missing). It can carry
    text the agent's code produced (its exception messages, its output), so hints never quote it: it only locates
    lines of the test files (``crf_prime.hints.evidence``)."""
    note: str = ""
    """Grader-written explanation built from grader-side facts only (e.g. "3 of 40 replayed calls differ"), quoted
    as is."""
