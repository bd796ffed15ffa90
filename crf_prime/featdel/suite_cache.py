"""Suite results cached per source: the setup loop's result and the coverage baseline, read back on a second
generation of the same package (the test suite's shared sets, a resumed or repeated corpus run).

Both are functions of the project tree (its sdist's sha256), the test venv's pins, the pytest arguments, the sandbox
settings, the Python version and the crf-prime code that runs the suite: the key hashes all of them, so an entry is
never stale and nothing expires by time. Entries live in ``cache_root()/suites/<kind>-<key>.json``, written
atomically; one that cannot be read back (torn, edited, an older layout) is ignored with a warning and rebuilt.
Only results that let generation go on are stored: a refused package runs its suite again next time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import platform
import threading
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

import crf_prime
from crf_prime.featdel.source import cache_root

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

CODE_MODULES = (
    "baseline",
    "discovery",
    "hide_test_id",
    "hypothesis_profile",
    "runner",
    "source",
    "suite_cache",
    "suite_setup",
    "testenv",
    "testreqs",
)
"""``crf_prime.featdel`` modules whose code decides a suite run's result (how the venv is built, the tree copied,
pytest started, its report and the coverage data read, the setup loop's steps): their source is part of the key."""


class CachedBaseline(BaseModel):
    """A passing coverage run of the whole suite: what :class:`crf_prime.featdel.baseline.Baseline` needs of it."""

    model_config = ConfigDict(frozen=True)

    pytest_args: tuple[str, ...]
    """The arguments the suite passed with (the project's ``addopts`` may have been switched off)."""
    suite_tests: int
    """Test outcomes in the run's junit report."""
    tests: tuple[str, ...]
    """Node ids (coverage contexts), sorted; ``coverage`` refers to them by index."""
    coverage: dict[str, dict[int, tuple[int, ...]]]
    """Source path -> line -> indices into ``tests`` of the tests executing it."""
    collection: dict[str, tuple[int, ...]]
    """Source path -> lines executed outside every test (collection, session set-up and teardown)."""

    @classmethod
    def of(
        cls,
        pytest_args: tuple[str, ...],
        suite_tests: int,
        coverage: dict[str, dict[int, set[str]]],
        collection: dict[str, set[int]],
    ) -> CachedBaseline:
        tests = tuple(sorted({t for lines in coverage.values() for ids in lines.values() for t in ids}))
        index = {t: i for i, t in enumerate(tests)}
        packed = {
            path: {ln: tuple(sorted(index[t] for t in ids)) for ln, ids in sorted(lines.items())}
            for path, lines in sorted(coverage.items())
        }
        outside = {path: tuple(sorted(lines)) for path, lines in sorted(collection.items())}
        return cls(pytest_args=pytest_args, suite_tests=suite_tests, tests=tests, coverage=packed, collection=outside)

    def coverage_map(self) -> dict[str, dict[int, set[str]]]:
        return {
            path: {ln: {self.tests[i] for i in ids} for ln, ids in lines.items()}
            for path, lines in self.coverage.items()
        }

    def collection_map(self) -> dict[str, set[int]]:
        return {path: set(lines) for path, lines in self.collection.items()}


@functools.cache
def code_version() -> str:
    """crf-prime's version and the source of :data:`CODE_MODULES` (so a changed runner never reads old results)."""
    h = hashlib.sha256(crf_prime.__version__.encode())
    here = Path(__file__).resolve().parent
    for name in CODE_MODULES:
        h.update(name.encode() + b"\0" + (here / f"{name}.py").read_bytes())
    return h.hexdigest()


def key(kind: str, parts: dict) -> str:
    """The entry name for ``parts`` (JSON-able: source sha256, pins, arguments, sandbox settings)."""
    full = {"kind": kind, "code": code_version(), "python": platform.python_version(), **parts}
    text = json.dumps(full, sort_keys=True, default=_plain)
    return f"{kind}-{hashlib.sha256(text.encode()).hexdigest()[:32]}"


def _plain(value: object) -> object:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else str(value)


def cache_dir() -> Path:
    """Where the entries are: ``cache_root()/suites``."""
    return cache_root() / "suites"


def _path(name: str) -> Path:
    return cache_dir() / f"{name}.json"


def load(name: str, model: type[M]) -> M | None:
    """The entry ``name`` or None; an unreadable entry is removed with a warning (it is rebuilt by the caller)."""
    path = _path(name)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return model.model_validate_json(text)
    except (ValidationError, ValueError) as e:
        logger.warning("featdel: ignoring the corrupt suite cache entry %s (%s); running the suite again", path, e)
        path.unlink(missing_ok=True)
        return None


def store(name: str, value: BaseModel) -> None:
    """Write the entry atomically (concurrent generations of one package write the same bytes)."""
    path = _path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(value.model_dump_json())
    tmp.replace(path)


__all__ = ["CODE_MODULES", "CachedBaseline", "cache_dir", "code_version", "key", "load", "store"]
