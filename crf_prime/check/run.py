"""The check itself: compose, validate (prime-rl's RLConfig, our loss kwargs, every source), compute the mix."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_config import ConfigFileError

from crf_prime.check.compose import compose_args
from crf_prime.check.loss import check_loss
from crf_prime.check.mix import channel_mix
from crf_prime.check.models import CheckConfig, CheckReport, Problem
from crf_prime.check.prime_rl import absolute_files, import_rl_config, parse_rl_config, sources_of
from crf_prime.check.sources import check_sources, hint_target_notes, source_tables

DEFAULT_ALGO = "grpo"
"""prime-rl's default ``orchestrator.algo.type``."""


def check(args: Sequence[str], config: CheckConfig = CheckConfig()) -> CheckReport:
    """Everything ``uv run rl <args>`` would trip over before its first step, and the channel mix it would run.

    Raises :class:`~crf_prime.check.compose.ArgsError` when the arguments themselves cannot be read (a missing or
    malformed ``@`` file): there is no run to check, and the command line reports it like any bad input."""
    report = CheckReport()
    composed = compose_args(args, config.base_dir)  # ArgsError: bad input (exit 2, stderr), not a run problem
    validated = _check_rl_config(args, config, report)
    problems, notes = check_loss(composed)
    report.problems += problems
    report.notes += notes
    report.notes += hint_target_notes(composed)  # before check_sources: verifiers' validation rewrites env tables
    report.problems += check_sources(composed, config.base_dir)
    sources = sources_of(validated) if validated is not None else _raw_sources(composed, report)
    if sources:
        report.train = channel_mix(sources)
    tables, _ = source_tables(composed)
    orchestrator = composed.get("orchestrator", {})
    batch = validated.orchestrator.batch_size if validated is not None else orchestrator.get("batch_size")
    report.batch_size = _int_or_none(batch)
    report.eval = [t.get("name") or _taskset_id(t) for key, t in tables if key.startswith("orchestrator.eval.")]
    return report


def _check_rl_config(args: Sequence[str], config: CheckConfig, report: CheckReport) -> Any:
    if config.prime_rl == "skip":
        report.notes.append("prime-rl's RLConfig: skipped (--check.prime-rl skip)")
        return None
    try:
        rl_config = import_rl_config()
    except ImportError as e:
        message = f"prime-rl is not importable ({e}); install crf-prime into prime-rl's venv or set CRF_PRIME_RL_SRC"
        if config.prime_rl == "require":
            report.problems.append(Problem(key="prime-rl", message=message))
        else:
            report.notes.append(f"RLConfig not validated: {message}")
        return None

    try:
        validated = parse_rl_config(rl_config, absolute_files(args, config.base_dir))
    except ConfigFileError as e:
        report.rl_config = "failed"
        report.problems.append(Problem(key="RLConfig", message=str(e)))
        return None
    report.rl_config = "validated"
    return validated


def _raw_sources(composed: dict[str, Any], report: CheckReport) -> list[tuple[str, str, float, int]]:
    """Train sources of the composed dict with prime-rl's defaults (ratio 1, orchestrator's group_size and algo)."""
    orchestrator = composed.get("orchestrator", {})
    default_group = orchestrator.get("group_size", 1)
    default_algo = (orchestrator.get("algo") or {}).get("type", DEFAULT_ALGO)
    sources = []
    tables, _ = source_tables(composed)
    for key, source in tables:
        if not key.startswith("orchestrator.train."):
            continue
        ratio = _number(source.get("ratio", 1.0), float, f"{key}.ratio", report)
        group_size = _number(source.get("group_size", default_group), int, f"{key}.group_size", report)
        if ratio is None or group_size is None:
            return []
        algo = (source.get("algo") or {}).get("type", default_algo)
        sources.append((source.get("name") or _taskset_id(source), algo, ratio, group_size))
    return sources


def _number(value: Any, kind: type, key: str, report: CheckReport) -> Any:
    try:
        number = kind(value)
    except (TypeError, ValueError):
        report.problems.append(Problem(key=key, message=f"not a number (got {value!r})"))
        return None
    if number <= 0:
        report.problems.append(Problem(key=key, message=f"must be > 0 (got {value!r})"))
        return None
    return number


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _taskset_id(source: dict[str, Any]) -> str:
    env = source.get("env")
    taskset = env.get("taskset") if isinstance(env, dict) else None
    return str(taskset.get("id", "?")) if isinstance(taskset, dict) else "?"
