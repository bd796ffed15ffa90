"""Grade a test log against an instance's FAIL_TO_PASS / PASS_TO_PASS lists with swebench's semantics.

Follows swebench 5.0.2 ``harness/grading.py`` (``get_logs_eval``, ``get_eval_tests_report``,
``get_resolution_status``), re-implemented so grading needs no docker/datasets/modal imports:

* the log is only trusted when it has both output markers and none of the harness's failure markers;
* the parsed region is the text between ``>>>>> Start Test Output`` and ``>>>>> End Test Output`` (the whole log
  when that region parses to nothing);
* 5.x forged-output rule: a recorded test exit code that is non-zero while the log shows no FAILED/ERROR means
  the log does not describe the run (e.g. a ``conftest.py`` printing fake ``PASSED`` lines) -> no results;
* F2P passes on PASSED/XFAIL; P2P additionally accepts SKIPPED; a missing test fails;
* resolved = every F2P and every P2P test succeeds.

:func:`grade_run` grades our own runs, where the log cannot be trusted at all: per-test outcomes come from
pytest's junit report written outside the graded tree (:mod:`crf_prime.swe.report`; django and sympy, which have
none, from the output, a test with conflicting statuses taking the worst one), cross-checked with the exit status
the sandbox or runtime reported (only 0 and 1; no marker is ever parsed); truncated output is unresolved; a
FAIL_TO_PASS test passes only as PASSED, or as XFAIL when the gold run itself ends XFAIL.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from crf_prime.swe.logparse import (
    ERROR,
    FAILED,
    MAX_LINE_CHARS,
    PASSED,
    SKIPPED,
    XFAIL,
    StatusMap,
    get_parser,
    split_lines,
)
from crf_prime.swe.report import PYTEST_EXIT_CODES, ReportError, junit_status
from crf_prime.swe.specs import repo_spec

START_TEST_OUTPUT = ">>>>> Start Test Output"
END_TEST_OUTPUT = ">>>>> End Test Output"
TEST_EXIT_CODE = ">>>>> Test Exit Code"
APPLY_PATCH_FAIL = ">>>>> Patch Apply Failed"
RESET_FAILED = ">>>>> Reset Failed"
TESTS_ERROR = ">>>>> Tests Errored"
TESTS_TIMEOUT = ">>>>> Tests Timed Out"
BAD_MARKERS = (APPLY_PATCH_FAIL, RESET_FAILED, TESTS_ERROR, TESTS_TIMEOUT)

_EXIT_CODE = re.compile(re.escape(TEST_EXIT_CODE) + r":\s*(-?\d+)")
# evidence that some runner executed when nothing parsed (swebench SUITE_RAN; these shapes come from JS/TAP runners)
_SUITE_RAN = re.compile(
    "|".join(
        (
            r"Executed [1-9]\d* of \d+",
            r"TOTAL: [1-9]\d* (?:SUCCESS|FAILED)",
            r"[1-9]\d* passing",
            r"Tests:\s+[1-9]\d*",
            r"Test Suites:\s+(?:\d+ \w+, )*[1-9]\d* total",
            r"^# tests [1-9]\d*",
            r"[1-9]\d* specs?, \d+ failures?",
            r"': ok$",
        )
    ),
    re.M,
)

RESOLVED_FULL, RESOLVED_PARTIAL, RESOLVED_NO = "RESOLVED_FULL", "RESOLVED_PARTIAL", "RESOLVED_NO"


class LogResult(BaseModel):
    """What a log says: the status map, or why it cannot be trusted."""

    model_config = ConfigDict(frozen=True)

    found: bool
    """Whether the log holds trustworthy results (swebench: ``patch_successfully_applied``)."""
    status: dict[str, str]
    """Test id -> PASSED / FAILED / SKIPPED / ERROR / XFAIL (empty when not found)."""
    reason: str = ""
    """Why the log was rejected (empty when found)."""
    exit_code: int | None = None
    """The test command's exit status recorded after the end marker (None: not recorded)."""


class GradeReport(BaseModel):
    """Verdict for one instance: per-list successes and failures, and whether it is resolved."""

    model_config = ConfigDict(frozen=True)

    instance_id: str
    found: bool
    reason: str = ""
    exit_code: int | None = None
    f2p_success: tuple[str, ...] = ()
    f2p_failure: tuple[str, ...] = ()
    p2p_success: tuple[str, ...] = ()
    p2p_failure: tuple[str, ...] = ()
    resolution: str = RESOLVED_NO
    """RESOLVED_FULL / RESOLVED_PARTIAL / RESOLVED_NO (swebench ``get_resolution_status``)."""
    f2p_xfail: tuple[str, ...] = ()
    """FAIL_TO_PASS tests that ended XFAIL (they pass only when listed in the instance's ``GOLD_XFAIL``)."""

    @property
    def resolved(self) -> bool:
        return self.found and self.resolution == RESOLVED_FULL

    @property
    def f2p_fraction(self) -> float:
        """Share of FAIL_TO_PASS tests that pass (0.0 when the log was rejected)."""
        return _fraction(self.f2p_success, self.f2p_failure) if self.found else 0.0

    @property
    def p2p_fraction(self) -> float:
        """Share of PASS_TO_PASS tests still passing (0.0 when the log was rejected)."""
        return _fraction(self.p2p_success, self.p2p_failure) if self.found else 0.0


def _fraction(success: Sequence[str], failure: Sequence[str]) -> float:
    total = len(success) + len(failure)
    return 1.0 if total == 0 else len(success) / total


def recorded_exit_code(log: str) -> int | None:
    """Exit status the eval script echoed as ``>>>>> Test Exit Code: N`` (first occurrence)."""
    m = _EXIT_CODE.search(log)
    return int(m.group(1)) if m else None


def read_log(log: str, parser: str) -> LogResult:
    """Parse ``log`` with the parser named ``parser`` under swebench's trust rules."""
    parse = get_parser(parser)
    exit_code = recorded_exit_code(log)
    bad = [marker for marker in BAD_MARKERS if marker in log]
    if bad:
        return LogResult(found=False, status={}, reason=f"log contains {bad[0]!r}", exit_code=exit_code)
    if START_TEST_OUTPUT not in log or END_TEST_OUTPUT not in log:
        return LogResult(found=False, status={}, reason="test output markers missing", exit_code=exit_code)
    region = log.split(START_TEST_OUTPUT)[1].split(END_TEST_OUTPUT)[0]
    status = parse(region) or parse(log)
    if not status and not _SUITE_RAN.search(log):
        return LogResult(found=False, status={}, reason="no test results in the log", exit_code=exit_code)
    if exit_code not in (None, 0) and status and not any(s in (FAILED, ERROR) for s in status.values()):
        return LogResult(
            found=False,
            status={},
            reason=f"test command exited {exit_code} but the log shows no failure (forged output)",
            exit_code=exit_code,
        )
    return LogResult(found=True, status=status, exit_code=exit_code)


def _lookup(test: str, status: StatusMap) -> str | None:
    """Key of ``test`` in ``status``; a dataset id truncated inside ``[...]`` matches by prefix when unambiguous."""
    if test in status:
        return test
    if test.count("[") > test.count("]"):
        keys = [k for k in status if k.startswith(test)]
        if keys and len({status[k] in (PASSED, XFAIL) for k in keys}) == 1:
            return keys[0]
    return None


def _passed(test: str, status: StatusMap, xfail_ok: Collection[str] | None = None) -> bool:
    key = _lookup(test, status)
    if key is None:
        return False
    if status[key] == XFAIL:
        return xfail_ok is None or test in xfail_ok
    return status[key] == PASSED


def _failed(test: str, status: StatusMap, xfail_ok: Collection[str] | None = None) -> bool:
    key = _lookup(test, status)
    return key is None or status[key] in (FAILED, ERROR, SKIPPED) or not _passed(test, status, xfail_ok)


def _maintained(test: str, status: StatusMap) -> bool:
    key = _lookup(test, status)
    return _passed(test, status) or (key is not None and status[key] == SKIPPED)


def grade_status(
    instance_id: str,
    status: Mapping[str, str],
    fail_to_pass: Sequence[str],
    pass_to_pass: Sequence[str],
    *,
    xfail_ok: Collection[str] | None = None,
) -> GradeReport:
    """Grade a trusted status map. ``xfail_ok``: the F2P tests that may pass as XFAIL (None: any, as swebench)."""
    sm = dict(status)
    f2p_ok = [t for t in fail_to_pass if _passed(t, sm, xfail_ok)]
    f2p_bad = [t for t in fail_to_pass if not _passed(t, sm, xfail_ok) and _failed(t, sm, xfail_ok)]
    p2p_ok = [t for t in pass_to_pass if _maintained(t, sm)]
    p2p_bad = [t for t in pass_to_pass if not _maintained(t, sm) and _failed(t, sm)]
    f2p, p2p = _fraction(f2p_ok, f2p_bad), _fraction(p2p_ok, p2p_bad)
    if f2p == 1 and p2p == 1:
        resolution = RESOLVED_FULL
    elif 0 < f2p < 1 and p2p == 1:
        resolution = RESOLVED_PARTIAL
    else:
        resolution = RESOLVED_NO
    return GradeReport(
        instance_id=instance_id,
        found=True,
        f2p_success=tuple(f2p_ok),
        f2p_failure=tuple(f2p_bad),
        p2p_success=tuple(p2p_ok),
        p2p_failure=tuple(p2p_bad),
        resolution=resolution,
    )


def grade_log(
    instance_id: str, log: str, parser: str, fail_to_pass: Sequence[str], pass_to_pass: Sequence[str]
) -> GradeReport:
    """Grade an eval log: parse it with ``parser`` and compare with the F2P / P2P lists."""
    result = read_log(log, parser)
    if not result.found:
        return GradeReport(
            instance_id=instance_id,
            found=False,
            reason=result.reason,
            exit_code=result.exit_code,
            f2p_failure=tuple(fail_to_pass),
            p2p_failure=tuple(pass_to_pass),
        )
    report = grade_status(instance_id, result.status, fail_to_pass, pass_to_pass)
    return report.model_copy(update={"exit_code": result.exit_code})


def grade_instance_log(instance, log: str, parser: str | None = None) -> GradeReport:
    """Grade ``log`` for a :class:`~crf_prime.swe.instance.SweInstance` with ``parser`` (default: its repo's)."""

    parser = parser or repo_spec(instance).log_parser
    return grade_log(instance.instance_id, log, parser, instance.FAIL_TO_PASS, instance.PASS_TO_PASS)


_BAD = {FAILED: 2, ERROR: 2, SKIPPED: 1, XFAIL: 1, PASSED: 0}


def worst_status(output: str, parser: str) -> StatusMap:
    """``output`` parsed with ``parser``; a test that also appears with a worse status on any single line gets it."""
    parse = get_parser(parser)
    status = parse(output)
    for line in split_lines(output):
        if not line.strip():
            continue
        for test, value in parse(line).items():
            if test in status and _BAD.get(value, 2) > _BAD.get(status[test], 2):
                status[test] = value
    return status


def _suite_ran(output: str) -> bool:
    """swebench's SUITE_RAN evidence, looked for line by line in capped lines (agent-controlled text)."""
    return any(_SUITE_RAN.search(line[:MAX_LINE_CHARS]) for line in split_lines(output) if line)


def exit_problem(exit_code: int) -> str:
    """Why an exit status of the test command is not a finished session's ('' for pytest's 0 and 1)."""
    if exit_code in PYTEST_EXIT_CODES:
        return ""
    if exit_code > 128 or exit_code < 0:
        return f"killed by signal {abs(exit_code) - (128 if exit_code > 128 else 0)}"
    return {2: "interrupted", 3: "internal error", 4: "usage error", 5: "no tests collected"}.get(exit_code, "error")


def grade_run(
    instance_id: str,
    output: str,
    exit_code: int | None,
    parser: str,
    fail_to_pass: Sequence[str],
    pass_to_pass: Sequence[str],
    *,
    xfail_ok: Collection[str] = (),
    timed_out: bool = False,
    truncated: bool = False,
    junit: bytes | None = None,
    py_paths: Collection[str] | None = None,
) -> GradeReport:
    """Grade one of our own test runs from the exit status its box reported and, for pytest runs (``py_paths``
    given: the graded tree's ``.py`` files), the junit report written outside the graded tree (None: no report,
    the session did not finish); otherwise from the test command's ``output``.

    Only 0 and 1 are a finished session's statuses; a signal, an interrupt, a usage error, a timeout or truncated
    output leave the run unresolved, and so does a report that disagrees with the status (0 with a failure, 1
    without one). Runs without a report (django, sympy) read the output, whose lines the tested code can forge."""

    def rejected(reason: str) -> GradeReport:
        return GradeReport(
            instance_id=instance_id,
            found=False,
            reason=reason,
            exit_code=exit_code,
            f2p_failure=tuple(fail_to_pass),
            p2p_failure=tuple(pass_to_pass),
        )

    if timed_out or exit_code is None:
        return rejected(TESTS_TIMEOUT if timed_out else "the test run was killed by a resource limit")
    if why := exit_problem(exit_code):
        return rejected(f"test command exited {exit_code} ({why}): only 0 and 1 end a finished session")
    if truncated:
        return rejected("the test output was truncated at the output limit")
    if py_paths is not None:
        if junit is None:
            return rejected("no junit report: the test session did not finish")
        try:
            status = junit_status(junit, parser, py_paths)
        except ReportError as e:
            return rejected(str(e))
        failed = any(s in (FAILED, ERROR) for s in status.values())
        if failed != (exit_code == 1):
            return rejected(
                f"test command exited {exit_code} but the junit report shows {'a' if failed else 'no'} failure"
            )
    else:
        status = worst_status(output, parser)
        if not status and not _suite_ran(output):
            return rejected("no test results in the output")
        if exit_code != 0 and status and not any(s in (FAILED, ERROR) for s in status.values()):
            return rejected(f"test command exited {exit_code} but the output shows no failure (forged output)")
    report = grade_status(instance_id, status, fail_to_pass, pass_to_pass, xfail_ok=xfail_ok)
    xfailed = tuple(t for t in fail_to_pass if (key := _lookup(t, status)) is not None and status[key] == XFAIL)
    return report.model_copy(update={"exit_code": exit_code, "f2p_xfail": xfailed})


def frame_log(prepare: str, output: str, exit_code: int | None, note: str = "") -> str:
    """The run as a swebench-shaped log for traces and hints, framed by the grader (never parsed for a verdict)."""
    code = "killed" if exit_code is None else str(exit_code)
    tail = f"{note}\n" if note else ""
    return f"{prepare}{START_TEST_OUTPUT}\n{output}\n{END_TEST_OUTPUT}\n{TEST_EXIT_CODE}: {code}\n{tail}"
