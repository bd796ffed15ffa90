"""Opt-in: ``crf-prime check`` against prime-rl's real ``RLConfig`` (CRF_PRIME_RL_SRC=/path/to/prime-rl and
``pip install 'crf-prime[prime-rl]'``): every ladder arm validates, the channel mix read from the validated RLConfig
equals the one computed from the plain composition, and our loss kwargs are still checked (RLConfig keeps them as an
untyped dict, so only the check catches them before step 1)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ladder_arms import ARMS, rl_args

from crf_prime.check import CheckConfig, check

pytestmark = pytest.mark.prime_rl


@pytest.mark.parametrize("arm", sorted(a for a in ARMS if a.startswith("A")))
def test_arm_validates_as_rl_config_and_mixes_alike(launch: Path, arm: str) -> None:
    real = check(rl_args(arm), CheckConfig(base_dir=launch, prime_rl="require"))
    assert [str(p) for p in real.problems] == [] and real.rl_config == "validated"
    plain = check(rl_args(arm), CheckConfig(base_dir=launch, prime_rl="skip"))
    assert real.train == plain.train and real.batch_size == plain.batch_size


def test_kwargs_rlconfig_lets_through_are_caught(launch: Path) -> None:
    args = [*rl_args("A1"), "--trainer.loss.kwargs.clip-high", "0.28", "--trainer.loss.kwargs.clip-hgih", "1"]
    report = check(args, CheckConfig(base_dir=launch, prime_rl="require"))
    assert report.rl_config == "validated"
    assert [str(p) for p in report.problems] == [
        "trainer.loss.kwargs.clip_hgih: unknown setting (allowed: clip_low, clip_high, scale)"
    ]


def test_rlconfig_errors_are_reported_with_its_flag(launch: Path) -> None:
    report = check([*rl_args("A1"), "--orchestrator.batch-size", "100"], CheckConfig(base_dir=launch))
    assert report.rl_config == "failed"
    (problem,) = report.problems
    assert problem.key == "RLConfig" and "--orchestrator" in problem.message and "divisible" in problem.message
