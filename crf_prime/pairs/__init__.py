"""Teacher disagreement to preference pairs (channel 3: crf-prime's own research addition, not Cursor's recipe)."""

from crf_prime.pairs.build import (
    AgreementConfig,
    PairConfig,
    PreferencePair,
    RewardVoteConfig,
    VoteConfig,
    build_pairs,
    vote,
)
from crf_prime.pairs.equivalence import Tier, match_tier, same_action
from crf_prime.pairs.filters import FilterConfig, normalise_pairs
from crf_prime.pairs.normalize import canonical_action, canonical_call
from crf_prime.pairs.stats import PairStats, compute_stats

__all__ = [
    "AgreementConfig",
    "FilterConfig",
    "PairConfig",
    "PairStats",
    "PreferencePair",
    "RewardVoteConfig",
    "Tier",
    "VoteConfig",
    "build_pairs",
    "canonical_action",
    "canonical_call",
    "compute_stats",
    "match_tier",
    "normalise_pairs",
    "same_action",
    "vote",
]
