"""Packing, safetensors checks and verified assembly of one step archive (no network)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from relay_testkit import same_tree, write_checkpoint

from crf_prime.relay.layout import NCCL_READY, RELAY_DIR, local_stable_steps, parse_step
from crf_prime.relay.manifest import RelayError, ShardEntry, StepManifest
from crf_prime.relay.pack import assemble_step, check_safetensors, checkpoint_files, pack_step

pytestmark = pytest.mark.shardcast  # blake3 comes with shardcast


def _manifest(archive: Path, files, shard_paths: list[Path], step: int = 1) -> StepManifest:
    from shardcast.utils import compute_checksum

    return StepManifest(
        step=step,
        version="v1",
        archive_size=archive.stat().st_size,
        archive_blake3=compute_checksum(str(archive)),
        shard_size=1,
        shards=tuple(
            ShardEntry(name=p.name, size=p.stat().st_size, blake3=compute_checksum(str(p))) for p in shard_paths
        ),
        files=files,
        published_at=0.0,
    )


def _split(archive: Path, out: Path, size: int) -> list[Path]:
    out.mkdir()
    data = archive.read_bytes()
    paths = []
    for i in range(0, len(data), size):
        path = out / f"shard_{i // size + 1:05d}.bin"
        path.write_bytes(data[i : i + size])
        paths.append(path)
    return paths


def test_pack_is_deterministic_and_skips_markers(tmp_path: Path) -> None:
    step = write_checkpoint(tmp_path / "b" / "step_4", total_mb=1, n_files=2, seed=0)
    (step / NCCL_READY).touch()
    (step / ".hidden").write_text("x")
    assert checkpoint_files(step) == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ]
    files_a = pack_step(step, tmp_path / "a.tar")
    files_b = pack_step(step, tmp_path / "b.tar")
    assert files_a == files_b
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()


def test_truncated_safetensors_is_refused(tmp_path: Path) -> None:
    step = write_checkpoint(tmp_path / "step_1", total_mb=1, n_files=1, seed=1)
    target = step / "model-00001-of-00001.safetensors"
    check_safetensors(target)
    size = target.stat().st_size
    with open(target, "r+b") as handle:
        handle.truncate(size - 100)
    with pytest.raises(RelayError, match=f"describes {size} bytes but the file has {size - 100}"):
        check_safetensors(target)
    with pytest.raises(RelayError, match=re.escape("model-00001-of-00001.safetensors")):
        pack_step(step, tmp_path / "a.tar")


def test_assemble_roundtrip_and_tamper_detection(tmp_path: Path) -> None:
    step = write_checkpoint(tmp_path / "step_2", total_mb=2, n_files=2, seed=2)
    archive = tmp_path / "a.tar"
    files = pack_step(step, archive)
    shards = _split(archive, tmp_path / "shards", 300_000)
    manifest = _manifest(archive, files, shards, step=2)
    assemble_step(shards, manifest, tmp_path / "out")
    (tmp_path / "out" / "STABLE").touch()
    assert same_tree(step, tmp_path / "out")

    # a shard altered after the manifest was made: the file checksum catches it
    data = bytearray(shards[1].read_bytes())
    data[1000] ^= 0xFF
    shards[1].write_bytes(bytes(data))
    with pytest.raises(RelayError, match="does not match its manifest checksum"):
        assemble_step(shards, manifest, tmp_path / "out2")

    # a manifest listing a file the archive lacks
    missing = manifest.model_copy(update={"files": (*files, files[0].model_copy(update={"path": "extra.bin"}))})
    shards = _split(archive, tmp_path / "shards3", 300_000)
    with pytest.raises(RelayError, match=re.escape("archive ends before extra.bin")):
        assemble_step(shards, missing, tmp_path / "out3")


def test_layout_matches_prime_rl_glob(tmp_path: Path) -> None:
    bd = tmp_path / "broadcasts"
    write_checkpoint(bd / "step_3", total_mb=0.1, n_files=1, seed=3)
    (bd / "step_5").mkdir()  # being written: no STABLE
    (bd / RELAY_DIR / "staging" / "step_9").mkdir(parents=True)
    assert local_stable_steps(bd) == [3]
    assert parse_step("step_12") == 12 and parse_step("step_12.tmp") is None
    # prime-rl's get_all_ckpt_steps parses int(name.split("_")[-1]) for every step_* entry: ours must all parse
    assert sorted(int(p.name.split("_")[-1]) for p in bd.glob("step_*")) == [3, 5]
