"""Opt-in: the trainer stand-in's loss scaling (scripts/rehearse/trainer.py ``component_scales``) still computes what
prime-rl's ``trainer/rl/train.py`` computes. The stand-in repeats those lines because train.py cannot run on CPU
(docs/running.md, "Rehearse on CPU"); this test runs train.py's own statements, read from ``CRF_PRIME_RL_SRC``, on
the same micro-batches and fails when they change shape or result.

    CRF_PRIME_RL_SRC=/path/to/prime-rl pytest tests/rehearsal/test_trainer_scales.py -m prime_rl
"""

from __future__ import annotations

import ast
import importlib.util
import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.prime_rl]


def _stand_in():
    spec = importlib.util.spec_from_file_location("rehearsal_trainer", REPO / "scripts" / "rehearse" / "trainer.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _assigns(stmt: ast.stmt, name: str) -> bool:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else []
    names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return name in names


def train_py_scale_code() -> tuple[str, str]:
    """(the local counting statements, the final ``rl_scale, ce_scale, ref_kl_scale = ...`` statement) of train.py.

    The counting runs from ``local_rl_scale = 0`` up to the all-reduce's ``global_scales = torch.tensor(...)``; the
    final statement reads ``global_scales`` (the all-reduced counts; one rank: the local ones)."""
    path = Path(os.environ["CRF_PRIME_RL_SRC"]) / "src" / "prime_rl" / "trainer" / "rl" / "train.py"
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        starts = [i for i, s in enumerate(body) if _assigns(s, "local_rl_scale")]
        if not starts:
            continue
        start = starts[0]
        end = next(i for i in range(start, len(body)) if _assigns(body[i], "global_scales"))
        final = next(s for s in body[end:] if _assigns(s, "ref_kl_scale"))
        return "\n".join(ast.unparse(s) for s in body[start:end]), ast.unparse(final)
    pytest.fail(f"{path}: no block assigns local_rl_scale: the loss scaling moved; update trainer.py")


def _micro_batch(gen: torch.Generator, n: int, *, rl: bool, ce: bool, ref_kl: bool) -> dict:
    def weights() -> torch.Tensor:
        w = torch.rand(1, n, generator=gen)
        return torch.where(torch.rand(1, n, generator=gen) < 0.4, 0.0, w)

    return {
        "loss_mask": torch.rand(1, n, generator=gen) < 0.7,
        "rl_weights": weights() if rl else None,
        "ce_weights": weights() if ce else None,
        "ref_kl_weights": weights() if ref_kl else None,
    }


def test_component_scales_match_prime_rl_train_py() -> None:
    counting, final = train_py_scale_code()
    component_scales = _stand_in().component_scales
    gen = torch.Generator().manual_seed(0)
    cases = [
        [_micro_batch(gen, 37, rl=False, ce=False, ref_kl=False)],
        [_micro_batch(gen, 50, rl=True, ce=False, ref_kl=True), _micro_batch(gen, 21, rl=False, ce=True, ref_kl=False)],
        [_micro_batch(gen, 64, rl=True, ce=True, ref_kl=True) for _ in range(3)],
        [{**_micro_batch(gen, 8, rl=False, ce=False, ref_kl=False), "loss_mask": torch.zeros(1, 8, dtype=torch.bool)}],
    ]
    for micro_batches in cases:
        scope: dict = {"micro_batches": micro_batches, "torch": torch}
        exec(counting, scope)
        scope["global_scales"] = torch.tensor(
            [scope["local_rl_scale"], scope["local_ce_scale"], scope["local_ref_kl_scale"]]
        )
        exec(final, scope)
        expected = (scope["rl_scale"], scope["ce_scale"], scope["ref_kl_scale"])
        assert component_scales(micro_batches) == expected
    assert any(component_scales(mb) != (1, 1, 1) for mb in cases)  # the cases exercise real counts
