"""Each ``[[orchestrator.train|eval.source]]``: its env table validates against the taskset's and harness's own config
classes (verifiers narrows them by id), and the files it reads exist."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from crf_prime.check.models import Problem
from crf_prime.hints.models import HintTarget
from crf_prime.teachers.config import ConfigError, load_pool_config

INPUT_PATHS: dict[str, tuple[str, ...]] = {
    "feature-deletion": ("tasks",),
    "trace-replay": ("states", "journal"),
    "swebench-lite": ("repos_dir",),
}
"""Taskset id → fields of its config naming files or directories the env server reads at start (unset = skipped)."""

LOCAL_DATASET_SUFFIXES = (".json", ".jsonl", ".parquet")


def source_tables(config: dict[str, Any]) -> tuple[list[tuple[str, dict[str, Any]]], list[Problem]]:
    """``(key, table)`` of every train and eval source (key like ``orchestrator.train.source[1]``), and problems of
    source lists that are not lists of tables (e.g. a ``--orchestrator.train.source.…`` flag replaced one)."""
    tables: list[tuple[str, dict[str, Any]]] = []
    problems: list[Problem] = []
    for split in ("train", "eval"):
        key = f"orchestrator.{split}.source"
        sources = _table(_table(config.get("orchestrator")).get(split)).get("source", [])
        if not isinstance(sources, list):
            problems.append(Problem(key=key, message=f"must be a list of [[{key}]] tables (got {sources!r})"))
            continue
        for i, source in enumerate(sources):
            if isinstance(source, dict):
                tables.append((f"{key}[{i}]", source))
            else:
                problems.append(Problem(key=f"{key}[{i}]", message=f"must be a table (got {source!r})"))
    return tables, problems


def _table(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def check_sources(config: dict[str, Any], base_dir: Path) -> list[Problem]:
    """Problems of every source's env table and input files."""
    tables, problems = source_tables(config)
    for key, source in tables:
        env, env_problems = validate_env(f"{key}.env", _table(source.get("env")))
        problems += env_problems
        if env is not None:
            problems += check_inputs(f"{key}.env.taskset", env.taskset, base_dir)
    return problems


def validate_env(key: str, table: dict[str, Any]) -> tuple[Any, list[Problem]]:
    """The env table as verifiers' single-agent env config (taskset and harness narrowed by id), or its problems."""
    import verifiers.v1 as vf  # optional host (verifiers extra)

    try:
        return vf.SingleAgentEnvConfig.model_validate(table), []
    except ValidationError as e:
        return None, [
            Problem(key=".".join([key, *map(str, err["loc"])]), message=f"{err['msg']} (got {err['input']!r})")
            for err in e.errors()
        ]
    except (ModuleNotFoundError, ValueError, TypeError) as e:  # unknown taskset/harness id
        return None, [Problem(key=f"{key}.taskset.id", message=str(e))]


def check_inputs(key: str, taskset: Any, base_dir: Path) -> list[Problem]:
    """The taskset's input files exist (relative paths from the launch directory) and the hint writer's teachers."""
    problems = []
    for field in INPUT_PATHS.get(getattr(taskset, "id", ""), ()):
        value = getattr(taskset, field, None)
        if value is not None and not (base_dir / value).exists():
            problems.append(
                Problem(key=f"{key}.{field}", message=f"{value} does not exist (from {base_dir.resolve()})")
            )
    if getattr(taskset, "id", "") == "feature-deletion" and taskset.tasks is not None:
        tasks = base_dir / taskset.tasks
        if tasks.is_dir() and not (tasks / "tasks.jsonl").is_file():
            problems.append(Problem(key=f"{key}.tasks", message=f"{taskset.tasks} has no tasks.jsonl"))
    dataset = getattr(taskset, "dataset", None)
    if isinstance(dataset, str) and dataset.endswith(LOCAL_DATASET_SUFFIXES) and not (base_dir / dataset).is_file():
        problems.append(Problem(key=f"{key}.dataset", message=f"{dataset} does not exist"))
    writer = getattr(getattr(taskset, "task", None), "hint_writer", None)
    if writer is not None:
        problems += check_hint_writer(f"{key}.task.hint_writer", writer, base_dir)
    return problems


def check_hint_writer(key: str, writer: Any, base_dir: Path) -> list[Problem]:
    """The teachers file loads and names the writer."""

    path = base_dir / writer.teachers
    if not path.is_file():
        return [Problem(key=f"{key}.teachers", message=f"{writer.teachers} does not exist")]
    try:
        pool = load_pool_config(path)
    except (ConfigError, OSError, ValueError) as e:
        return [Problem(key=f"{key}.teachers", message=str(e))]
    names = [t.name for t in pool.teachers]
    if writer.name not in names:
        return [Problem(key=f"{key}.name", message=f"{writer.name!r} is not a teacher of {writer.teachers} ({names})")]
    return []


def hint_target_notes(config: dict[str, Any]) -> list[str]:
    """Train sources whose ``task.hint_target`` does not match their algorithm: an opsd source that distils whole
    episodes (clean ones under an empty hint), or another source that trains only error turns."""
    default_algo = (_table(_table(config.get("orchestrator")).get("algo"))).get("type", "grpo")
    tables, _ = source_tables(config)
    notes = []
    for key, source in tables:
        if not key.startswith("orchestrator.train."):
            continue
        task = _table(_table(_table(source.get("env")).get("taskset")).get("task"))
        target = task.get("hint_target", "episode")
        algo = _table(source.get("algo")).get("type", default_algo)
        field = f"{key}.env.taskset.task.hint_target"
        if target not in typing.get_args(HintTarget):  # not a value at all: the env validation reports it, once
            continue
        if algo == "opsd" and target != "error_turns":
            notes.append(
                f"{field}: {target!r} on an opsd source distils every turn, and episodes without an error site under "
                "an empty hint; 'error_turns' distils the error turns only (docs/running.md)"
            )
        elif algo != "opsd" and target == "error_turns":
            notes.append(f"{field}: 'error_turns' on a {algo} source trains only the turns that produced an error site")
    return notes
