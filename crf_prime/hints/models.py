"""Rows exchanged between the environments and the hint builder."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ErrorKind = Literal[
    "failing_test",
    "unknown_tool",
    "invalid_json",
    "schema_violation",
    "tool_error",
    "traceback",
    "repeated_failure",
]
"""Error-site kinds, in the order their hints are written (most actionable first)."""

KIND_ORDER: tuple[ErrorKind, ...] = (
    "failing_test",
    "unknown_tool",
    "invalid_json",
    "schema_violation",
    "repeated_failure",
    "traceback",
    "tool_error",
)


class FailingTest(BaseModel):
    """A test that failed when the environment scored the episode (the SDPO "environment feedback")."""

    model_config = ConfigDict(frozen=True)

    name: str
    """Test id as the runner prints it, e.g. ``tests/test_cli.py::test_parse``."""
    message: str = ""
    """Assertion / error text of the failure (any length; it is condensed before it reaches a hint)."""


class ErrorSite(BaseModel):
    """One place in the episode where the agent went wrong."""

    model_config = ConfigDict(frozen=True)

    kind: ErrorKind
    index: int
    """Index into the analysed message list of the message that shows the error; -1 for failing tests."""
    tool: str | None = None
    """Tool name involved, if any."""
    detail: str = ""
    """Condensed evidence: parse error, schema error, last traceback line, test failure text."""
    arguments: str = ""
    """Raw arguments of the offending call (for unknown tools / invalid JSON / repeated failures), truncated."""
    count: int = Field(default=1, ge=1)
    """How many times the same failure happened (repeated_failure)."""
