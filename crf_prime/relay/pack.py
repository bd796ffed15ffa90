"""One archive per step: pack a prime-rl ``step_<n>`` directory on the origin, unpack and verify it on a node.

shardcast distributes one file per version, while a step is a directory (``model-0000k-of-0000n.safetensors`` +
``model.safetensors.index.json``, or ``adapter_model.safetensors`` + ``adapter_config.json`` with LoRA; see
``save_state_dict_parallel`` in ``src/prime_rl/utils/weights.py``). An uncompressed tar with fixed metadata bridges
the two: every server that packs the same step produces the same bytes, so shards from different servers are
interchangeable. Weights do not compress, so no compression.
"""

from __future__ import annotations

import json
import os
import struct
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from crf_prime.extras import require
from crf_prime.relay.layout import NCCL_READY, STABLE
from crf_prime.relay.manifest import FileEntry, RelayError, StepManifest

blake3 = require("blake3", "shardcast")  # shardcast's checksum library; comes with the shardcast extra

_CHUNK = 4 << 20
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

    Catches a truncated or half-written file before it is published (format: 8-byte little-endian header length,
    JSON header with ``data_offsets`` relative to the end of the header, then the data).
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


class _HashingReader:
    """File wrapper that hashes what tarfile reads through it."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.hasher = blake3.blake3()
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.hasher.update(data)
        self.count += len(data)
        return data


def pack_step(step_path: Path, archive: Path) -> tuple[FileEntry, ...]:
    """Write the step's files into ``archive`` (deterministic tar) and return their sizes and blake3 digests.

    Each digest is computed from the very bytes written into the archive, so a file rewritten while being packed
    cannot yield a manifest that disagrees with the shards.
    """
    files = checkpoint_files(step_path)
    if not files:
        raise RelayError(f"{step_path}: no checkpoint files to relay")
    for rel in files:
        if rel.endswith(".safetensors"):
            check_safetensors(step_path / rel)
    entries: list[FileEntry] = []
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for rel in files:
            with open(step_path / rel, "rb") as handle:
                info = tarfile.TarInfo(rel)
                info.size = os.fstat(handle.fileno()).st_size
                info.mode, info.mtime, info.uid, info.gid, info.uname, info.gname = 0o644, 0, 0, 0, "", ""
                reader = _HashingReader(handle)
                try:
                    tar.addfile(info, reader)
                except OSError as e:
                    raise RelayError(f"{step_path / rel}: changed while being packed: {e}") from e
            entries.append(FileEntry(path=rel, size=info.size, blake3=reader.hasher.hexdigest()))
    return tuple(entries)


class _ShardChain:
    """Read a list of shard files as one stream (the archive), hashing every byte."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self.paths = list(paths)
        self.index = 0
        self.handle: BinaryIO | None = None
        self.hasher = blake3.blake3()
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        out = bytearray()
        while size < 0 or len(out) < size:
            if self.handle is None:
                if self.index >= len(self.paths):
                    break
                self.handle = open(self.paths[self.index], "rb")  # noqa: SIM115 - closed when exhausted
                self.index += 1
            data = self.handle.read(-1 if size < 0 else size - len(out))
            if not data:
                self.handle.close()
                self.handle = None
                continue
            out += data
        self.hasher.update(out)
        self.count += len(out)
        return bytes(out)

    def drain(self) -> None:
        while self.read(_CHUNK):
            pass

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


def _safe_relpath(name: str) -> PurePosixPath:
    rel = PurePosixPath(name)
    if rel.is_absolute() or not rel.parts or any(part in ("", ".", "..") for part in rel.parts) or "\\" in name:
        raise RelayError(f"archive member {name!r} is not a safe relative path")
    return rel


def assemble_step(
    shard_paths: Sequence[Path],
    manifest: StepManifest,
    dest: Path,
    on_bytes: Callable[[int], None] | None = None,
) -> None:
    """Extract the archive formed by ``shard_paths`` into the new directory ``dest``, verifying everything.

    Every member must be a regular file listed in the manifest, in order, with the listed size and blake3; the
    whole stream must match the archive size and blake3. Files are fsynced. On any mismatch this raises and the
    caller discards ``dest`` (it is a staging directory prime-rl never looks at).
    """
    dest.mkdir(parents=True)
    expected = list(manifest.files)
    chain = _ShardChain(shard_paths)
    try:
        with tarfile.open(fileobj=chain, mode="r|", bufsize=_CHUNK) as tar:  # type: ignore[call-overload]
            position = 0
            for member in tar:
                if position >= len(expected) or member.name != expected[position].path or not member.isreg():
                    raise RelayError(f"step {manifest.step}: unexpected archive member {member.name!r}")
                entry = expected[position]
                position += 1
                out_path = dest.joinpath(*_safe_relpath(member.name).parts)
                out_path.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                assert source is not None  # regular file
                hasher, written = blake3.blake3(), 0
                with open(out_path, "wb") as out:
                    while data := source.read(_CHUNK):
                        hasher.update(data)
                        out.write(data)
                        written += len(data)
                        if on_bytes is not None:
                            on_bytes(len(data))
                    out.flush()
                    os.fsync(out.fileno())
                if written != entry.size or hasher.hexdigest() != entry.blake3:
                    raise RelayError(f"step {manifest.step}: {entry.path} does not match its manifest checksum")
            if position != len(expected):
                raise RelayError(f"step {manifest.step}: archive ends before {expected[position].path}")
        chain.drain()
    except tarfile.TarError as e:
        raise RelayError(f"step {manifest.step}: corrupt archive: {e}") from e
    finally:
        chain.close()
    if chain.count != manifest.archive_size or chain.hasher.hexdigest() != manifest.archive_blake3:
        raise RelayError(f"step {manifest.step}: archive does not match its blake3 from the index")
