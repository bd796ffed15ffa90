"""A step as the relay sees it: its files, checked and cut into blake3-hashed shards.

A prime-rl step is a directory (``model-0000k-of-0000n.safetensors`` + ``model.safetensors.index.json``, or
``adapter_model.safetensors`` + ``adapter_config.json`` with LoRA; ``save_state_dict_parallel`` in
``src/prime_rl/utils/weights.py``). The origin serves those files as they are (hard links, no archive, no copy)
and describes them by byte-range shards of ``shard_size`` bytes; every server that publishes the same bytes with
the same shard size advertises identical shards, so nodes can mix servers within one pull.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import struct
from pathlib import Path

from crf_prime.extras import require
from crf_prime.relay.layout import NCCL_READY, STABLE
from crf_prime.relay.manifest import FileEntry, RelayError, ShardEntry

blake3 = require("blake3", "relay")  # the relay extra

_MARKERS = frozenset({STABLE, NCCL_READY})


def checkpoint_files(step_path: Path) -> list[str]:
    """Relative POSIX paths of the files that make up a step, sorted; markers and hidden files left out."""
    found: list[str] = []
    for path in sorted(step_path.rglob("*")):
        rel = path.relative_to(step_path)
        if any(part.startswith(".") for part in rel.parts) or (len(rel.parts) == 1 and rel.name in _MARKERS):
            continue
        if path.is_symlink():
            raise RelayError(f"{path}: symlinks are not relayed")
        if path.is_file():
            found.append(rel.as_posix())
    return found


def check_safetensors(path: Path) -> None:
    """Raise unless the safetensors header parses and its tensors end exactly at the end of the file.

    Catches a truncated or half-written file before it is published, and again after a node assembled it (format:
    8-byte little-endian header length, JSON header with ``data_offsets`` relative to the end of the header, then
    the data).
    """
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise RelayError(f"{path}: not a safetensors file ({size} bytes)")
        (header_len,) = struct.unpack("<Q", head)
        if 8 + header_len > size:
            raise RelayError(f"{path}: safetensors header of {header_len} bytes does not fit in {size} bytes")
        try:
            header = json.loads(handle.read(header_len))
            end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
            raise RelayError(f"{path}: unreadable safetensors header: {e}") from e
    if 8 + header_len + end != size:
        raise RelayError(f"{path}: safetensors header describes {8 + header_len + end} bytes but the file has {size}")


def check_files(step_path: Path, files: list[str]) -> None:
    """Refuse a step without files or with a safetensors file whose header disagrees with its size."""
    if not files:
        raise RelayError(f"{step_path}: no checkpoint files to relay")
    for rel in files:
        if rel.endswith(".safetensors"):
            check_safetensors(step_path / rel)


def link_files(source: Path, dest: Path, files: list[str]) -> None:
    """Hard-link each file of ``source`` into the new directory ``dest`` (a copy across filesystems).

    The trainer writes every step into a fresh directory and only ever deletes old ones, so a link keeps serving
    the published bytes after prime-rl cleans the step up, at no cost in time or disk.
    """
    for rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source / rel, target)
        except OSError:  # another filesystem, or links not allowed
            shutil.copyfile(source / rel, target)


def shard_digest(data: bytes | memoryview) -> str:
    """blake3 hex digest of one shard, hashed on all cores."""
    return blake3.blake3(data, max_threads=blake3.blake3.AUTO).hexdigest()


def hash_shards(root: Path, files: list[str], shard_size: int) -> tuple[tuple[FileEntry, ...], tuple[ShardEntry, ...]]:
    """Sizes of ``files`` under ``root`` and their shards (``shard_size`` bytes each, the last of a file shorter).

    Reads each file once through ``mmap``; an empty file gets one empty shard so that it is still transferred.
    """
    entries: list[FileEntry] = []
    shards: list[ShardEntry] = []
    for rel in files:
        with open(root / rel, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            entries.append(FileEntry(path=rel, size=size))
            if size == 0:
                shards.append(_shard(len(shards), rel, 0, b""))
                continue
            with mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_READ) as view, memoryview(view) as mv:
                for offset in range(0, size, shard_size):
                    shards.append(_shard(len(shards), rel, offset, mv[offset : offset + shard_size]))
    return tuple(entries), tuple(shards)


def _shard(index: int, rel: str, offset: int, data: bytes | memoryview) -> ShardEntry:
    return ShardEntry(name=f"shard_{index + 1:05d}", path=rel, offset=offset, size=len(data), blake3=shard_digest(data))
