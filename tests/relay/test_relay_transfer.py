"""End to end on loopback: one origin, three nodes, byte-identical checkpoints; publishing rules and retention."""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from relay_testkit import same_tree, visible_steps, write_checkpoint

from crf_prime.cli import main
from crf_prime.relay.config import PullConfig
from crf_prime.relay.layout import STABLE
from crf_prime.relay.manifest import INDEX_NAME, RelayError, RelayIndex
from crf_prime.relay.node import RelayNode
from crf_prime.relay.origin import RelayOrigin
from crf_prime.relay.transport import ServerConnection


@pytest.mark.slow
def test_origin_and_three_nodes_get_identical_checkpoint(tmp_path: Path) -> None:
    broadcasts = tmp_path / "trainer" / "broadcasts"
    source = write_checkpoint(broadcasts / "step_12", total_mb=256, n_files=4, seed=12)
    size = sum(p.stat().st_size for p in source.iterdir())
    assert size > 250e6
    with RelayOrigin(broadcasts, tmp_path / "data", shard_size=32_000_000) as origin:
        manifest = origin.poll_once()
        sizes = [p.stat().st_size for p in sorted(source.iterdir()) if p.name != STABLE]
        assert manifest is not None and manifest.step == 12
        assert len(manifest.shards) == sum(math.ceil(size / 32_000_000) for size in sizes) == 13
        nodes = [
            RelayNode(PullConfig(server=[origin.url], broadcast_dir=tmp_path / f"node{i}" / "broadcasts", keep=1))
            for i in range(3)
        ]
        with ThreadPoolExecutor(max_workers=3) as pool:
            results = list(pool.map(lambda node: node.pull_once(), nodes))
    for i, result in enumerate(results):
        node_dir = tmp_path / f"node{i}" / "broadcasts"
        assert result is not None and result.step == 12
        assert result.downloaded_bytes == manifest.total_size == sum(sizes) and result.reused_shards == 0
        assert visible_steps(node_dir) == ["step_12"]
        assert same_tree(source, node_dir / "step_12")


def test_newest_step_published_and_retention(tmp_path: Path) -> None:
    broadcasts = tmp_path / "trainer" / "broadcasts"
    for step in (1, 2):
        write_checkpoint(broadcasts / f"step_{step}", total_mb=1, n_files=1, seed=step)
    write_checkpoint(broadcasts / "step_3", total_mb=1, n_files=1, seed=3)
    (broadcasts / "step_3" / STABLE).unlink()  # still being written by the trainer
    node_dir = tmp_path / "node" / "broadcasts"
    with RelayOrigin(broadcasts, tmp_path / "data", shard_size=300_000, keep=2) as origin:
        assert origin.poll_once().step == 2  # newest complete one; step 1 is skipped, step 3 not complete
        assert origin.poll_once() is None
        node = RelayNode(PullConfig(server=[origin.url], broadcast_dir=node_dir, keep=1))
        assert node.pull_once().step == 2
        assert node.pull_once() is None  # up to date

        (broadcasts / "step_3" / STABLE).touch()
        write_checkpoint(broadcasts / "step_4", total_mb=1, n_files=1, seed=4)
        assert origin.poll_once().step == 4
        write_checkpoint(broadcasts / "step_5", total_mb=1, n_files=1, seed=5)
        assert origin.poll_once().step == 5
        index = RelayIndex.model_validate_json((tmp_path / "data" / INDEX_NAME).read_text())
        assert [m.step for m in index.steps] == [4, 5]  # keep=2 on the server
        assert sorted(p.name for p in (tmp_path / "data").glob("v*")) == ["v2", "v3"]  # v1 (step 2) pruned

        assert node.pull_once().step == 5
    assert visible_steps(node_dir) == ["step_5"]  # keep=1 on the node
    assert same_tree(broadcasts / "step_5", node_dir / "step_5")


def test_unverifiable_step_is_not_advertised(tmp_path: Path) -> None:
    broadcasts = tmp_path / "trainer" / "broadcasts"
    step = write_checkpoint(broadcasts / "step_1", total_mb=1, n_files=1, seed=1)
    shard = step / "model-00001-of-00001.safetensors"
    shard.write_bytes(shard.read_bytes()[:-10])  # truncated after STABLE: refuse to publish it
    errors: list[tuple[int, str]] = []
    with RelayOrigin(broadcasts, tmp_path / "data", shard_size=300_000) as origin:
        stop = threading.Event()
        origin.run(stop, poll_interval=0.01, on_error=lambda s, e: (errors.append((s, str(e))), stop.set()))
        assert RelayIndex.model_validate_json((tmp_path / "data" / INDEX_NAME).read_text()).steps == ()
        node = RelayNode(PullConfig(server=[origin.url], broadcast_dir=tmp_path / "node", keep=1))
        assert node.pull_once() is None
    assert [s for s, _ in errors] == [1] and "model-00001-of-00001.safetensors" in errors[0][1]
    assert visible_steps(tmp_path / "node") == []


def test_cli_rejects_bad_server_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["relay", "pull", "--server", "ftp://example", "--broadcast-dir", str(tmp_path / "b"), "--once"]
    assert main(argv) == 2
    assert "relay server 'ftp://example' must be an http:// or https:// URL" in capsys.readouterr().err


def test_second_concurrent_pull_is_refused(tmp_path: Path) -> None:
    broadcasts = tmp_path / "trainer" / "broadcasts"
    write_checkpoint(broadcasts / "step_1", total_mb=2, n_files=1, seed=1)
    node_dir = tmp_path / "node" / "broadcasts"
    with RelayOrigin(broadcasts, tmp_path / "data", shard_size=300_000) as origin:
        origin.poll_once()
        first, second = (
            RelayNode(PullConfig(server=[origin.url], broadcast_dir=node_dir)),
            RelayNode(PullConfig(server=[origin.url], broadcast_dir=node_dir)),
        )
        refused: list[str] = []
        once = threading.Lock()  # the hook runs on several download threads: only the first one tries

        def try_second(manifest, shard, reused) -> None:
            if once.acquire(blocking=False):
                try:
                    second.pull_once()
                except RelayError as e:
                    refused.append(str(e))
                else:
                    refused.append("not refused")

        assert first.pull_once(try_second).step == 1
        assert second.pull_once() is None  # lock released: up to date
    assert refused == [f"another relay pull is running on {node_dir}"]
    assert same_tree(broadcasts / "step_1", node_dir / "step_1")


def test_servers_with_other_shard_sizes_and_bad_indices_are_kept_apart(tmp_path: Path) -> None:
    broadcasts = tmp_path / "trainer" / "broadcasts"
    write_checkpoint(broadcasts / "step_1", total_mb=2, n_files=1, seed=1)
    node_dir = tmp_path / "node" / "broadcasts"
    with (
        RelayOrigin(broadcasts, tmp_path / "a", shard_size=300_000) as a,
        RelayOrigin(broadcasts, tmp_path / "b", shard_size=700_000) as b,
    ):
        ma, mb = a.poll_once(), b.poll_once()
        assert ma.files == mb.files and ma.content_id != mb.content_id
        result = RelayNode(PullConfig(server=[a.url, b.url], broadcast_dir=node_dir, attempts=1)).pull_once()
        assert result is not None and result.downloaded_shards == len(mb.shards)  # b published last: its shards
        assert same_tree(broadcasts / "step_1", node_dir / "step_1")

        # an index whose file path escapes the staging directory is rejected as a whole
        name = "model-00001-of-00001.safetensors"
        tampered = (tmp_path / "a" / INDEX_NAME).read_text().replace(f'"{name}"', f'"../../{name}"')
        assert tampered.count("../../") == 1 + sum(s.path == name for s in ma.shards)
        (tmp_path / "a" / INDEX_NAME).write_text(tampered)
        node = RelayNode(PullConfig(server=[a.url], broadcast_dir=tmp_path / "other"))
        with pytest.raises(RelayError, match=r"no relay server gave a valid index: invalid relay index from http"):
            node.pull_once()
    assert visible_steps(tmp_path / "other") == []


def test_serve_refuses_a_data_dir_it_cannot_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / INDEX_NAME).write_text('{"format": 1, "steps": []}')  # written by the shardcast-based relay
    argv = ["relay", "serve", "--broadcast-dir", str(tmp_path / "b"), "--data-dir", str(data), "--port", "0"]
    assert main(argv) == 2
    err = "".join(capsys.readouterr().err.split())  # rich wraps long lines anywhere
    assert f"{data / INDEX_NAME}isnotanindexthisrelayversioncanread" in err and f"remove{data}andstartagain" in err


def _get(url: str, path: str) -> tuple[int, bytes]:
    conn = ServerConnection(url, timeout=90)
    try:
        status, length = conn.request(path)
        return status, conn.read_body(length)
    finally:
        conn.close()


def test_index_long_poll_answers_when_a_step_is_published(tmp_path: Path) -> None:
    broadcasts = tmp_path / "trainer" / "broadcasts"
    write_checkpoint(broadcasts / "step_1", total_mb=1, n_files=1, seed=1)
    with RelayOrigin(broadcasts, tmp_path / "data", shard_size=300_000) as origin:
        answers: list[tuple[int, bytes]] = []
        poll = threading.Thread(target=lambda: answers.append(_get(origin.url, f"/{INDEX_NAME}?after=-1&wait=60")))
        poll.start()
        origin.poll_once()
        poll.join(timeout=60)
        assert not poll.is_alive() and answers[0][0] == 200
        assert RelayIndex.model_validate_json(answers[0][1]).newest().step == 1
        # nothing newer than step 1: the answer comes after the wait, with the same index
        status, body = _get(origin.url, f"/{INDEX_NAME}?after=1&wait=0.05")
        assert status == 200 and RelayIndex.model_validate_json(body).newest().step == 1
        assert _get(origin.url, f"/{INDEX_NAME}?after=x")[0] == 400
        # only the index and files of published versions are served
        name = origin.index.newest().files[0].path
        assert _get(origin.url, f"/v1/{name}")[0] == 200
        assert [_get(origin.url, p)[0] for p in (f"/v1/../v1/{name}", "/v1/%2e%2e/crf-relay.json", "/etc/passwd")] == [
            404,
            404,
            404,
        ]


def test_short_answer_after_a_spliced_range_on_the_same_connection(tmp_path: Path) -> None:
    """The receive low-water mark raised for a shard body is lowered again, so a short answer is not held back."""
    broadcasts = tmp_path / "trainer" / "broadcasts"
    write_checkpoint(broadcasts / "step_1", total_mb=4, n_files=1, seed=1)
    with RelayOrigin(broadcasts, tmp_path / "data", shard_size=4_000_000) as origin:
        manifest = origin.poll_once()
        entry = manifest.files[0]
        source = (broadcasts / "step_1" / entry.path).read_bytes()
        conn = ServerConnection(origin.url, timeout=30)
        try:
            status, length = conn.request(f"/v1/{entry.path}", {"Range": f"bytes=1000-{3_000_999}"})
            assert (status, length) == (206, 3_000_000)
            with open(tmp_path / "range.bin", "w+b") as handle:
                conn.read_into_file(length, handle.fileno(), 0)
                handle.seek(0)
                assert handle.read() == source[1000:3_001_000]
            started = time.monotonic()
            status, length = conn.request("/v1/missing.safetensors")
            assert (status, conn.read_body(length)) == (404, b"not found")
            assert time.monotonic() - started < 10  # held until the 30 s timeout if the mark stayed at 1 MB
        finally:
            conn.close()
