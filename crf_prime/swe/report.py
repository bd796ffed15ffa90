"""Per-test outcomes from pytest's junit report, written where the agent's tree cannot reach, in swebench's id space.

The test log is output the code under test can write (a forged ``PASSED`` line, an interrupt message, a write to a
saved stdout descriptor before a crash). For pytest-run repositories the grader passes ``--junitxml=<path>`` with a
path outside the graded tree; pytest writes it in ``pytest_sessionfinish``, so a report exists only when the session
finished. Each ``testcase`` is turned back into the pytest node id and rendered as a ``-rA`` summary line
(``STATUS node id``), which the repository's own log parser then reads: ids come out exactly as swebench's parser
spells them (option normalisation, ``MouseButton`` names, ids with spaces). Test ids are recovered from junit's
``classname`` with the set of ``.py`` paths the graded tree holds (the longest dotted prefix that names one).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Collection, Iterator

from crf_prime.swe.logparse import ERROR, FAILED, PASSED, SKIPPED, XFAIL, StatusMap, get_parser

JUNIT_FILE = "junit.xml"
MAX_REPORT_BYTES = 64 << 20
"""A larger report is not read (the run is unresolved): bounded grader memory and time."""
PYTEST_EXIT_CODES = {0: "all tests passed", 1: "some tests failed"}
"""The only exit statuses of a pytest session whose report is trusted; 2 (interrupted), 3 (internal error),
4 (usage error), 5 (no tests collected) and any signal leave the run unresolved."""
_XPASS_STRICT = "xfail-marked test passes unexpectedly"
_RANK = {PASSED: 0, XFAIL: 1, SKIPPED: 1, FAILED: 2, ERROR: 2}


class ReportError(ValueError):
    """The report is missing, too large or not junit XML: the session's outcomes are unknown (unresolved)."""


def _status(case: ET.Element) -> str:
    for child in case:
        if child.tag == "failure":
            return FAILED
        if child.tag == "error":
            return ERROR
        if child.tag == "skipped":
            if child.get("type") == "pytest.xfail":
                return XFAIL
            return FAILED if child.get("message") == _XPASS_STRICT else SKIPPED
    return PASSED


def _cases(xml: bytes) -> Iterator[tuple[str, str, str]]:
    """(classname, name, status) per ``testcase``, read incrementally (the document is never held as one tree)."""
    parser: ET.XMLPullParser[ET.Element] = ET.XMLPullParser(events=("end",))
    for offset in range(0, len(xml), 1 << 16):
        parser.feed(xml[offset : offset + (1 << 16)])
        for event in parser.read_events():
            element = event[-1]  # ("end", element)
            if isinstance(element, ET.Element) and element.tag == "testcase":  # "end" events carry elements
                yield element.get("classname", ""), element.get("name", ""), _status(element)
                element.clear()
    parser.close()


def node_id(classname: str, name: str, py_paths: Collection[str]) -> str:
    """The pytest node id of a junit (classname, name): the longest dotted prefix of ``classname`` that is one of
    ``py_paths`` (posix, ``.py``) is the file; the rest are classes. Inverse of pytest's ``mangle_test_address``."""
    if not classname:
        path = name.replace(".", "/") + ".py"
        return path if path in py_paths else name  # a module that failed to collect
    parts = classname.split(".")
    for i in range(len(parts), 0, -1):
        path = "/".join(parts[:i]) + ".py"
        if path in py_paths:
            return "::".join([path, *parts[i:], name])
    return f"{classname}::{name}"


def junit_status(xml: bytes, parser: str, py_paths: Collection[str]) -> StatusMap:
    """Status map (swebench ids, via the repository's ``parser``) of a junit report; a test reported more than once
    (setup / teardown errors) keeps its worst status."""
    if len(xml) > MAX_REPORT_BYTES:
        raise ReportError(f"the junit report holds {len(xml)} bytes (more than {MAX_REPORT_BYTES})")
    worst: dict[str, str] = {}
    try:
        for classname, name, status in _cases(xml):
            test = node_id(classname, name, py_paths)
            if _RANK[status] >= _RANK[worst.get(test, PASSED)]:
                worst[test] = status
    except ET.ParseError as e:
        raise ReportError(f"the junit report is not well-formed XML ({e})") from None
    parse = get_parser(parser)
    out: StatusMap = {}
    for test, status in worst.items():
        if "\n" not in test:
            out.update(parse(f"{status} {test}"))
    return out
