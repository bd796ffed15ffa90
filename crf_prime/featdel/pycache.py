"""pytest's assertion-rewritten test modules, made once per base tree and test venv and copied into every grading tree.

pytest rewrites the ``assert`` statements of each test module it imports, and a grading run writes no bytecode, so
every run used to parse, rewrite and compile the task's test modules again: on toolz that is 0.8 s of a 2.2 s run.
One collection of the pristine base, with bytecode writing on, leaves pytest's own files
(``__pycache__/<module>.<tag>-pytest-<version>.pyc``); they are kept under ``cache_root()/pycs`` and copied beside the
protected test modules of each grading tree.

Correct by construction, not by trust in the cache: pytest checks each file against the source it sits beside (by
the source's hash in current pytest, by mtime and size in older ones, where base archives extract with mtime 0) and
rewrites any module it does not match, so a stale or foreign file costs time, never a verdict. Only files the grader
protects get one (they are hash-checked in every grading tree), and only while the test-file guard is on: a file holds
its test's code and literals, so the guard refuses it to the code under test exactly as it refuses the source
(crf_prime/featdel/hide_test_id.py). The replay box never gets them (its trees have no tests).

The project's own modules get the same at generation (:func:`source_entry`): compiled once per base, checked by
the hash of their source, linked into the trees of gold, its mutants and the snapshot, never into an agent's.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from crf_prime.featdel.models import FeatdelTask
from crf_prime.featdel.runner import pytest_env
from crf_prime.featdel.source import SourceError, cache_root, extract_archive
from crf_prime.featdel.testenv import TestEnv
from crf_prime.sandbox import Sandbox

logger = logging.getLogger(__name__)

MARKER = "-pytest-"
"""In the name of every file pytest writes for a rewritten module (``x.cpython-312-pytest-9.2.0.pyc``)."""


def cache_dir() -> Path:
    return cache_root() / "pycs"


def entry_key(task: FeatdelTask, env: TestEnv) -> str:
    """The entry of ``task``'s base tree, test settings and test venv."""
    parts = {
        "base": task.base_sha256,
        "python": str(env.python),
        "args": list(task.pytest_args),
        "pythonpath": list(task.pythonpath),
        "protected": sorted(task.protected_files.items()),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def protected_modules(task: FeatdelTask) -> list[str]:
    """The protected Python files (test modules, conftests): the ones that get pytest's rewritten file."""
    return sorted(p for p in task.protected_files if p.endswith(".py"))


def entry(task: FeatdelTask, base_archive: Path, *, sandbox: Sandbox, env: TestEnv) -> Path | None:
    """The directory of ``task``'s rewritten test modules (laid out as in the tree), made on first use; None when the
    collection that makes it fails (grading then runs as before)."""
    final = cache_dir() / entry_key(task, env)
    if final.is_dir():
        return final
    cache_dir().mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".tmp-", dir=cache_dir()))
    try:
        _collect(task, base_archive, work / "run", sandbox=sandbox, env=env)
        return _publish(work, work / "run" / "repo", protected_modules(task), lambda name: MARKER in name, final)
    except (OSError, SourceError) as e:
        logger.warning("featdel: no rewritten test modules for %s (%s); its test runs rewrite them", task.task_id, e)
        return None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _plain(name: str) -> bool:
    """A module's own compiled file, ``stem.tag.pyc``: neither pytest's rewritten one nor an optimisation level."""
    return MARKER not in name and name.count(".") == 2


def _publish(work: Path, repo: Path, modules: Iterable[str], wanted: Callable[[str], bool], final: Path) -> Path:
    """The compiled files ``wanted`` (by name) of ``modules`` in ``repo``, copied into a new entry under ``work`` and
    published at ``final``: atomically, as another process may have published the same entry meanwhile."""
    kept = work / "entry"
    kept.mkdir()
    for rel in modules:
        source = repo / rel
        for pyc in sorted((source.parent / "__pycache__").glob(f"{source.stem}.*.pyc")):
            if wanted(pyc.name):
                dest = kept / Path(rel).parent / "__pycache__" / pyc.name
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(pyc, dest)
    try:
        os.rename(kept, final)
    except OSError:
        if not final.is_dir():
            raise
    return final


def _collect(task: FeatdelTask, base_archive: Path, run_dir: Path, *, sandbox: Sandbox, env: TestEnv) -> None:
    """Collect the pristine base's suite in the box with bytecode writing on: pytest writes its rewritten modules."""
    repo = run_dir / "repo"
    extract_archive(base_archive, repo, task.base_sha256)
    argv = [str(env.python), "-s", "-P", "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--rootdir={repo}"]
    argv += [*task.pytest_args, "--collect-only", *protected_modules(task)]
    variables = {**pytest_env(repo, task.pythonpath), "PYTHONDONTWRITEBYTECODE": ""}  # empty: bytecode is written
    sandbox.run(argv, workdir=run_dir, cwd=repo, ro_binds=[env.venv], env=variables)


def install(source: Path | None, repo: Path, task: FeatdelTask) -> tuple[str, ...]:
    """Copy the entry at ``source`` into the grading tree ``repo`` beside the task's protected test modules; the
    copied paths (relative to ``repo``), for the test-file guard."""
    if source is None:
        return ()
    copied = []
    wanted = {(str(Path(rel).parent), Path(rel).stem) for rel in protected_modules(task)}
    for pyc in sorted(source.rglob(f"*{MARKER}*.pyc")):
        rel = pyc.relative_to(source)
        if pyc.parent.name != "__pycache__" or (str(rel.parent.parent), pyc.name.split(".", 1)[0]) not in wanted:
            continue
        dest = repo / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pyc, dest)
        copied.append(rel.as_posix())
    return tuple(copied)


def source_entry(
    base_archive: Path, base_sha256: str, sources: Iterable[str], *, sandbox: Sandbox, env: TestEnv
) -> Path | None:
    """Bytecode of the pristine base's project modules (``compileall --invalidation-mode checked-hash`` in the box,
    laid out as in the tree), made once per base and test venv; None when compiling fails (trees then compile their
    modules as before).

    For generation's trees only (gold, gold's mutants, the snapshot): each test run and each tree child of a
    mutation-testing box compiled the project's modules anew. A file holds the pristine code, gold's deleted bodies
    included, so no tree an agent's code runs in gets one. Python checks each file against the hash of the source
    beside it and compiles any source it does not match (a mutated or deleted file): a stale file costs time, never
    a verdict."""
    key = hashlib.sha256(json.dumps({"base": base_sha256, "python": str(env.python)}).encode()).hexdigest()[:32]
    final = cache_dir() / f"src-{key}"
    if final.is_dir():
        return final
    cache_dir().mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".tmp-", dir=cache_dir()))
    try:
        repo = work / "run" / "repo"
        extract_archive(base_archive, repo, base_sha256)
        modules = sorted(rel for rel in sources if rel.endswith(".py") and (repo / rel).is_file())
        argv = [str(env.python), "-s", "-m", "compileall", "-q", "--invalidation-mode", "checked-hash", *modules]
        sandbox.run(argv, workdir=work / "run", cwd=repo, ro_binds=[env.venv], env={"PYTHONDONTWRITEBYTECODE": ""})
        return _publish(work, repo, modules, _plain, final)
    except (OSError, SourceError) as e:
        logger.warning("featdel: no compiled modules for %s (%s); its trees compile them", base_archive.name, e)
        return None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def link_sources(source: Path | None, repo: Path) -> None:
    """Link the entry at ``source`` (:func:`source_entry`) into the replay tree ``repo``, beside each module the tree
    has (none for a module it lacks: a stripped test, a deleted file)."""
    if source is None:
        return
    for pyc in sorted(source.rglob("*.pyc")):
        rel = pyc.relative_to(source)
        if not (repo / rel.parent.parent / (pyc.name.split(".", 1)[0] + ".py")).is_file():
            continue
        dest = repo / rel
        dest.parent.mkdir(exist_ok=True)
        try:
            os.link(pyc, dest)
        except OSError:  # another file system
            shutil.copyfile(pyc, dest)


__all__ = ["cache_dir", "entry", "entry_key", "install", "link_sources", "protected_modules", "source_entry"]
