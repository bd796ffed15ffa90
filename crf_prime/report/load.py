"""Read the episodes of one arm from vf-eval or prime-rl outputs.

Row format: each line of ``traces.jsonl`` is a verifiers v1 ``Episode`` record (verifiers/v1/utils/trace_store.py,
``Episode.to_record()`` in prime-rl's monitors/file.py): ``task.key`` / ``task.hash`` identify the task and each
``traces[i].rewards`` maps a reward name to ``{"score", "weight"}`` (or null when scoring did not run).
Layouts:
- vf-eval: ``<results dir>/traces.jsonl``;
- prime-rl run dir: ``<output_dir>/<run>/rollouts/step_<N>/{train,eval}/{all,effective}/traces.jsonl``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from crf_prime.errors import InputError

_STEP = re.compile(r"^step_(\d+)$")


class ReportInputError(InputError):
    """A run directory or traces file that cannot be read; the message names the file (and line)."""


class Sample(BaseModel):
    """One scored rollout of one task."""

    model_config = ConfigDict(frozen=True)

    task: str
    """Task identity (``task.key``, else ``task.hash``, else the row's data as JSON)."""
    env: str = ""
    """``env.id`` of the episode (the taskset id, e.g. ``feature-deletion``)."""
    reward: float
    """Sum of weighted rewards of the episode's first trace (``Trace.reward``)."""


class ArmData(BaseModel):
    """What one arm contributes to the report."""

    name: str
    source: str
    """The traces.jsonl the samples come from."""
    samples: list[Sample]
    unscored: int = 0
    """Episodes left out because they failed before scoring (infrastructure errors are never counted as wrong)."""
    curve: list[tuple[int, float]] = []
    """(step, mean train reward) from a prime-rl run's train rollouts of the evaluated environment (other training
    sources of the run, e.g. trace-replay in A3, are left out); empty for vf-eval outputs."""


EPISODE_FORMAT = 'one JSON object a line: {"task": {"key": ...}, "traces": [{"rewards": {NAME: {"score": S}}}]}'
"""What a row must hold, said in the error a bad row gets (docs/cli.md, ``report``)."""


def _not_an_episode(row: object) -> str:
    """Why ``row`` is not an episode record, or ``""``."""
    if not isinstance(row, dict):
        return f"a {type(row).__name__}, not an object"
    if not isinstance(row.get("task"), dict):
        return "no `task` object"
    if not isinstance(row.get("traces", []), list):
        return "`traces` is not a list"
    return ""


def _task_id(task: dict) -> str:
    return task.get("key") or task.get("hash") or json.dumps(task.get("data", {}), sort_keys=True)


def _episode_reward(row: dict, reward_name: str | None) -> float | None:
    traces = row.get("traces") or []
    if not traces:
        return None
    rewards = traces[0].get("rewards") or {}
    if not rewards or any(r is None for r in rewards.values()):
        return None
    if reward_name is not None:
        r = rewards.get(reward_name)
        return None if r is None else float(r["score"])
    return sum(float(r["score"]) * float(r.get("weight", 1.0)) for r in rewards.values())


def read_traces(path: Path, reward_name: str | None = None) -> tuple[list[Sample], int]:
    """Scored samples and the count of unscored episodes in one traces.jsonl."""
    samples: list[Sample] = []
    unscored = 0
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ReportInputError(f"{path}:{lineno}: not JSON ({e})") from None
            problem = _not_an_episode(row)
            if problem:
                raise ReportInputError(f"{path}:{lineno}: not a verifiers episode record: {problem} ({EPISODE_FORMAT})")
            task = row["task"]
            try:
                reward = _episode_reward(row, reward_name)
            except (KeyError, TypeError, ValueError, AttributeError):
                raise ReportInputError(
                    f"{path}:{lineno}: traces[0].rewards must map a name to {{score, weight}} or null"
                ) from None
            if reward is None:
                unscored += 1
            else:
                env = (row.get("env") or {}).get("id", "")
                samples.append(Sample(task=_task_id(task), reward=reward, env=env))
    return samples, unscored


def _steps(run_dir: Path, kind: str) -> Iterator[tuple[int, Path]]:
    for step_dir in sorted((run_dir / "rollouts").glob("step_*")):
        m = _STEP.match(step_dir.name)
        path = step_dir / kind / "all" / "traces.jsonl"
        if m and path.is_file():
            yield int(m.group(1)), path


def load_arm(
    name: str, path: Path, *, step: int | None = None, reward_name: str | None = None, env: str | None = None
) -> ArmData:
    """One arm from a vf-eval results dir, a prime-rl run dir (eval rollouts of ``step``, default the last), or a
    traces.jsonl file; ``env`` keeps only episodes of that environment id (a run can evaluate several)."""
    curve: list[tuple[int, float]] = []
    run_dir = False
    if path.is_file():
        source = path
    elif (path / "traces.jsonl").is_file():
        source = path / "traces.jsonl"
    elif (path / "rollouts").is_dir():
        evals = dict(_steps(path, "eval"))
        if not evals:
            raise ReportInputError(f"{path}: prime-rl run dir without eval rollouts (rollouts/step_*/eval/all/)")
        if step is not None and step not in evals:
            raise ReportInputError(f"{path}: no eval rollouts at step {step} (have {sorted(evals)})")
        source = evals[step if step is not None else max(evals)]
        run_dir = True
    else:
        raise ReportInputError(f"{path}: neither a traces.jsonl, a vf-eval results dir nor a prime-rl run dir")
    samples, unscored = read_traces(source, reward_name)
    if env is not None:
        samples = [s for s in samples if s.env == env]
    if not samples:
        raise ReportInputError(f"{source}: no scored episodes" + (f" of environment {env!r}" if env else ""))
    if run_dir:
        eval_env = Counter(s.env for s in samples).most_common(1)[0][0]
        for s, train_path in _steps(path, "train"):
            rewards = [r.reward for r in read_traces(train_path, reward_name)[0] if r.env == eval_env]
            if rewards:
                curve.append((s, sum(rewards) / len(rewards)))
    return ArmData(name=name, source=str(source), samples=samples, unscored=unscored, curve=curve)
