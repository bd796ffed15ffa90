"""A step's files, safetensors checks, per-shard hashing and the manifest's own consistency rules (no network)."""

from __future__ import annotations

import re
from pathlib import Path

import blake3
import pytest
from pydantic import ValidationError
from relay_testkit import write_checkpoint

from crf_prime.relay.layout import NCCL_READY, RELAY_DIR, local_stable_steps, parse_step
from crf_prime.relay.manifest import RelayError, StepManifest
from crf_prime.relay.pack import check_files, check_safetensors, checkpoint_files, hash_shards, link_files


def test_files_skip_markers_and_shards_tile_each_file(tmp_path: Path) -> None:
    step = write_checkpoint(tmp_path / "b" / "step_4", total_mb=1, n_files=2, seed=0)
    (step / NCCL_READY).touch()
    (step / ".hidden").write_text("x")
    (step / "empty.json").write_bytes(b"")
    files = checkpoint_files(step)
    assert files == [
        "empty.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ]
    entries, shards = hash_shards(step, files, 200_000)
    assert [(e.path, e.size) for e in entries] == [(f, (step / f).stat().st_size) for f in files]
    for shard in shards:
        data = (step / shard.path).read_bytes()[shard.offset : shard.offset + shard.size]
        assert len(data) == shard.size and blake3.blake3(data).hexdigest() == shard.blake3
    assert [s.name for s in shards] == [f"shard_{i:05d}" for i in range(1, len(shards) + 1)]
    assert [s.size for s in shards if s.path == "empty.json"] == [0]  # an empty file still travels
    manifest = StepManifest(step=4, version="v1", shard_size=200_000, files=entries, shards=shards, published_at=0)
    assert manifest.total_size == sum(e.size for e in entries)
    # the same bytes give the same shards (and so the same content id) wherever they are hashed
    link_files(step, tmp_path / "linked", files)
    assert hash_shards(tmp_path / "linked", files, 200_000) == (entries, shards)


def test_manifest_rejects_shards_that_do_not_tile_files(tmp_path: Path) -> None:
    step = write_checkpoint(tmp_path / "step_1", total_mb=1, n_files=1, seed=1)
    entries, shards = hash_shards(step, checkpoint_files(step), 300_000)
    good = {"step": 1, "version": "v1", "shard_size": 300_000, "files": entries, "published_at": 0}
    StepManifest(**good, shards=shards)
    with pytest.raises(ValidationError, match="does not continue"):
        StepManifest(**good, shards=(shards[0], *shards[2:]))  # a gap
    with pytest.raises(ValidationError, match="do not cover"):
        StepManifest(**good, shards=shards[:-1])  # the end of the last file is missing
    with pytest.raises(ValidationError, match="not a file of the step"):
        StepManifest(**good, shards=(*shards, shards[0].model_copy(update={"path": "other.bin"})))
    with pytest.raises(ValidationError, match="not a safe relative path"):
        StepManifest.model_validate(
            {**good, "files": [{"path": "../x", "size": 1}], "shards": [], "step": 1}, strict=False
        )


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
        check_files(step, checkpoint_files(step))
    with pytest.raises(RelayError, match="no checkpoint files"):
        check_files(step, [])


def test_layout_matches_prime_rl_glob(tmp_path: Path) -> None:
    bd = tmp_path / "broadcasts"
    write_checkpoint(bd / "step_3", total_mb=0.1, n_files=1, seed=3)
    (bd / "step_5").mkdir()  # being written: no STABLE
    (bd / RELAY_DIR / "staging" / "step_9").mkdir(parents=True)
    assert local_stable_steps(bd) == [3]
    assert parse_step("step_12") == 12 and parse_step("step_12.tmp") is None
    # prime-rl's get_all_ckpt_steps parses int(name.split("_")[-1]) for every step_* entry: ours must all parse
    assert sorted(int(p.name.split("_")[-1]) for p in bd.glob("step_*")) == [3, 5]
