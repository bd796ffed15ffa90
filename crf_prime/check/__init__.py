"""``crf-prime check``: validate a prime-rl run config before launch, composed exactly as ``uv run rl @ …`` composes it.

Errors that would otherwise surface at the trainer's first step (a loss kwarg typo, ``'0.28'`` passed as a string) or
when an env server starts (a bad taskset field, a missing task directory or teachers file) are found here and each is
reported under the TOML key that causes it. The channel mix per step is printed from prime-rl's sampling semantics.
"""

from crf_prime.check.compose import compose_args
from crf_prime.check.mix import SourceShare, channel_mix
from crf_prime.check.models import CheckConfig, CheckReport, Problem
from crf_prime.check.run import check

__all__ = ["CheckConfig", "CheckReport", "Problem", "SourceShare", "channel_mix", "check", "compose_args"]
