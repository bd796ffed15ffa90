"""Templated hints per error kind, and SDPO-style feedback from failing tests.

Channel 2 of Cursor's Composer 2.5 recipe: at an error site, a short hint is put into the context and the
hint-conditioned policy acts as the teacher. prime-rl's ``opsd`` algorithm prepends
``template.format(demonstration=trace.info["hint"])`` as a system message, so a hint is written as advice to the
agent ("you", imperative), one line per error, with no reference to the grader.
The test-feedback form follows SDPO (Hübotter et al. 2026, "Reinforcement Learning via Self-Distillation",
arXiv:2601.20802), restricted to grader-side facts: failing test ids and the lines of their own test files the failure
points at (``crf_prime.hints.evidence``), never the failure output itself, which the agent's code can write into.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from crf_prime.hints.detect import ToolSpec, condense
from crf_prime.hints.evidence import failure_evidence
from crf_prime.hints.models import KIND_ORDER, ErrorSite
from crf_prime.records.failing import FailingTest

MAX_TESTS = 3
"""Failing tests quoted in one hint (the rest are counted)."""
MAX_CHARS = 1500
"""Hard cap on a hint's length in characters (it is prepended to every scored branch)."""


def _signature(spec: ToolSpec) -> str:
    props: Mapping[str, Any] = spec.parameters.get("properties", {}) if spec.parameters else {}
    if not props:
        return ""
    required = set(spec.parameters.get("required", ()))
    fields = []
    for key, prop in props.items():
        typ = prop.get("type", "any") if isinstance(prop, Mapping) else "any"
        fields.append(f"{key}{'' if key in required else '?'}: {typ}")
    return "{" + ", ".join(fields) + "}"


def _line(site: ErrorSite, tools: Mapping[str, ToolSpec] | None) -> str:
    tool = f"`{site.tool}`" if site.tool else "the tool"
    match site.kind:
        case "unknown_tool":
            if tools:
                names = ", ".join(f"`{n}`" for n in sorted(tools))
                return f"Reminder: the available tools are {names}; {tool} is not one of them."
            return f"{tool} is not an available tool; call only the tools listed in the prompt."
        case "invalid_json" if site.tool is None:
            return (
                "Your tool call could not be parsed and was dropped: write each call as one JSON object with "
                "the tool's name and its arguments, inside the tool-call tags."
            )
        case "invalid_json":
            why = f" ({site.detail})" if site.detail else ""
            return f"Tool arguments must be one valid JSON object; your call to {tool} was not{why}."
        case "schema_violation":
            sig = _signature(tools[site.tool]) if tools and site.tool is not None and site.tool in tools else ""
            expects = f"{tool} expects {sig}" if sig else f"{tool} rejected its arguments"
            return f"{expects}; your call failed validation: {site.detail}."
        case "repeated_failure":
            return (
                f"You ran the same failing {tool} call {site.count} times ({site.arguments}); "
                "repeating it will not change the result: read the error and change something first."
            )
        case "traceback":
            return f"A {tool} run raised {site.detail}; fix that error before moving on."
        case "tool_error":
            return f"{tool} failed: {site.detail}"
        case "failing_test":  # pragma: no cover - rendered by feedback_lines
            return f"Test `{site.tool}` failed: {site.detail}"


def feedback_lines(
    failing_tests: Sequence[FailingTest], test_sources: Mapping[str, str] | None = None, max_tests: int = MAX_TESTS
) -> list[str]:
    """SDPO-style feedback from grader-side facts only: which tests failed and at which lines of their own test files
    (read from ``test_sources``, the grader's copies, never from the failure text), plus the grader's own notes.

    Parametrized cases of one test (``test_x[a]``, ``test_x[b]``) failing at the same lines are one line.
    """
    groups: dict[tuple[str, str, str], list[str]] = {}
    for test in failing_tests:
        where = failure_evidence(test.name, test.message, test_sources or {})
        groups.setdefault((test.name.split("[", 1)[0], where, test.note), []).append(test.name)
    lines = []
    for (base, where, note), names in list(groups.items())[:max_tests]:
        label = f"Test `{names[0]}`" if len(names) == 1 else f"Test `{base}` ({len(names)} parametrized cases)"
        line = f"{label} failed" + (f" at {where}" if where else "")
        lines.append(line + (f": {condense(note, 240)}" if note else "."))
    rest = sum(len(names) for names in list(groups.values())[max_tests:])
    if rest:
        lines.append(f"{rest} more test(s) failed.")
    return lines


def render_hint(
    sites: Sequence[ErrorSite],
    failing_tests: Sequence[FailingTest] = (),
    tools: Mapping[str, ToolSpec] | None = None,
    *,
    test_sources: Mapping[str, str] | None = None,
    max_chars: int = MAX_CHARS,
) -> str:
    """One hint for the episode: test feedback first, then one line per distinct tool-usage error (those come from
    the episode's own transcript, which the agent already saw)."""
    lines = feedback_lines(failing_tests, test_sources)
    seen: set[tuple[str, str | None]] = set()
    for kind in KIND_ORDER:
        for site in sites:
            if site.kind != kind or kind == "failing_test":
                continue
            # One line per (kind, tool): the first occurrence is the error site the hint targets.
            key = (site.kind, site.tool if site.kind != "unknown_tool" else None)
            if key in seen:
                continue
            seen.add(key)
            lines.append(_line(site, tools))
    hint = "\n".join(f"- {ln}" for ln in lines)
    return hint if len(hint) <= max_chars else hint[: max_chars - 1].rstrip() + "…"
