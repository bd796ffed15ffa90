"""What a relay server advertises: one :class:`StepManifest` per published step, listed in :class:`RelayIndex`.

shardcast's own ``distribution.txt`` carries one blake3 of the whole file per version and a shard count; the index
adds what a node needs to verify each shard on its own (and so resume shard by shard) and to verify each
checkpoint file after assembly.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

INDEX_NAME = "crf-relay.json"
"""File name of the index in a relay server's data directory (served next to shardcast's ``distribution.txt``)."""


class RelayError(RuntimeError):
    """A relay operation failed; the message names the step, file or server involved."""


class FileEntry(BaseModel):
    """One file of a checkpoint step."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    """Path relative to the step directory, POSIX separators."""
    size: int = Field(ge=0)
    """Size (in bytes)."""
    blake3: str
    """blake3 hex digest of the file's bytes (shardcast's checksum function)."""


class ShardEntry(BaseModel):
    """One shardcast shard of a step's archive."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^shard_\d{5,}\.bin$")
    """shardcast shard file name, e.g. ``shard_00001.bin``."""
    size: int = Field(ge=0)
    """Size (in bytes)."""
    blake3: str
    """blake3 hex digest of the shard's bytes."""


class StepManifest(BaseModel):
    """A published step: where its shards are and how to check them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step: int = Field(ge=0)
    """prime-rl step number (``step_<n>``)."""
    version: str = Field(pattern=r"^v\d+$")
    """shardcast version folder holding the shards on the server that wrote this manifest (``v1``, ``v2``, ...)."""
    archive_size: int = Field(ge=0)
    """Size (in bytes) of the uncompressed tar archive the shards concatenate to."""
    archive_blake3: str
    """blake3 of the whole archive; equals the checksum in shardcast's ``distribution.txt`` for ``version``."""
    shard_size: int = Field(gt=0)
    """Nominal shard size (in bytes); the last shard may be shorter."""
    shards: tuple[ShardEntry, ...]
    """Shards in archive order."""
    files: tuple[FileEntry, ...]
    """Checkpoint files in archive order (markers such as ``STABLE`` excluded)."""
    published_at: float
    """Unix time (in seconds) the server finished publishing the step."""

    @property
    def content_id(self) -> tuple[int, str, int]:
        """Identity of the step's shards, the same on every server that published it with the same shard size (the
        version name differs between servers)."""
        return (self.step, self.archive_blake3, self.shard_size)


class RelayIndex(BaseModel):
    """The steps a relay server currently serves, oldest first."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal[1] = 1
    """Index format version."""
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


def read_index(path: Path, source: str | None = None) -> RelayIndex:
    """Parse an index file; errors name ``source`` (a URL) or the path."""
    where = source or str(path)
    try:
        return RelayIndex.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError, ValidationError) as e:
        raise RelayError(f"invalid relay index from {where}: {e}") from e


def read_manifest(path: Path) -> StepManifest | None:
    """A staged manifest, or None when missing or unreadable (the staging is then discarded)."""
    try:
        return StepManifest.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValidationError):
        return None
