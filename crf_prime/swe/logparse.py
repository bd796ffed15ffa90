"""Test-log parsers for the SWE-bench-lite repositories: log text -> ``{test id: status}``.

Each parser reproduces the behaviour of the swebench 5.0.2 parser of the same name
(``swebench/harness/log_parsers/python.py``; ``parse_log_<name>``), including its quirks, because F2P/P2P ids in
the dataset were produced by those parsers; ``tests/swe/test_swe_parity.py`` feeds the same logs to both and
requires identical maps (on swebench 4.x: the differences it lists). Statuses are the swebench ``TestStatus`` values.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable

PASSED, FAILED, SKIPPED, ERROR, XFAIL = "PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL"
STATUSES: tuple[str, ...] = (FAILED, PASSED, SKIPPED, ERROR, XFAIL)

MAX_LINE_CHARS = 20_000
"""Lines longer than this are never given to a backtracking regex (the log is agent-controlled text)."""

_CHUNK_CHARS = 1 << 20

StatusMap = dict[str, str]
Parser = Callable[[str], StatusMap]


def split_lines(text: str) -> list[str]:
    """``text.split("\\n")`` done a megabyte at a time: no single call holds the GIL for long on a 20 MB log, so a
    parse in a worker thread never stalls the event loop."""
    if len(text) <= _CHUNK_CHARS:
        return text.split("\n")
    lines: list[str] = []
    start = 0
    while True:
        cut = text.find("\n", start + _CHUNK_CHARS)
        if cut < 0:
            lines.extend(text[start:].split("\n"))
            return lines
        lines.extend(text[start:cut].split("\n"))
        start = cut + 1


_BRACKET_COUNT = re.compile(r"\[\d+\]")


def _skip_summary(status: str, name: str) -> bool:
    # ``SKIPPED [3] tests/x.py:12: reason`` is pytest's grouped skip summary; ``[3]`` is a count, not a test
    return status == SKIPPED and _BRACKET_COUNT.fullmatch(name) is not None


def _summary_line(line: str) -> tuple[str, str] | None:
    """``(status, first token)`` of a pytest ``-rA`` short-summary line, else None."""
    if not line.startswith(STATUSES):
        return None
    if line.startswith(FAILED):
        line = line.replace(" - ", " ")
    tokens = line.split()
    if len(tokens) < 2 or _skip_summary(tokens[0], tokens[1]):
        return None
    return tokens[0], tokens[1]


def parse_pytest(log: str) -> StatusMap:
    """pytest ``-rA`` short test summary (``PASSED tests/test_x.py::test_y``)."""
    out: StatusMap = {}
    for line in split_lines(log):
        if (hit := _summary_line(line)) is not None:
            out[hit[1]] = hit[0]
    return out


def _normalise_option(test: str) -> str:
    # parametrize ids holding absolute paths are cut to their last component, so ids survive a moved checkout;
    # swebench's ``(.*?)\[(.*)\]`` (first ``[`` to last ``]``, the rest dropped), found with two linear scans
    start, end = test.find("["), test.rfind("]")
    if start < 0 or end < start:
        return test
    head, option = test[:start], test[start + 1 : end]
    if option.startswith("/") and not option.startswith("//") and "*" not in option:
        option = "/" + option.split("/")[-1]
    return f"{head}[{option}]"


def parse_pytest_options(log: str) -> StatusMap:
    """pytest ``-rA`` with parametrize options normalised (requests, pylint)."""
    out: StatusMap = {}
    for line in split_lines(log):
        if (hit := _summary_line(line)) is not None:
            out[_normalise_option(hit[1])] = hit[0]
    return out


def parse_matplotlib(log: str) -> StatusMap:
    """pytest ``-rA`` with ``MouseButton`` enum reprs in ids spelled as their numbers."""
    return parse_pytest(log.replace("MouseButton.LEFT", "1").replace("MouseButton.RIGHT", "3"))


_ANSI_TAIL = re.compile(r"\[(\d+)m")
_CONTROL = str.maketrans("", "", "".join(chr(c) for c in range(1, 32)))


def parse_pytest_v2(log: str) -> StatusMap:
    """pytest ``-rA`` with colour codes, ids containing spaces, and old ``id STATUS`` verbose lines.

    Used for astropy, scikit-learn and sphinx.
    """
    out: StatusMap = {}
    for raw in split_lines(log):
        line = _ANSI_TAIL.sub("", raw).translate(_CONTROL)
        if line.startswith(STATUSES):
            if line.startswith(FAILED):
                line = line.split(" - ", 1)[0]
            tokens = line.split()
            if len(tokens) >= 2 and not _skip_summary(tokens[0], tokens[1]):
                out[" ".join(tokens[1:])] = tokens[0]
        elif line.endswith(STATUSES):
            tokens = line.split()
            if len(tokens) >= 2:
                out[" ".join(tokens[:-1])] = tokens[-1]
    return out


def parse_seaborn(log: str) -> StatusMap:
    """pytest output as seaborn's config prints it (``id PASSED [ 10%]`` progress lines and ``-rA`` summary)."""
    out: StatusMap = {}
    for line in split_lines(log):
        tokens = line.split()
        if len(tokens) < 2:
            continue
        if line.startswith(FAILED):
            out[tokens[1]] = FAILED
        elif f" {PASSED} " in line:
            if tokens[1] == PASSED:
                out[tokens[0]] = PASSED
        elif line.startswith(PASSED):
            out[tokens[1]] = PASSED
    return out


_DJANGO_PASS_SUFFIXES = (" ... ok", " ... OK", " ...  OK")
_DJANGO_7188_PREFIX = "Applying sites.0002_alter_domain_unique...test_no_migrations"
_DJANGO_TESTING_AGAINST = re.compile(r"^(.*?)\s\.\.\.\sTesting\ against\ Django\ installed\ in\ ")
# a long multi-line print can split "<test> ... ok" over two lines; these shapes were observed (swebench's patterns,
# matched line by line with the "ok" on the next line, so that no regex runs over more than one capped line)
_DJANGO_SPLIT_OK = (
    re.compile(r"^(.*?)\s\.\.\.\sInternal\ Server\ Error:\ \/(.*)\/$"),
    re.compile(r"^(.*?)\s\.\.\.\sSystem check identified no issues \(0 silenced\)$"),
)


def _django_interrupted(lines: list[str]) -> dict[str, str]:
    """Tests whose ``... ok`` a print split over lines (swebench's three multi-line patterns), found in linear time:
    the first two shapes end on the very next line; the third (``Testing against Django installed in ...``) runs to
    the first line ending `` silenced).`` that an ``ok`` line follows."""
    out: dict[str, str] = {}
    closes: list[int] = []  # index of each `` silenced).`` line followed by an ``ok`` line
    for i, line in enumerate(lines[:-1]):
        if lines[i + 1] != "ok":
            continue
        if line.endswith(" silenced)."):
            closes.append(i)
        if len(line) <= MAX_LINE_CHARS:
            for pattern in _DJANGO_SPLIT_OK:
                if (m := pattern.match(line)) is not None:
                    out[m.group(1)] = PASSED
    if not closes:
        return out
    resume = 0
    for i, line in enumerate(lines):
        if i < resume or len(line) > MAX_LINE_CHARS or (m := _DJANGO_TESTING_AGAINST.match(line)) is None:
            continue
        # the closing `` silenced).`` may end this very line, after the prefix; else a later line
        k = bisect.bisect_left(closes, i)
        if k < len(closes) and closes[k] == i and len(line) - len(" silenced).") < m.end():
            k += 1
        if k < len(closes):
            out[m.group(1)] = PASSED
            resume = closes[k] + 2
    return out


def parse_django(log: str) -> StatusMap:
    """Django's ``runtests.py --verbosity 2`` lines (``test_x (mod.Class) ... ok``) and ``FAIL:``/``ERROR:`` headers."""
    out: StatusMap = {}
    last_test: str | None = None
    for raw in split_lines(log):
        line = raw.strip()
        if "--version is equivalent to version" in line:
            out["--version is equivalent to version"] = PASSED
        if " ... " in line:
            last_test = line.split(" ... ")[0]
        for suffix in _DJANGO_PASS_SUFFIXES:
            if line.endswith(suffix):
                if line.startswith(_DJANGO_7188_PREFIX):  # django__django-7188 prints a migration line first
                    line = line.split("...", 1)[-1].strip()
                out[line.rsplit(suffix, 1)[0]] = PASSED
                break
        if " ... skipped" in line:
            out[line.split(" ... skipped")[0]] = SKIPPED
        if line.endswith(" ... FAIL"):
            out[line.split(" ... FAIL")[0]] = FAILED
        if line.startswith("FAIL:"):
            out[line.split()[1].strip()] = FAILED
        if line.endswith(" ... ERROR"):
            out[line.split(" ... ERROR")[0]] = ERROR
        if line.startswith("ERROR:"):
            out[line.split()[1].strip()] = ERROR
        if line.lstrip().startswith("ok") and last_test is not None:
            out[last_test] = PASSED  # "ok" on its own line after output printed between "..." and the verdict
    out.update(_django_interrupted(split_lines(log)))
    return out


def _sympy_failure_header(line: str) -> str | None:
    """The test swebench's ``(_*) (.*)\\.py:(.*) (_*)`` finds in ``line`` (``path.py:name``), in linear time.

    The pattern's first match starts at the line's first space (with the underscores before it); ``(.*)\\.py:`` then
    takes the last ``.py:`` that still has a space after it, and ``(.*) `` runs to the line's last space."""
    space = line.find(" ")
    if space < 0:
        return None
    rest = line[space + 1 :]
    last_space = rest.rfind(" ")
    dot = rest.rfind(".py:", 0, last_space) if last_space >= 0 else -1
    if dot < 0:
        return None
    return f"{rest[:dot]}.py:{rest[dot + 4 : last_space]}"


def parse_sympy(log: str) -> StatusMap:
    """sympy's ``bin/test -C --verbose`` (``test_name ok|F|E`` lines and ``___ path.py:test ___`` failure headers)."""
    out: StatusMap = {}
    lines = split_lines(log)
    for line in lines:
        if ".py:" in line and (test := _sympy_failure_header(line)) is not None:
            out[test] = FAILED
    for raw in lines:
        line = raw.strip()
        if not line.startswith("test_"):
            continue
        if line.endswith(" E"):
            out[line.split()[0]] = ERROR
        if line.endswith(" F"):
            out[line.split()[0]] = FAILED
        if line.endswith(" ok"):
            out[line.split()[0]] = PASSED
    return out


PARSERS: dict[str, Parser] = {
    "pytest": parse_pytest,
    "pytest_options": parse_pytest_options,
    "pytest_v2": parse_pytest_v2,
    "matplotlib": parse_matplotlib,
    "seaborn": parse_seaborn,
    "django": parse_django,
    "sympy": parse_sympy,
}
"""Parser by name; swebench's registry calls the same parser ``parse_log_<name>``."""


def get_parser(name: str) -> Parser:
    """Parser called ``name`` (``parse_log_`` prefix accepted); unknown names raise with the known list."""
    key = name.removeprefix("parse_log_")
    try:
        return PARSERS[key]
    except KeyError:
        raise KeyError(f"unknown log parser {name!r}; known: {', '.join(sorted(PARSERS))}") from None


_PYTEST_FAILED_MESSAGE = re.compile(r"^(?:FAILED|ERROR) (\S+) - (.*)$")
_UNITTEST_HEADER = re.compile(r"^(?:FAIL|ERROR): (\S+ \([^)\s]*\))\s*$")
_SYMPY_HEADER = re.compile(r"^_+ \S+\.py:(\S+) _+$")
_BLOCK_END = re.compile(r"^(?:={5,}|-{10,}|_{10,})")
_SEPARATOR = re.compile(r"^\s*(?:={10,}|-{10,}|_{10,})?[ \t]*$")
MAX_MESSAGES = 1000
"""Failure blocks read per log (hints are best effort; a flood of headers must not cost more)."""
MAX_BLOCK_LINES = 400
"""Lines of one failure block searched for its last line."""


def _last_line(lines: list[str], start: int) -> str:
    """Last non-blank line of the block starting at ``lines[start]`` (separator lines skipped, block ends at a rule)."""
    i = start
    while i < len(lines) and i - start < MAX_BLOCK_LINES and _SEPARATOR.match(lines[i][:MAX_LINE_CHARS]):
        i += 1
    last = ""
    for line in lines[i : i + MAX_BLOCK_LINES]:
        if _BLOCK_END.match(line):
            break
        last = line.strip() or last
    return last


def failure_messages(log: str) -> dict[str, str]:
    """``{test id: message}`` for hints (best effort): pytest's ``FAILED id - message`` summary lines, the last line
    of django/unittest ``FAIL: name (module.Class)`` tracebacks, the last line of sympy's ``___ path.py:name ___``
    failure blocks (keyed by the bare test name, as sympy's F2P lists are). Line by line, capped (agent text)."""
    out: dict[str, str] = {}
    blocks: dict[str, str] = {}
    lines = split_lines(log)
    for i, raw in enumerate(lines):
        line = raw[:MAX_LINE_CHARS]
        if line.lstrip().startswith(("FAILED ", "ERROR ")):
            if (m := _PYTEST_FAILED_MESSAGE.match(line.strip())) is not None:
                out[m.group(1)] = m.group(2).strip()
        elif len(blocks) < MAX_MESSAGES and line.startswith(("FAIL:", "ERROR:", "_")):
            m = _UNITTEST_HEADER.match(line) or _SYMPY_HEADER.match(line)
            if m is not None and m.group(1) not in blocks:
                blocks[m.group(1)] = _last_line(lines, i + 1)
    for test, message in blocks.items():
        out.setdefault(test, message)
    return out
