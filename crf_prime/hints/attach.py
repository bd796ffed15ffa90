"""The one call environments make after scoring: analyse the episode and store the hint in ``trace.info["hint"]``.

prime-rl's ``opsd`` algorithm reads ``trace.info[demo_key]`` and raises when it is missing, so the key is always
written, as an empty string when there is nothing to say. On the hint source (``target="error_turns"``) only the error
turns stay trainable, so an episode with nothing to say yields no sample at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from crf_prime.hints.detect import ToolSpec, detect_error_sites, episode_messages, episode_tools, tool_specs
from crf_prime.hints.evidence import failure_evidence
from crf_prime.hints.models import ErrorSite, HintTarget
from crf_prime.hints.target import error_turns, keep_turns
from crf_prime.hints.templates import MAX_CHARS, render_hint
from crf_prime.records.failing import FailingTest

HINT_KEY = "hint"
"""``trace.info`` key; configs/ladder sets ``demo_key = "hint"`` to match."""
SITES_KEY = "hint_sites"
"""``trace.info`` key holding the detected error sites (list of dicts) for analysis and the LLM writer."""
TURNS_KEY = "hint_turns"
"""``trace.info`` key holding the node indices of the turns left trainable (``hint_target = "error_turns"`` only)."""
MAX_STORED_SITES = 32
"""Error sites kept in ``trace.info`` (it rides along every rollout record); the hint itself uses all of them."""


def sites_record(sites: list[ErrorSite]) -> list[dict]:
    """The sites as stored on the trace: failing tests without their (long) messages, at most MAX_STORED_SITES."""
    return [s.model_dump(exclude={"detail"} if s.kind == "failing_test" else set()) for s in sites[:MAX_STORED_SITES]]


def analyse(
    trace: Any,
    *,
    failing_tests: Sequence[FailingTest] = (),
    tools: Sequence[str] | None = None,
    test_sources: Mapping[str, str] | None = None,
) -> list[ErrorSite]:
    """Error sites of an episode: tool-call errors, tracebacks, repeated failures, plus the failing tests (their
    detail: the test-file lines they point at, read from ``test_sources``; never the failure text)."""
    declared = episode_tools(trace)
    specs: dict[str, ToolSpec] | None
    if tools is not None:
        specs = tool_specs(tools, declared)
    else:
        specs = declared or None  # no declared tools: an unknown name cannot be told from a known one
    sites = detect_error_sites(episode_messages(trace), specs)
    sites += [
        ErrorSite(
            kind="failing_test", index=-1, tool=t.name, detail=failure_evidence(t.name, t.message, test_sources or {})
        )
        for t in failing_tests
    ]
    return sites


def build_hint(
    trace: Any,
    *,
    failing_tests: Sequence[FailingTest] = (),
    tools: Sequence[str] | None = None,
    test_sources: Mapping[str, str] | None = None,
    max_chars: int = MAX_CHARS,
) -> tuple[str, list[ErrorSite]]:
    """The templated hint for an episode and the error sites it was built from."""
    declared = episode_tools(trace)
    specs = tool_specs(tools, declared) if tools is not None else (declared or None)
    sites = analyse(trace, failing_tests=failing_tests, tools=tools, test_sources=test_sources)
    tool_sites = [s for s in sites if s.kind != "failing_test"]
    hint = render_hint(tool_sites, failing_tests, specs, test_sources=test_sources, max_chars=max_chars)
    return hint, sites


def attach_hint(
    trace: Any,
    *,
    failing_tests: Sequence[FailingTest] = (),
    tools: Sequence[str] | None = None,
    test_sources: Mapping[str, str] | None = None,
    max_chars: int = MAX_CHARS,
    target: HintTarget = "episode",
) -> str:
    """Write the episode's hint (possibly ``""``) into ``trace.info["hint"]`` and return it.

    ``trace`` is a verifiers v1 ``Trace`` (or a trace record dict); ``failing_tests`` are the tests that failed when the
    environment scored it; ``test_sources`` the grader's own text of the test files (path -> text), the only source
    of what the hint quotes about a failure; ``tools`` overrides the tool names the agent was offered (default:
    ``trace.tools``); ``target="error_turns"`` keeps only the error turns trainable (``crf_prime.hints.target``).
    """
    hint, sites = build_hint(
        trace, failing_tests=failing_tests, tools=tools, test_sources=test_sources, max_chars=max_chars
    )
    store_hint(trace, hint, sites, source="template", target=target)
    return hint


def trace_info(trace: Any) -> dict:
    """``trace.info`` of a ``Trace`` or a trace record dict (created on a record that has none)."""
    if not isinstance(trace, dict):
        return trace.info
    if trace.get("info") is None:
        trace["info"] = {}
    return trace["info"]


def store_hint(trace: Any, hint: str, sites: list[ErrorSite], *, source: str, target: HintTarget) -> None:
    """Record the hint, where it came from and its sites on the trace; with ``error_turns`` also narrow the trainable
    tokens to the error turns (``trace.info["hint_turns"]``: their node indices)."""
    info = trace_info(trace)
    info[HINT_KEY] = hint
    info["hint_source"] = source
    info[SITES_KEY] = sites_record(sites)
    if target == "error_turns":
        turns = error_turns(trace, sites)
        keep_turns(trace, turns)
        info[TURNS_KEY] = turns
