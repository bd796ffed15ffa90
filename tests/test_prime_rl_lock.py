"""Opt-in (CRF_PRIME_RL_SRC): every requirement crf-prime declares — its dependencies, every extra, and the
environments' — that names a package prime-rl's ``uv.lock`` pins admits the pinned version, so installing crf-prime
with any extra into prime-rl's venv replaces none of prime-rl's packages. Reads two TOML files (no install);
``scripts/lock_venv.sh`` (tests/configs/test_configs_lock_venv.py) is the slow proof by a real install.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.prime_rl


def declared() -> Iterator[tuple[str, Requirement]]:
    """(where, requirement) for each requirement of our pyproject.toml and the environments' pyproject.toml files."""
    for path in [REPO / "pyproject.toml", *sorted((REPO / "environments").glob("*/pyproject.toml"))]:
        project = tomllib.loads(path.read_text())["project"]
        where = path.relative_to(REPO)
        for line in project.get("dependencies", []):
            yield f"{where} dependencies", Requirement(line)
        for extra, lines in project.get("optional-dependencies", {}).items():
            for line in lines:
                yield f"{where} [{extra}]", Requirement(line)


def locked_versions(lock: Path) -> dict[str, list[Version]]:
    """Package -> the versions the lock pins. Workspace and editable members (verifiers, renderers, ...) carry no
    version in the lock: their version is the checkout's, so they are absent here."""
    versions: dict[str, list[Version]] = {}
    for package in tomllib.loads(lock.read_text())["package"]:
        if "version" in package and "editable" not in package.get("source", {}):
            versions.setdefault(canonicalize_name(package["name"]), []).append(Version(package["version"]))
    return versions


def violations(requirements: list[tuple[str, Requirement]], locked: dict[str, list[Version]]) -> list[str]:
    """One line per requirement that excludes a version the lock pins."""
    found = []
    for where, req in requirements:
        for version in locked.get(canonicalize_name(req.name), []):
            if not req.specifier.contains(version, prereleases=True):
                found.append(f"{where}: {req} excludes {req.name}=={version}, which prime-rl's uv.lock pins")
    return found


@pytest.fixture(scope="module")
def locked() -> dict[str, list[Version]]:
    return locked_versions(Path(os.environ["CRF_PRIME_RL_SRC"]) / "uv.lock")


def test_every_requirement_admits_the_version_prime_rl_locks(locked: dict[str, list[Version]]) -> None:
    requirements = list(declared())
    assert violations(requirements, locked) == []
    checked = {canonicalize_name(req.name) for _, req in requirements} & set(locked)
    # the extras' packages are checked too, not only the dependencies (swebench: the extra that once excluded 4.1.0)
    assert {"torch", "pydantic", "openai", "swebench", "datasets", "blake3", "matplotlib", "pytest"} <= checked


def test_a_requirement_that_excludes_the_locked_version_is_reported(locked: dict[str, list[Version]]) -> None:
    (pinned,) = locked["swebench"]
    too_new = [("pyproject.toml [swebench]", Requirement(f"swebench>{pinned}"))]
    assert violations(too_new, locked) == [
        f"pyproject.toml [swebench]: swebench>{pinned} excludes swebench=={pinned}, which prime-rl's uv.lock pins"
    ]
