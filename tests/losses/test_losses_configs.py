"""Every shipped TOML that names a ``loss_fns`` function must import it and pass kwargs it accepts."""

from __future__ import annotations

import pkgutil
import tomllib
from pathlib import Path

import pytest
import torch

from loss_fns.types import SequenceInputs

ROOT = Path(__file__).resolve().parents[2]


def _custom_losses() -> list[tuple[str, str, dict]]:
    found = []
    for path in sorted((ROOT / "configs").rglob("*.toml")):
        loss = tomllib.loads(path.read_text()).get("trainer", {}).get("loss", {})
        if loss.get("type") == "custom" and str(loss.get("import_path", "")).startswith("loss_fns."):
            found.append((str(path.relative_to(ROOT)), loss["import_path"], loss.get("kwargs", {})))
    return found


CASES = _custom_losses()


@pytest.mark.skipif(not CASES, reason="no config names a loss_fns function yet")
@pytest.mark.parametrize(("path", "import_path", "kwargs"), CASES, ids=[c[0] for c in CASES])
def test_config_loss_runs(path: str, import_path: str, kwargs: dict) -> None:
    fn = pkgutil.resolve_name(import_path)  # a dotted path, as prime-rl resolves import_path
    trainer = torch.tensor([-0.5, -1.0, -0.2], requires_grad=True)
    inputs = SequenceInputs(
        trainer_logprobs=trainer,
        inference_logprobs=torch.tensor([-0.6, -0.9, -0.2]),
        ref_logprobs=torch.tensor([-0.4, -1.1, -0.3]),
        advantages=torch.tensor([1.0, 1.0, 1.0]),
        loss_mask=torch.tensor([True, True, False]),
    )
    out = fn(inputs, **kwargs)
    out.loss.backward()
    assert out.loss.dim() == 0 and torch.isfinite(out.loss), path
    assert trainer.grad[2].item() == 0.0 and trainer.grad[:2].abs().sum() > 0, path
