"""Pair statistics: pairs per trace, per-teacher agreement, and the signal-density check against random pairs.

Signal density (the prototype plan's check): a preference pair carries signal when its chosen side has more teacher
votes than its rejected side. For the built pairs we report the mean vote margin and the share of pairs whose
chosen side out-votes the rejected one; as a baseline, at every state with at least two distinct candidate actions
(the student's and the teachers' clusters) we draw one random ordered pair of distinct candidates (seeded) and
compute the same numbers. Random pairs average ~0 margin and ~50% "chosen wins"; the gap is the signal.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from statistics import mean

from pydantic import BaseModel, ConfigDict

from crf_prime.pairs.build import PreferencePair, StateVotes


class PairStats(BaseModel):
    model_config = ConfigDict(frozen=True)

    states_voted: int
    """States with at least one teacher answer."""
    states_with_consensus: int
    student_agrees: int
    """States with consensus where the student is in the plurality cluster."""
    pairs: int
    pairs_by_kind: dict[str, int]
    traces_with_pairs: int
    pairs_per_trace_mean: float
    pairs_per_trace_max: int
    teacher_agreement_with_student: dict[str, float]
    """Per teacher: share of its answered states where its action matches the student's."""
    teacher_agreement_with_consensus: dict[str, float]
    """Per teacher: share of consensus states where it is in the plurality cluster."""
    excluded_same_family: dict[str, int]
    """Per teacher: states where its vote was dropped for sharing the trace's model family."""
    pair_margin_mean: float
    pair_chosen_wins: float
    """Share of pairs whose chosen side has strictly more votes than the rejected side."""
    random_margin_mean: float
    random_chosen_wins: float
    random_pairs: int


def compute_stats(votes: Sequence[StateVotes], pairs: Sequence[PreferencePair], *, seed: int = 0) -> PairStats:
    answered: Counter[str] = Counter()
    agree_student: Counter[str] = Counter()
    in_consensus: Counter[str] = Counter()
    consensus_states: Counter[str] = Counter()
    excluded: Counter[str] = Counter()
    rng = random.Random(seed)
    random_margins: list[float] = []
    for v in votes:
        excluded.update(v.excluded)
        for i, c in enumerate(v.clusters):
            for t in c.teachers:
                answered[t] += 1
                if i == v.student_cluster:
                    agree_student[t] += 1
                if v.consensus is not None:
                    consensus_states[t] += 1
                    if i == v.consensus:
                        in_consensus[t] += 1
        # candidates: teacher clusters, plus the student when it matches none; support in teacher votes
        support = [len(c.teachers) for c in v.clusters]
        if v.student_cluster is None:
            support.append(0)
        if len(support) >= 2 and v.voters:
            a, b = rng.sample(range(len(support)), 2)
            random_margins.append((support[a] - support[b]) / len(v.voters))
    per_trace = Counter(p.trace_id for p in pairs)
    margins = [p.margin for p in pairs]
    return PairStats(
        states_voted=len(votes),
        states_with_consensus=sum(v.consensus is not None for v in votes),
        student_agrees=sum(v.consensus is not None and v.student_cluster == v.consensus for v in votes),
        pairs=len(pairs),
        pairs_by_kind=dict(Counter(p.kind for p in pairs)),
        traces_with_pairs=len(per_trace),
        pairs_per_trace_mean=mean(per_trace.values()) if per_trace else 0.0,
        pairs_per_trace_max=max(per_trace.values(), default=0),
        teacher_agreement_with_student={t: agree_student[t] / n for t, n in sorted(answered.items())},
        teacher_agreement_with_consensus={t: in_consensus[t] / n for t, n in sorted(consensus_states.items())},
        excluded_same_family=dict(sorted(excluded.items())),
        pair_margin_mean=mean(margins) if margins else 0.0,
        pair_chosen_wins=mean(m > 0 for m in margins) if margins else 0.0,
        random_margin_mean=mean(random_margins) if random_margins else 0.0,
        random_chosen_wins=mean(m > 0 for m in random_margins) if random_margins else 0.0,
        random_pairs=len(random_margins),
    )
