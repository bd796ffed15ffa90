"""Do the answers at a state agree? Used by tiered querying to decide whether to escalate a state.

Actions are compared with the pair builder's tiered action-equivalence function (``crf_prime.pairs.same_action``:
exact normalised call, same tool and key arguments, or similar text), so the pool escalates exactly when the pairs
stage would see a disagreement.
"""

from __future__ import annotations

from collections.abc import Sequence

from crf_prime.pairs.build import AgreementConfig
from crf_prime.pairs.equivalence import same_action
from crf_prime.records.models import Action

SAME_ACTION_SOURCE = "crf_prime.pairs.same_action"


def all_agree(actions: Sequence[Action], student: Action | None, votes: AgreementConfig) -> bool:
    """True when every action (and the student's, if given) is the same step as the first one at ``votes.tier``."""
    pool = list(actions) + ([student] if student is not None else [])
    return all(
        same_action(
            pool[0],
            other,
            min_tier=votes.tier,
            text_similarity=votes.text_similarity,
            content_similarity=votes.content_similarity,
        )
        for other in pool[1:]
    )
