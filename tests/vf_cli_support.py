"""The real verifiers v1 CLIs in end-to-end tests: ``vf-eval`` (one rollout, the model played by LoopbackOpenAI)
and ``vf-validate`` (a taskset's gold / no-op checks), each on a subprocess runtime; a non-zero exit fails the test
with the CLI's stderr, and what the CLI wrote under ``-o`` is read back.

Importable from every test directory: pytest puts ``tests/`` (the rootdir conftest's directory) on sys.path.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from packaging.version import Version

VF_BIN = Path(sys.executable).parent
"""Where the venv's verifiers entry points are."""


def v1_script(target: str) -> Path:
    """The console script verifiers installs for its v1 CLI ``target``: ``vf-eval`` / ``vf-validate`` in 0.4.0,
    ``eval`` / ``validate`` at the commit prime-rl pins (where ``vf-eval`` is the legacy CLI)."""
    entry_points = importlib.metadata.distribution("verifiers").entry_points
    (name,) = [ep.name for ep in entry_points if ep.group == "console_scripts" and ep.value == target]
    return VF_BIN / name


VF_EVAL = v1_script("verifiers.v1.cli.eval.main:main")
VALIDATE_HAS_NOOP = Version(importlib.metadata.version("verifiers")) >= Version("0.4.0")
"""verifiers 0.4.0's validate also scores the untouched task (the ``noop`` check); the commit prime-rl pins runs the
gold and setup checks only."""
VF_VALIDATE = v1_script("verifiers.v1.cli.validate:main")


def vf_eval(
    env_id: str,
    base_url: str,
    out: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float,
    examples: int = 1,
) -> Path:
    """``vf-eval ENV_ID -n EXAMPLES -m scripted`` against the OpenAI server at ``base_url`` (key in
    ``CRF_LOOPBACK_KEY``), extra ``args`` after the common ones, ``env`` over os.environ; returns the one
    ``traces.jsonl`` under ``out``."""
    cmd = [str(VF_EVAL), env_id, "-n", str(examples), "-m", "scripted", "--client.base-url", base_url]
    cmd += ["--client.api-key-var", "CRF_LOOPBACK_KEY", "--env.agent.runtime.type", "subprocess"]
    cmd += ["--no-push", "--no-rich", "-o", str(out), *args]
    full_env = {**os.environ, "CRF_LOOPBACK_KEY": "test", **(env or {})}
    proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (traces,) = out.glob("*/traces.jsonl")
    return traces


def only_episode(traces: Path) -> dict:
    """The single episode record of a ``-n 1`` run's traces.jsonl."""
    (line,) = traces.read_text().splitlines()
    return json.loads(line)


def traces_by_task(traces: Path) -> dict[str, dict]:
    """The trace records of a run's traces.jsonl (one rollout per example), keyed by their task's key."""
    records = [t for line in traces.read_text().splitlines() for t in json.loads(line)["traces"]]
    by_key = {t["task"]["key"]: t for t in records}
    assert len(by_key) == len(records), sorted(by_key)
    return by_key


def first_user_text(body: Mapping) -> str:
    """The text of the first user message of a chat-completion request body (the task's prompt)."""
    content = next(m for m in body["messages"] if m["role"] == "user")["content"]
    return content if isinstance(content, str) else "".join(part.get("text", "") for part in content)


def tool_messages(trace: dict) -> list[str]:
    """Contents of the tool-result messages of a trace record, in order."""
    return [n["message"]["content"] for n in trace["nodes"] if n["message"]["role"] == "tool"]


def vf_validate(env_id: str, out: Path, *args: str, timeout: float) -> tuple[dict, list[dict]]:
    """``vf-validate ENV_ID`` with extra ``args``; returns its summary.json and the rows of its results.jsonl."""
    cmd = [str(VF_VALIDATE), env_id, "--runtime.type", "subprocess", *args, "--no-rich", "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (summary_path,) = out.glob("*/summary.json")
    rows = [json.loads(line) for line in (summary_path.parent / "results.jsonl").read_text().splitlines()]
    return json.loads(summary_path.read_text()), rows
