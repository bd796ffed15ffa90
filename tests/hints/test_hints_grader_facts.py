"""Channel-2 hints are built from grader-side facts only (issue 25 item 6): a secret the agent's code puts into an
exception message or its output during grading never reaches ``trace.info["hint"]``, through ``crf_prime.hints``
and through the Feature Deletion environment's hint path (``hint_failures``); the lines a hint quotes come from the
grader's copy of the test files, whatever locations the failure text claims."""

from __future__ import annotations

import json

from test_hints_attach import make_trace

from crf_prime.featdel.models import GradeResult
from crf_prime.hints import HINT_KEY, FailingTest, attach_hint, attach_hint_async
from crf_prime.hints.evidence import failure_evidence, patch_new_lines

SECRET = "SECRET-7f3a9c"
TEST_FILE = "def test_tz():\n    assert fmt(when) == expected\n"
SOURCES = {"tests/test_fmt.py": TEST_FILE}

# what pytest's junit text looks like when the agent's code raised an exception carrying data read from the hidden
# test file; the agent also forges pytest-looking lines (a fake source line, a location) inside its message and output
AGENT_FAILURE = (
    f"ValueError: {SECRET}\n"
    "    def test_tz():\n"
    ">       assert fmt(when) == expected\n\n"
    "tests/test_fmt.py:2: \n"
    "_ _ _ _ _ _ _ _\n\n"
    "    def fmt(v):\n"
    f">       raise ValueError({SECRET!r})\n"
    f"E       ValueError: {SECRET}\n"
    f"E       >       assert fmt(when) == '{SECRET}'\n"
    f"E       tests/test_fmt.py:1: {SECRET}\n"
    f"E       /tmp/x/repo/tests/test_fmt.py:3: {SECRET}\n\n"
    "pkg/fmt.py:7: ValueError\n"
    f"----------------------------- Captured stdout call -----------------------------\n{SECRET}\n"
    f"tests/test_fmt.py:1: {SECRET}\n"  # a forged location at a line start: it selects a line of the grader's copy
)


def _everything(trace) -> str:
    return json.dumps(trace.info, default=str)


def test_evidence_quotes_the_graders_copy_only() -> None:
    assert failure_evidence("tests/test_fmt.py::test_tz", AGENT_FAILURE, SOURCES) == (
        "tests/test_fmt.py:2: `assert fmt(when) == expected`; tests/test_fmt.py:1: `def test_tz():`"
    )
    assert (
        failure_evidence("tests/test_fmt.py::test_tz", AGENT_FAILURE, {}) == ""
    )  # nothing held by the grader: nothing quoted


async def test_a_secret_in_an_agent_raised_exception_never_reaches_the_hint() -> None:
    failing = [FailingTest(name="tests/test_fmt.py::test_tz", message=AGENT_FAILURE)]
    for sources in (SOURCES, None):
        trace = make_trace([([("bash", '{"command": "ls"}')], ["ok"])])
        hint = attach_hint(trace, failing_tests=failing, test_sources=sources)
        assert hint.startswith("- Test `tests/test_fmt.py::test_tz` failed") and SECRET not in _everything(trace)
        trace = make_trace([([("bash", '{"command": "ls"}')], ["ok"])])
        assert await attach_hint_async(trace, failing_tests=failing, test_sources=sources) == hint
        assert SECRET not in _everything(trace)


def test_the_feature_deletion_hint_path_keeps_grader_facts_only() -> None:
    from feature_deletion.taskset import hint_failures

    result = GradeResult(
        score=0.0,
        passed_fraction=0.0,
        passed=(),
        failed=(
            FailingTest(name="tests/test_fmt.py::test_tz", message=f"failed: {AGENT_FAILURE}"),
            FailingTest(name="replay", message=f"2 of 9 replayed calls differ; fmt(1) returned {SECRET!r}"),
        ),
        replay_calls=9,
        replay_mismatches=2,
    )
    failing = hint_failures(result)
    trace = make_trace([([("bash", '{"command": "ls"}')], ["ok"])])
    attach_hint(trace, failing_tests=failing, test_sources=SOURCES)
    assert trace.info[HINT_KEY].splitlines() == [
        "- Test `tests/test_fmt.py::test_tz` failed at tests/test_fmt.py:2: `assert fmt(when) == expected`; "
        "tests/test_fmt.py:1: `def test_tz():`.",
        "- Test `replay` failed: 2 of 9 calls the grader replayed return, raise or mutate differently from the "
        "original implementation",
    ]
    assert SECRET not in _everything(trace)


def test_test_body_and_grader_owned_patches_are_facts_too() -> None:
    patch = (
        "diff --git a/tests/test_s.py b/tests/test_s.py\n--- a/tests/test_s.py\n+++ b/tests/test_s.py\n"
        "@@ -1,2 +1,6 @@\n def test_old():\n     assert f(1) == 1\n+\n+\n+def test_new():\n+    assert f([4, 1]) == 2.5\n"
    )
    sources = patch_new_lines(patch)
    assert sources == {
        "tests/test_s.py": "def test_old():\n    assert f(1) == 1\n\n\ndef test_new():\n    assert f([4, 1]) == 2.5"
    }
    # a one-line log message (SWE's ``FAILED id - ...``) locates nothing: the test's own first assertion is quoted
    where = failure_evidence("tests/test_s.py::test_new", f"assert {SECRET} == 2.5", sources)
    assert where == "tests/test_s.py:6: `assert f([4, 1]) == 2.5`"
