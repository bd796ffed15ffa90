"""What a relay server advertises: one :class:`StepManifest` per published step, listed in :class:`RelayIndex`.

A step's files are cut into fixed-size shards (byte ranges of one file each), and every shard carries its blake3.
A node verifies each shard as it arrives, so it can fetch shards in parallel, from several servers, and resume
shard by shard; together the shards cover every byte of every file exactly once.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path, PurePosixPath
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from crf_prime.errors import InfraError

INDEX_NAME = "crf-relay.json"
"""File name of the index in a relay server's data directory (served at ``/crf-relay.json``)."""


class RelayError(InfraError):
    """A relay operation failed (a host, not the input); the message names the step, file or server involved."""


def safe_relpath(name: str) -> str:
    """``name`` if it is a plain relative POSIX path (no ``..``, no absolute path, no backslash), else ValueError."""
    rel = PurePosixPath(name)
    if not name or rel.is_absolute() or any(part in ("", ".", "..") for part in name.split("/")) or "\\" in name:
        raise ValueError(f"{name!r} is not a safe relative path")
    return name


RelPath = Annotated[str, AfterValidator(safe_relpath)]
"""A relative POSIX path that stays inside the step directory."""


class FileEntry(BaseModel):
    """One file of a checkpoint step."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: RelPath
    """Path relative to the step directory, POSIX separators."""
    size: int = Field(ge=0)
    """Size (in bytes)."""


class ShardEntry(BaseModel):
    """One shard: a byte range of one file, the unit of transfer, verification and resume."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^shard_\d{5,}$")
    """Shard name, ``shard_00001`` upwards in step order."""
    path: RelPath
    """File the shard belongs to (a :attr:`FileEntry.path`)."""
    offset: int = Field(ge=0)
    """Start of the shard in the file (in bytes)."""
    size: int = Field(ge=0)
    """Length (in bytes)."""
    blake3: str = Field(pattern=r"^[0-9a-f]{64}$")
    """blake3 hex digest of the shard's bytes."""


class StepManifest(BaseModel):
    """A published step: which files it has, where each shard lies, and how to check it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step: int = Field(ge=0)
    """prime-rl step number (``step_<n>``)."""
    version: str = Field(pattern=r"^v\d+$")
    """Folder holding the step's files on the server that wrote this manifest (``v1``, ``v2``, ...)."""
    shard_size: int = Field(gt=0)
    """Nominal shard size (in bytes); the last shard of each file may be shorter."""
    files: tuple[FileEntry, ...]
    """Checkpoint files (markers such as ``STABLE`` excluded), sorted by path."""
    shards: tuple[ShardEntry, ...]
    """Shards in file order, then offset order."""
    published_at: float
    """Unix time (in seconds) the server finished publishing the step."""

    @model_validator(mode="after")
    def _shards_tile_files(self) -> StepManifest:
        """Each file is covered by its shards exactly: contiguous from offset 0 to its size, none outside."""
        sizes = {f.path: f.size for f in self.files}
        if len(sizes) != len(self.files):
            raise ValueError("duplicate file paths")
        covered = dict.fromkeys(sizes, 0)
        names = set()
        for shard in self.shards:
            if shard.path not in covered:
                raise ValueError(f"{shard.name} belongs to {shard.path!r}, which is not a file of the step")
            if shard.offset != covered[shard.path] or (shard.size == 0 and sizes[shard.path] != 0):
                raise ValueError(f"{shard.name} does not continue {shard.path!r} at byte {covered[shard.path]}")
            covered[shard.path] += shard.size
            names.add(shard.name)
        if len(names) != len(self.shards):
            raise ValueError("duplicate shard names")
        short = [p for p, size in sizes.items() if covered[p] != size]
        if short:
            raise ValueError(f"shards do not cover {short[0]!r} exactly")
        return self

    @property
    def total_size(self) -> int:
        """Bytes in all files of the step."""
        return sum(f.size for f in self.files)

    @property
    def content_id(self) -> tuple[int, int, str]:
        """Identity of the step's shards, the same on every server that published the same bytes with the same
        shard size (the version folder and publish time differ between servers)."""
        digest = hashlib.sha256(
            json.dumps([[s.path, s.offset, s.size, s.blake3] for s in self.shards]).encode()
        ).hexdigest()
        return (self.step, self.shard_size, digest)


class RelayIndex(BaseModel):
    """The steps a relay server currently serves, oldest first."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal[2] = 2
    """Index format version (2: shards are byte ranges of the step's files)."""
    steps: tuple[StepManifest, ...] = ()
    """Published steps still served, ascending by step."""

    def newest(self) -> StepManifest | None:
        return self.steps[-1] if self.steps else None

    def get(self, step: int) -> StepManifest | None:
        return next((m for m in self.steps if m.step == step), None)


def write_model_atomic(path: Path, model: BaseModel) -> None:
    """Write ``model`` as JSON to ``path`` through a temp file in the same directory and one rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(model.model_dump_json(indent=1))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def parse_index(data: bytes | str, source: str) -> RelayIndex:
    """Parse an index; errors name ``source`` (a URL or a path)."""
    try:
        return RelayIndex.model_validate(json.loads(data))
    except (ValueError, ValidationError) as e:
        raise RelayError(f"invalid relay index from {source}: {e}") from e


def read_index(path: Path, source: str | None = None) -> RelayIndex:
    """Parse an index file; errors name ``source`` (a URL) or the path."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise RelayError(f"invalid relay index from {source or path}: {e}") from e
    return parse_index(data, source or str(path))


def read_manifest(path: Path) -> StepManifest | None:
    """A staged manifest, or None when missing or unreadable (the staging is then discarded)."""
    try:
        return StepManifest.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValidationError):
        return None
