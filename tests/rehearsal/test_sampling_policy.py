"""The rehearsal's sampling policy (scripts/rehearse/sampling.py), its echo taskset's reward and the trainer
stand-in's off-policy figures: fast, no prime-rl needed."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from rehearse_support import REHEARSE, load_script

sampling = load_script("rehearsal_sampling", REHEARSE / "sampling.py")


class FixedLogits(torch.nn.Module):
    """A 'model' whose next-token logits are the same table whatever the input (KV cache passed through)."""

    def __init__(self, logits: list[float]) -> None:
        super().__init__()
        self.logits = torch.tensor(logits)
        self.calls = 0

    def forward(self, input_ids, past_key_values=None, use_cache=True):
        self.calls += 1
        n = input_ids.shape[1]
        return SimpleNamespace(logits=self.logits.expand(1, n, -1), past_key_values=("cache", self.calls))


def test_greedy_stops_at_the_stop_token_with_its_logprob() -> None:
    model = FixedLogits([0.0, 3.0, 1.0])
    out = sampling.sample(
        model, [0, 2], max_tokens=5, temperature=0.0, top_p=1.0, stop_ids={1}, generator=torch.Generator()
    )
    assert out.token_ids == [1] and out.finish_reason == "stop"
    assert out.logprobs == pytest.approx([float(torch.log_softmax(model.logits, -1)[1])])


def test_length_finish_and_tempered_logprobs_of_the_drawn_tokens() -> None:
    model = FixedLogits([0.5, 1.0, 2.0, -1.0])
    gen = torch.Generator().manual_seed(3)
    out = sampling.sample(model, [1], max_tokens=6, temperature=0.7, top_p=1.0, stop_ids=set(), generator=gen)
    assert out.finish_reason == "length" and len(out.token_ids) == 6
    tempered = torch.log_softmax(model.logits / 0.7, -1)
    assert out.logprobs == pytest.approx([float(tempered[t]) for t in out.token_ids])
    assert model.calls == 6  # one forward per token: the cache carries the prefix


def test_top_p_keeps_the_smallest_set_reaching_p() -> None:
    lp = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    kept = torch.isfinite(sampling._top_p_filter(lp, 0.75))
    assert kept.tolist() == [True, True, False, False]
    assert torch.isfinite(sampling._top_p_filter(lp, 1.0)).all()
    assert torch.isfinite(sampling._top_p_filter(lp, 0.1)).tolist() == [True, False, False, False]


def test_top_p_never_draws_outside_the_nucleus() -> None:
    model = FixedLogits(torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05])).tolist())
    gen = torch.Generator().manual_seed(0)
    drawn = set()
    for _ in range(40):
        out = sampling.sample(model, [0], max_tokens=1, temperature=1.0, top_p=0.75, stop_ids=set(), generator=gen)
        drawn.add(out.token_ids[0])
    assert drawn == {0, 1}


def test_max_tokens_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        sampling.sample(
            FixedLogits([0.0]), [0], max_tokens=0, temperature=1.0, top_p=1.0, stop_ids=set(), generator=None
        )


def test_echo_reward_is_one_only_for_the_exact_string() -> None:
    sys.path.insert(0, str(REHEARSE / "tasksets"))
    try:
        from crf_echo.taskset import echo_strings, similarity
    finally:
        sys.path.remove(str(REHEARSE / "tasksets"))
    assert similarity("42", "42") == 1.0
    assert similarity(" 42\n", "42") == 1.0
    assert similarity("", "42") == 0.0
    assert 0.0 < similarity("47", "42") < 1.0
    assert similarity("420", "42") < 1.0
    strings = echo_strings(100, 2, 0)
    assert len(set(strings)) == 100 and strings == echo_strings(100, 2, 0)
    with pytest.raises(ValueError, match="exceeds"):
        echo_strings(101, 2, 0)


def test_off_policy_figures() -> None:
    trainer = load_script("rehearsal_trainer", REHEARSE / "trainer.py")
    log_ratios = [0.0, math.log(1.5), math.log(0.5)]
    metrics = {"dapo/clip_frac_low": [0.0, 0.5], "dapo/clip_frac_high": [0.25, 0.25], "is_masked": [0.1, 0.3]}
    figs = trainer.off_policy_figures(metrics, log_ratios)
    k3 = [r - math.log(r) - 1 for r in (1.0, 1.5, 0.5)]
    assert figs["mismatch_kl"] == pytest.approx(sum(k3) / 3)
    assert (figs["ratio_min"], figs["ratio_max"]) == pytest.approx((0.5, 1.5))
    assert figs["clip_frac"] == pytest.approx(0.25 + 0.25)
    assert figs["masked_frac"] == pytest.approx(0.2)
    assert trainer.off_policy_figures({}, []) == {
        "mismatch_kl": 0.0,
        "ratio_min": 1.0,
        "ratio_max": 1.0,
        "clip_frac": 0.0,
        "masked_frac": 0.0,
    }


def test_flatten_logits_scales_every_logit(tmp_path: Path) -> None:
    """The learning arms' start point: scaling the final norm by f scales every logit by f (temperature T on the
    flattened model = T / f on the tuned one); a factor outside (0, 1] is refused."""
    transformers = pytest.importorskip("transformers")
    tiny_model = load_script("rehearsal_tiny_model", REHEARSE / "tiny_model.py")
    tiny_model.build_tiny_model(tmp_path)
    ids = torch.tensor([[5, 17, 40, 3, 99]])
    load = transformers.AutoModelForCausalLM.from_pretrained
    before = load(tmp_path, dtype=torch.float32)(input_ids=ids).logits
    tiny_model.flatten_logits(tmp_path, 0.8)
    after = load(tmp_path, dtype=torch.float32)(input_ids=ids).logits
    assert torch.allclose(after, 0.8 * before, atol=1e-5)
    assert not torch.allclose(after, before, atol=1e-3)
    with pytest.raises(ValueError, match="factor"):
        tiny_model.flatten_logits(tmp_path, 1.5)
