"""Log parsing in a child process gives the very verdicts the in-process functions give."""

from __future__ import annotations

import asyncio

import pytest
from test_swe_hostile import F2P, FORGED_LOG, P2P, PASS_ALL, PY

from crf_prime.swe.grading import grade_run
from crf_prime.swe.logparse import failure_messages
from crf_prime.swe.parseworker import SLICE_CHARS, failure_messages_off_loop, grade_run_off_loop

ODD = "caf\u00e9 \udcff \ud800 " * 10  # non-ASCII, an escaped byte, a lone surrogate: all survive the pipe


@pytest.mark.parametrize(
    "kwargs",
    [
        {"exit_code": 0, "junit": PASS_ALL, "py_paths": PY},
        {"exit_code": 1, "junit": None, "py_paths": PY},
        {"exit_code": 0, "junit": None, "py_paths": None},  # the log decides (django, sympy parsers)
        {"exit_code": 0, "junit": PASS_ALL, "py_paths": PY, "truncated": True},
        {"exit_code": 139, "junit": PASS_ALL, "py_paths": PY},
    ],
)
def test_off_loop_grade_equals_the_in_process_grade(kwargs: dict) -> None:
    log = FORGED_LOG + ODD + "\n" + "x" * (SLICE_CHARS + 7)  # more than one slice
    here = grade_run("i", log, parser="pytest", fail_to_pass=F2P, pass_to_pass=P2P, xfail_ok=(), **kwargs)
    there = asyncio.run(
        grade_run_off_loop("i", log, parser="pytest", fail_to_pass=F2P, pass_to_pass=P2P, xfail_ok=(), **kwargs)
    )
    assert there == here


def test_off_loop_failure_messages_equal_the_in_process_ones() -> None:
    log = f"FAILED tests/test_a.py::test_x - AssertionError: {ODD}\nFAILED tests/test_a.py::test_y - boom\n"
    got = asyncio.run(failure_messages_off_loop(log))
    assert got == failure_messages(log) and set(got) == {"tests/test_a.py::test_x", "tests/test_a.py::test_y"}
