"""Faults on loopback: a server killed mid-transfer, corrupted and truncated shards, a client killed mid-download
or before its flush to disk, a power loss before the flush.

Each case ends with the correct checkpoint or none at all: prime-rl's ``step_*`` glob never sees a partial step.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from relay_testkit import REPO, ServerProcess, same_tree, staged_shards, visible_steps, write_checkpoint

from crf_prime.relay.config import PullConfig
from crf_prime.relay.layout import RELAY_DIR
from crf_prime.relay.manifest import RelayError, ShardEntry
from crf_prime.relay.node import UNFLUSHED, RelayNode, across_files, boot_id
from crf_prime.relay.origin import RelayOrigin

SHARD_MB = 1.0


@pytest.fixture
def origin_dir(tmp_path: Path) -> Path:
    broadcasts = tmp_path / "trainer" / "broadcasts"
    write_checkpoint(broadcasts / "step_7", total_mb=12, n_files=3, seed=7)
    return broadcasts


def test_server_killed_mid_transfer_then_failover_resumes(tmp_path: Path, origin_dir: Path) -> None:
    server = ServerProcess(origin_dir, tmp_path / "data-a", tmp_path, SHARD_MB, name="a")
    try:
        index = server.wait_published(7)
        assert len(index.get(7).shards) >= 10
        node_dir = tmp_path / "node" / "broadcasts"
        node = RelayNode(
            PullConfig(server=[server.url], broadcast_dir=node_dir, workers=1, attempts=2), retry_wait=0.05
        )
        seen: list[str] = []

        def kill_after_second_shard(manifest, shard, reused) -> None:
            seen.append(shard.name)
            if len(seen) == 2:
                server.kill()

        with pytest.raises(RelayError, match="could not be verified"):
            node.pull_once(kill_after_second_shard)
    finally:
        server.kill()
    assert visible_steps(node_dir) == []
    assert staged_shards(node_dir) == seen

    # a second server publishing the same broadcast dir serves identical shards (deterministic archive)
    with RelayOrigin(origin_dir, tmp_path / "data-b", shard_size=int(SHARD_MB * 1e6)) as mirror:
        mirror.poll_once()
        node = RelayNode(
            PullConfig(server=[server.url, mirror.url], broadcast_dir=node_dir, workers=2, attempts=2), retry_wait=0.05
        )
        result = node.pull_once()
    assert result is not None and result.step == 7
    assert result.reused_shards == 2
    assert result.downloaded_shards == len(index.get(7).shards) - 2
    assert visible_steps(node_dir) == ["step_7"]
    assert same_tree(origin_dir / "step_7", node_dir / "step_7")
    assert staged_shards(node_dir) == []


@pytest.mark.parametrize("damage", ["corrupt", "truncate"])
def test_damaged_shard_is_never_published(tmp_path: Path, origin_dir: Path, damage: str) -> None:
    shard_size = int(SHARD_MB * 1e6)
    node_dir = tmp_path / "node" / "broadcasts"
    with RelayOrigin(origin_dir, tmp_path / "data-a", shard_size=shard_size) as bad:
        manifest = bad.poll_once()
        shard = manifest.shards[3]
        victim = tmp_path / "data-a" / manifest.version / shard.path
        data = bytearray(victim.read_bytes())
        victim.unlink()  # the served file is a hard link to the trainer's: damage only the server's copy
        if damage == "corrupt":
            data[shard.offset + shard.size // 2] ^= 0x01
            victim.write_bytes(bytes(data))
        else:
            victim.write_bytes(bytes(data[: shard.offset + shard.size // 3]))
        node = RelayNode(PullConfig(server=[bad.url], broadcast_dir=node_dir, workers=2, attempts=2), retry_wait=0.05)
        with pytest.raises(RelayError, match=f"shard {manifest.shards[3].name} could not be verified"):
            node.pull_once()
        assert visible_steps(node_dir) == []
        assert manifest.shards[3].name not in staged_shards(node_dir)

        # with a healthy second server the bad copy is routed around
        with RelayOrigin(origin_dir, tmp_path / "data-b", shard_size=shard_size) as good:
            good.poll_once()
            node = RelayNode(
                PullConfig(server=[bad.url, good.url], broadcast_dir=node_dir, workers=2, attempts=2), retry_wait=0.05
            )
            result = node.pull_once()
    assert result is not None and result.step == 7
    assert same_tree(origin_dir / "step_7", node_dir / "step_7")


def test_client_killed_mid_download_resumes(tmp_path: Path, origin_dir: Path) -> None:
    reached, release = threading.Event(), threading.Event()
    requests: list[tuple[str, int]] = []

    def hold_fourth_shard(version: str, path: str, offset: int, length: int) -> None:
        requests.append((path, offset))
        if len(requests) == 4:  # the client is now inside its fourth shard download, three are verified
            reached.set()
            release.wait(timeout=120)

    node_dir = tmp_path / "node" / "broadcasts"
    with RelayOrigin(origin_dir, tmp_path / "data", shard_size=int(SHARD_MB * 1e6), on_request=hold_fourth_shard) as s:
        total = len(s.poll_once().shards)
        argv = [sys.executable, "-m", "crf_prime.cli", "relay", "pull", "--server", s.url]
        argv += ["--broadcast-dir", str(node_dir), "--once", "--workers", "1", "--timeout", "60"]
        client = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert reached.wait(timeout=120), "the client never asked for a fourth shard"
            assert client.poll() is None, "client finished before it could be interrupted"
            client.kill()
            client.wait(timeout=30)
        finally:
            release.set()
        assert visible_steps(node_dir) == []
        partial = staged_shards(node_dir)
        assert 3 <= len(partial) < total

        restarted = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert restarted.returncode == 0, restarted.stderr
    assert visible_steps(node_dir) == ["step_7"]
    assert same_tree(origin_dir / "step_7", node_dir / "step_7")
    # shards verified by the killed run are not fetched again
    summary = f"step 7 ready: {total - len(partial)} shards downloaded, {len(partial)} reused from an interrupted run"
    assert summary in restarted.stderr


class _DiesBeforeFlush(RelayNode):
    """A node whose process dies right after the rename, before the step reaches the disk."""

    def _flush(self, step: int) -> None:
        raise KeyboardInterrupt("killed before the flush")


def test_step_placed_then_killed_before_flush_is_flushed_in_the_same_boot(tmp_path: Path, origin_dir: Path) -> None:
    node_dir = tmp_path / "node" / "broadcasts"
    marker = node_dir / RELAY_DIR / UNFLUSHED / "step_7"
    with RelayOrigin(origin_dir, tmp_path / "data", shard_size=int(SHARD_MB * 1e6)) as origin:
        origin.poll_once()
        with pytest.raises(KeyboardInterrupt):
            _DiesBeforeFlush(PullConfig(server=[origin.url], broadcast_dir=node_dir, workers=2)).pull_once()
        assert visible_steps(node_dir) == ["step_7"]  # the engine may load it at once: the page cache has it
        assert marker.read_text() == boot_id()

        # a restarted node on the same boot finishes the flush
        RelayNode(PullConfig(server=[origin.url], broadcast_dir=node_dir))
    assert not marker.exists()
    assert visible_steps(node_dir) == ["step_7"]
    assert same_tree(origin_dir / "step_7", node_dir / "step_7")


def test_step_placed_before_a_power_loss_and_never_flushed_is_pulled_again(tmp_path: Path, origin_dir: Path) -> None:
    node_dir = tmp_path / "node" / "broadcasts"
    with RelayOrigin(origin_dir, tmp_path / "data", shard_size=int(SHARD_MB * 1e6)) as origin:
        origin.poll_once()
        with pytest.raises(KeyboardInterrupt):
            _DiesBeforeFlush(PullConfig(server=[origin.url], broadcast_dir=node_dir, workers=2)).pull_once()
        marker = node_dir / RELAY_DIR / UNFLUSHED / "step_7"
        marker.write_text("a-boot-before-the-power-loss\n")  # what the marker holds after a restart of the machine
        # what a power loss can leave behind an unflushed rename: the names, but not the bytes
        victim = next((node_dir / "step_7").glob("*.safetensors"))
        victim.write_bytes(bytes(victim.stat().st_size))

        node = RelayNode(PullConfig(server=[origin.url], broadcast_dir=node_dir))
        assert visible_steps(node_dir) == []  # discarded before a gate could answer for it
        assert not marker.exists()
        result = node.pull_once()
    assert result is not None and result.step == 7 and result.reused_shards == 0
    assert same_tree(origin_dir / "step_7", node_dir / "step_7")
    assert not marker.exists()


def test_shards_are_fetched_across_files() -> None:
    def shard(i: int, path: str, offset: int) -> ShardEntry:
        return ShardEntry(name=f"shard_{i:05d}", path=path, offset=offset, size=10, blake3="0" * 64)

    shards = [shard(1, "a", 0), shard(2, "a", 10), shard(3, "a", 20), shard(4, "b", 0), shard(5, "c", 0)]
    assert [s.name for s in across_files(shards)] == [f"shard_{i:05d}" for i in (1, 4, 5, 2, 3)]
