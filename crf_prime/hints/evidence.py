"""Grader-side facts about a failing test: its id and the lines of its own test files that the failure points at.

A hint is privileged context (the teacher sees it, the student is distilled towards it), so it must never carry text
the agent's code produced while it was graded: its exception messages and its output can hold data read from the
hidden tests at run time. The failure text of a grading run mixes both (pytest prints the test's source lines, then
the agent's exception message), so it is never quoted. It is only read for ``path:line`` locations; each location in
a test file the grader holds selects that line **from the grader's own copy** of the file. Whatever the agent's code
prints, at most it picks other lines of the test files, which the hint may quote anyway.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

MAX_LOCATIONS = 2
"""Test-file lines quoted per failing test (the deepest ones: nearest to the failure)."""
MAX_SCANNED = 20_000
"""Characters of a failure text searched for locations (the text is the agent's to lengthen)."""
MAX_LINE = 200
"""Characters of one quoted test-file line."""

# pytest's ``path:line: ...`` (long/short tracebacks, the junit text) and CPython's ``File "path", line N``
_LOCATION = re.compile(r'(?m)^\s*(?:File "([^"\n]{1,500})", line (\d{1,7})|([^\s:"][^:\n]{0,500}?\.py):(\d{1,7}):)')


def _resolve(path: str, test_sources: Mapping[str, str]) -> str | None:
    """The key of ``test_sources`` a printed path names (relative, or absolute inside the grading tree)."""
    path = path.strip().replace("\\", "/")
    if path in test_sources:
        return path
    return next((rel for rel in test_sources if path.endswith("/" + rel)), None)


def located_lines(message: str, test_sources: Mapping[str, str]) -> list[tuple[str, int, str]]:
    """``(path, line, text)`` for the test-file locations in ``message``, text read from ``test_sources`` only;
    deepest last, at most :data:`MAX_LOCATIONS`, each location once."""
    found: list[tuple[str, int, str]] = []
    for m in _LOCATION.finditer(message[:MAX_SCANNED]):
        path, number = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        rel = _resolve(path, test_sources)
        if rel is None:
            continue
        lines = test_sources[rel].splitlines()
        n = int(number)
        if not 1 <= n <= len(lines) or not lines[n - 1].strip():
            continue
        entry = (rel, n, " ".join(lines[n - 1].split())[:MAX_LINE])
        if entry in found:
            found.remove(entry)
        found.append(entry)
    return found[-MAX_LOCATIONS:]


def test_body_assert(name: str, test_sources: Mapping[str, str]) -> tuple[str, int, str] | None:
    """``(path, line, text)`` of the first ``assert`` in the body of the test ``name`` names (``path::[Class::]func``),
    read from ``test_sources``; None when the grader holds no such function or it asserts nothing."""
    path, _, rest = name.partition("::")
    rel = _resolve(path, test_sources) if rest else None
    if rel is None:
        return None
    func = rest.split("::")[-1].split("[", 1)[0]
    lines = test_sources[rel].splitlines()
    header = re.compile(rf"^(\s*)(?:async\s+)?def\s+{re.escape(func)}\s*\(")
    for i, line in enumerate(lines):
        m = header.match(line)
        if m is None:
            continue
        indent = len(m.group(1))
        for j in range(i + 1, len(lines)):
            body = lines[j]
            if body.strip() and len(body) - len(body.lstrip()) <= indent:
                break
            if body.strip().startswith("assert"):
                return rel, j + 1, " ".join(body.split())[:MAX_LINE]
    return None


def failure_evidence(name: str, message: str, test_sources: Mapping[str, str]) -> str:
    """What a hint may say about one failing test beyond its id: the test-file lines the failure points at
    (``tests/test_a.py:12: `assert inc(1) == 2` ``), else the first assertion of the test's own body, or '' when the
    grader holds neither."""
    found = located_lines(message, test_sources)
    if not found and (first := test_body_assert(name, test_sources)) is not None:
        found = [first]
    return "; ".join(f"{rel}:{n}: `{text}`" for rel, n, text in found)


_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def patch_new_lines(patch: str) -> dict[str, str]:
    """Test-file texts a grader-owned unified diff reveals (e.g. SWE-bench's ``test_patch``): per ``b/`` path, the
    new side's context and added lines at their line numbers, every other line blank (blank lines are never quoted)."""
    out: dict[str, dict[int, str]] = {}
    lines: dict[int, str] = {}
    number = old_left = new_left = 0
    for raw in patch.splitlines():
        if old_left > 0 or new_left > 0:  # inside a hunk: its header's counts say which lines belong to it
            tag, text = raw[:1], raw[1:]
            if tag in (" ", "+"):
                lines[number] = text
                number, new_left = number + 1, new_left - 1
            if tag in (" ", "-"):
                old_left -= 1
        elif raw.startswith("+++ "):
            path = raw[4:].split("\t", 1)[0].strip()
            lines = {} if path == "/dev/null" else out.setdefault(path.removeprefix("b/"), {})
        elif (m := _HUNK.match(raw)) is not None:
            old_left, number, new_left = int(m.group(1) or 1), int(m.group(2)), int(m.group(3) or 1)
    return {path: "\n".join(got.get(i, "") for i in range(1, max(got, default=0) + 1)) for path, got in out.items()}
