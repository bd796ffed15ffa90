"""Helpers for the relay tests: prime-rl-shaped checkpoints and relay servers run as real subprocesses."""

from __future__ import annotations

import filecmp
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from crf_prime.relay.layout import RELAY_DIR, STABLE
from crf_prime.relay.manifest import INDEX_NAME, RelayIndex
from crf_prime.relay.node import JOURNAL

REPO = Path(__file__).resolve().parents[2]


def write_checkpoint(step_path: Path, total_mb: float, n_files: int, seed: int) -> Path:
    """A step directory shaped like prime-rl's ``save_state_dict_parallel`` output, ``STABLE`` touched last.

    ``n_files`` safetensors files named ``model-0000k-of-0000n.safetensors`` (a few float32/float16 tensors each,
    random values) plus ``model.safetensors.index.json`` mapping tensor names to files.
    """
    step_path.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    per_file = int(total_mb * 1e6 / n_files)
    weight_map: dict[str, str] = {}
    total = 0
    for k in range(1, n_files + 1):
        name = f"model-{k:05d}-of-{n_files:05d}.safetensors"
        cols = 1024
        rows_big = max(1, (per_file * 3 // 4) // (4 * cols))
        rows_small = max(1, (per_file // 4) // (2 * cols))
        tensors = {
            f"model.layers.{k}.mlp.up_proj.weight": rng.standard_normal((rows_big, cols), dtype=np.float32),
            f"model.layers.{k}.self_attn.q_proj.weight": rng.standard_normal((rows_small, cols)).astype(np.float16),
            f"model.layers.{k}.input_layernorm.weight": np.ones(cols, dtype=np.float32),
        }
        save_file(tensors, step_path / name, metadata={"format": "pt"})
        for tensor in tensors:
            weight_map[tensor] = name
        total += sum(t.nbytes for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (step_path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    (step_path / STABLE).touch()
    return step_path


def same_tree(a: Path, b: Path) -> bool:
    """True when both directories hold the same file names with byte-identical contents."""
    names_a = sorted(p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file())
    names_b = sorted(p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file())
    if names_a != names_b:
        return False
    match, mismatch, errors = filecmp.cmpfiles(a, b, names_a, shallow=False)
    return not mismatch and not errors and len(match) == len(names_a)


def visible_steps(broadcast_dir: Path) -> list[str]:
    """What prime-rl's ``step_*`` glob sees in a broadcast directory."""
    return sorted(p.name for p in broadcast_dir.glob("step_*"))


def staged_shards(broadcast_dir: Path) -> list[str]:
    """Names of the shards an interrupted pull wrote and verified (its staging journal), sorted."""
    journals = (broadcast_dir / RELAY_DIR / "staging").glob(f"step_*/{JOURNAL}")
    return sorted(name for journal in journals for name in journal.read_text().split())


class ServerProcess:
    """``crf-prime relay serve`` in a subprocess on 127.0.0.1 with a free port."""

    def __init__(self, broadcast_dir: Path, data_dir: Path, tmp: Path, shard_mb: float, name: str = "server") -> None:
        ready = tmp / f"{name}.url"
        ready.unlink(missing_ok=True)
        self.data_dir = data_dir
        self.log = open(tmp / f"{name}.log", "ab")  # noqa: SIM115 - closed in kill()
        argv = [sys.executable, "-m", "crf_prime.cli", "relay", "serve", "--broadcast-dir", str(broadcast_dir)]
        argv += ["--data-dir", str(data_dir), "--host", "127.0.0.1", "--port", "0", "--poll", "0.2"]
        argv += ["--shard-size-mb", str(shard_mb), "--ready-file", str(ready)]
        self.proc = subprocess.Popen(argv, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"relay server did not start; log: {(tmp / f'{name}.log').read_text()}")
            time.sleep(0.05)
        self.url = ready.read_text().strip()

    def wait_published(self, step: int, timeout: float = 60) -> RelayIndex:
        deadline = time.monotonic() + timeout
        index_path = self.data_dir / INDEX_NAME
        while time.monotonic() < deadline:
            if index_path.exists():
                index = RelayIndex.model_validate_json(index_path.read_text())
                if index.get(step) is not None:
                    return index
            if self.proc.poll() is not None:
                raise RuntimeError("relay server exited before publishing")
            time.sleep(0.05)
        raise TimeoutError(f"step {step} not published within {timeout}s")

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.log.close()
