"""Shared helpers for the featdel tests: real PyPI sources generated once per test run, agent-tree editing.

Downloads and venvs go under the run's cache (``$CRF_PRIME_CACHE``: tests/conftest.py points it into the run
directory unless the developer set it, to reuse downloads across runs) and generated task directories under the run
directory (``$CRF_TEST_RUN_DIR``), both shared by the xdist workers: the first worker to ask generates, under a file
lock, and the others read its task directory back.
"""

from __future__ import annotations

import ast
import atexit
import fcntl
import functools
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from crf_prime.featdel import baseline, suite_cache
from crf_prime.featdel.generate import GenerateConfig, generate, load_tasks
from crf_prime.featdel.grade import materialise
from crf_prime.featdel.models import FeatdelTask, GenerateSummary

# pinned real sources whose own test suites pass with only pytest installed beside the sdist
INFLECTION = "pypi:inflection==0.5.1"
TOOLZ = "pypi:toolz==1.2.0"

if not os.environ.get("CRF_TEST_RUN_DIR"):  # imported outside a pytest run that tests/conftest.py configured
    _run = tempfile.mkdtemp(prefix="crf-test-run-")
    os.environ["CRF_TEST_RUN_DIR"] = _run
    os.environ.setdefault("CRF_PRIME_CACHE", os.path.join(_run, "cache"))
    atexit.register(shutil.rmtree, _run, True)

_OUT = Path(os.environ["CRF_TEST_RUN_DIR"]) / "generated"


def generated(source: str, max_tasks: int = 3, seed: int = 0) -> tuple[Path, tuple[FeatdelTask, ...], GenerateSummary]:
    """Generate (once per session, however the arguments are spelled) and return (task dir, tasks, summary)."""
    return _generated(source, max_tasks, seed)


def generated_once(name: str, generate_into: Callable[[Path], object]) -> Path:
    """The run directory's ``generated/<name>``: the first worker to ask runs ``generate_into(out)`` (a
    :func:`generate` call, which publishes the directory whole), under a file lock the others wait on."""
    out = _OUT / name
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "summary.json").is_file():
            generate_into(out)
    return out


COLD_SETS = frozenset({(INFLECTION, 2, 0)})
"""Shared sets generated from an empty suite cache of their own, kept beside the set with the number of coverage
baselines that run made (:func:`cold_suite_cache`): test_featdel_generate checks a cold and a warm generation
against the set instead of generating it twice more."""


def cold_suite_cache(source: str, max_tasks: int, seed: int) -> tuple[Path, int]:
    """For a set of :data:`COLD_SETS`: (the suite cache its generation filled, starting empty; the coverage
    baselines it ran)."""
    assert (source, max_tasks, seed) in COLD_SETS, "only the COLD_SETS are generated from an empty suite cache"
    out = _generated(source, max_tasks, seed)[0]
    return out.with_name(f"{out.name}.suites"), json.loads(out.with_name(f"{out.name}.baseline-runs").read_text())


def _generate_cold(cfg: GenerateConfig) -> tuple[list[FeatdelTask], GenerateSummary]:
    """``generate(cfg)`` from an empty suite cache beside ``cfg.out``, counting the coverage baselines it runs."""
    suites = cfg.out.with_name(f"{cfg.out.name}.suites")
    runs: list[bool] = []
    real = baseline.run_pytest
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(suite_cache, "cache_dir", lambda: suites)
        mp.setattr(baseline, "run_pytest", lambda *a, **k: runs.append(True) or real(*a, **k))
        result = generate(cfg)
    cfg.out.with_name(f"{cfg.out.name}.baseline-runs").write_text(json.dumps(len(runs)))
    return result


@functools.cache
def _generated(source: str, max_tasks: int, seed: int) -> tuple[Path, tuple[FeatdelTask, ...], GenerateSummary]:
    name = source.split(":", 1)[1].replace("==", "-")
    out = _OUT / f"{name}-n{max_tasks}-s{seed}"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker generating the same set: wait for it, then read it
        if (out / "summary.json").is_file():  # generate publishes the directory whole (staging, then rename)
            summary = GenerateSummary.model_validate_json((out / "summary.json").read_text())
            return out, tuple(load_tasks(out)), summary
        cfg = GenerateConfig(source=source, out=out, max_tasks=max_tasks, seed=seed)
        tasks, summary = (_generate_cold if (source, max_tasks, seed) in COLD_SETS else generate)(cfg)
    return out, tuple(tasks), summary


def generated_in_private_tmp(
    source: str, max_tasks: int, seed: int
) -> tuple[Path, tuple[FeatdelTask, ...], dict[str, list[str]]]:
    """Like :func:`generated`, for a set whose generation ran with a private ``$TMPDIR``: also returns what it saw
    there, ``{"made": [names of the temporary trees made in it], "left": [crf-featdel-* names left after]}``.

    One generation serves the tests that read its tasks and the one that checks it cleans up after itself."""
    name = f"{source.split(':', 1)[1].replace('==', '-')}-n{max_tasks}-s{seed}-tmp"
    seen = _OUT / f"{name}.tmp-seen.json"

    def generate_watched(out: Path) -> None:
        tmpdir = _OUT.parent / f"tmp-{name}"  # not under generated/: generation hides the output's parent from its box
        tmpdir.mkdir()
        made: list[str] = []
        real_mkdtemp = tempfile.mkdtemp

        def recording_mkdtemp(*args, **kwargs) -> str:
            path = real_mkdtemp(*args, **kwargs)
            made.append(path)
            return path

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(tempfile, "tempdir", str(tmpdir))
            mp.setattr(tempfile, "mkdtemp", recording_mkdtemp)
            generate(GenerateConfig(source=source, out=out, max_tasks=max_tasks, seed=seed))
        left = sorted(p.name for p in tmpdir.iterdir() if p.name.startswith("crf-featdel-"))
        names = sorted(Path(p).name for p in made if Path(p).parent == tmpdir)
        seen.write_text(json.dumps({"made": names, "left": left}))  # tmpdir stays: the sandbox keeps what it made there

    out = generated_once(name, generate_watched)
    return out, tuple(load_tasks(out)), json.loads(seen.read_text())


def agent_tree(task: FeatdelTask, task_dir: Path, dest: Path) -> Path:
    """The snapshot the agent starts from (hidden tests removed)."""
    materialise(task, task_dir, dest, hidden=False)
    return dest


def set_body(tree: Path, task: FeatdelTask, code: str, target: int = 0) -> Path:
    """Replace the ``raise NotImplementedError`` body of one target with ``code`` (dedented lines)."""
    t = task.targets[target]
    path = tree / t.path
    src = path.read_text()
    mod = ast.parse(src)
    fn = next(
        n
        for n in ast.walk(mod)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == t.qualname.rsplit(".", 1)[-1]
    )
    stub = fn.body[-1]
    lines = src.splitlines(keepends=True)
    line = lines[stub.lineno - 1]
    indent = " " * (fn.col_offset + 4)
    body = "".join(indent + ln + "\n" if ln.strip() else "\n" for ln in code.strip("\n").splitlines())
    assert line.strip() == "raise NotImplementedError", line
    lines[stub.lineno - 1] = body
    path.write_text("".join(lines))
    return path


def forward_call(task: FeatdelTask, target: int = 0, callee: str = "orig") -> str:
    """Source of a call forwarding the target's parameters to ``callee`` (for hack bodies)."""
    t = task.targets[target]
    src = task.broken_files[t.path]
    fn = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef) and n.name == t.qualname)
    a = fn.args
    parts = [p.arg for p in a.posonlyargs + a.args]
    if a.vararg:
        parts.append("*" + a.vararg.arg)
    parts += [f"{k.arg}={k.arg}" for k in a.kwonlyargs]
    if a.kwarg:
        parts.append("**" + a.kwarg.arg)
    return f"{callee}({', '.join(parts)})"
