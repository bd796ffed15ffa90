"""Teacher disagreement -> step-level preference pairs (channel 3, crf-prime's own addition to Cursor's recipe).

At each state the voting teachers (answered ``ok``; same model family as the trace excluded by default) are
clustered by action equivalence (:mod:`crf_prime.pairs.equivalence`). With ``N`` voters and the plurality cluster
holding ``k*`` of them, a consensus exists when ``k* >= max(min_support, threshold * N)``. Then:

* **majority > student** — the student's action is not in the plurality cluster: chosen = the plurality action
  (its first teacher by name), rejected = the student's action (IPR / DAgger pattern, arXiv 2406.11176);
* **student > minority** — the student agrees with the plurality: chosen = the student's action, rejected = each
  minority cluster's action (cheap discrimination pairs; optional).

No consensus, no pair. ``margin = (support(chosen) - support(rejected)) / N`` (the student counts as agreeing with the
cluster it matches). Pairs are TRL conversational preference rows: ``prompt`` (messages), ``chosen`` and
``rejected`` (one assistant message each), plus ``tools`` and provenance columns.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from crf_prime.pairs.equivalence import REWARD_TIERS, TierName, same_step
from crf_prime.pairs.normalize import CanonicalAction, canonical_action
from crf_prime.records.family import family_of
from crf_prime.records.journal import JournalRecord
from crf_prime.records.models import Action, TeacherRequest, TraceState


class AgreementConfig(BaseModel):
    """What counts as the same step, and which teachers may judge a trace: the part of the votes the teacher pool
    reads (``[pool.votes]`` of ``teachers.toml``: tiered escalation and same-family exclusion)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tier: TierName = "key_args"
    """What counts as "same action": exact | content | key_args | text (the weakest tier counted). ``key_args`` and
    ``text`` ignore what an edit or write says (teacher-teacher agreement only); a reward needs exact or content."""
    text_similarity: float = Field(0.8, ge=0.0, le=1.0)
    """difflib ratio for the text tier."""
    content_similarity: float = Field(0.8, ge=0.5, le=1.0)
    """Content tier: the similarity counted as the same step (ratio of two edits' token-level changes, word overlap
    of two finish messages or text answers). At least 0.5: below it, half the teachers' change would agree."""
    exclude_same_family: bool = True
    """Teachers whose model family equals the trace's neither are asked nor vote (circularity guard)."""


class VoteConfig(AgreementConfig):
    """How teachers' answers at a state become a vote: who votes, what counts as the same step, what a consensus is.

    Declared once and nested wherever votes are counted: ``crf-prime pairs`` (``--votes.*``) and the trace_replay
    environment (``[env.taskset.task.votes]``: which states become tasks and how live mode scores them); the
    teacher pool nests only its :class:`AgreementConfig` part.
    """

    threshold: float = Field(0.5, ge=0.0, le=1.0)
    """Plurality support needed, as a fraction of the voting teachers (``k* >= threshold * N``)."""
    min_support: int = Field(2, ge=1)
    """Plurality support needed, in teachers (2 = at least two teachers must agree)."""
    min_teachers: int = Field(2, ge=1)
    """Voting teachers needed at a state (after failures and same-family exclusion)."""


class RewardVoteConfig(VoteConfig):
    """The votes of a reward (the trace_replay environment's ``[env.taskset.task.votes]``): the same settings, but
    what counts as the same step must look at content, ``content`` by default.

    A content-blind tier (``key_args``, ``text``) is refused at parse time: it would pay for writing junk into the
    file the teachers edit."""

    tier: TierName = "content"
    """What counts as the same step when paying a policy: content (default) | exact. key_args and text are refused."""

    @field_validator("tier")
    @classmethod
    def _content_aware(cls, tier: TierName) -> TierName:
        if tier not in REWARD_TIERS:
            raise ValueError(
                f"{tier!r} ignores what an edit, write or finish says, so junk written into the teachers' file would "
                "be paid as agreement; a reward needs 'content' (the default) or 'exact' "
                "(key_args and text count agreement among teachers only: crf-prime pairs, the teacher pool)"
            )
        return tier


class PairConfig(VoteConfig):
    """Pair construction: the votes plus which kinds of pair to emit."""

    student_over_minority: bool = True
    """Also emit student > minority-teacher pairs when the student agrees with the plurality."""


class PreferencePair(BaseModel):
    """One TRL conversational preference row (``prompt``/``chosen``/``rejected``) with provenance."""

    model_config = ConfigDict(frozen=True)

    prompt: list[dict[str, Any]]
    """Context messages (OpenAI chat format) up to the decision point."""
    chosen: list[dict[str, Any]]
    """The preferred next assistant message (one message)."""
    rejected: list[dict[str, Any]]
    """The dispreferred next assistant message (one message)."""
    tools: list[dict[str, Any]] = []
    """Tool schemas offered at the state (pass to the chat template)."""
    state_id: str
    trace_id: str = ""
    kind: Literal["majority_over_student", "student_over_minority"]
    margin: float
    """(votes for chosen - votes for rejected) / voters, in [0, 1]."""
    chosen_by: list[str]
    """Teachers (and/or ``student``) whose action is the chosen one."""
    rejected_by: list[str]
    voters: int
    """Teachers that voted at this state."""
    source_model: str = ""


def agrees(a: CanonicalAction, b: CanonicalAction, config: AgreementConfig) -> bool:
    """``a`` and ``b`` are the same step under ``config`` (its tier and thresholds)."""
    return same_step(
        a, b, tier=config.tier, text_similarity=config.text_similarity, content_similarity=config.content_similarity
    )


@dataclass
class Cluster:
    action: Action
    canonical: CanonicalAction
    teachers: list[str]


@dataclass
class StateVotes:
    """The outcome of voting at one state, kept for stats."""

    state_id: str
    trace_id: str
    voters: list[str]
    excluded: list[str]
    clusters: list[Cluster]
    student_cluster: int | None
    """Index of the cluster the student's action falls in (None: matches no teacher)."""
    consensus: int | None
    """Index of the plurality cluster when it meets the thresholds."""


def cluster_actions(
    actions: Sequence[tuple[str, Action]], config: AgreementConfig = AgreementConfig()
) -> list[Cluster]:
    """Greedy clustering: each action joins the first cluster whose representative it matches at ``config.tier``."""
    clusters: list[Cluster] = []
    for name, action in actions:
        canon = canonical_action(action)
        for c in clusters:
            if agrees(c.canonical, canon, config):
                c.teachers.append(name)
                break
        else:
            clusters.append(Cluster(action, canon, [name]))
    return clusters


def latest_answers(records: Iterable[JournalRecord]) -> dict[str, dict[str, JournalRecord]]:
    """state_id -> teacher -> its last ``ok`` record with an action (a later retry overrides an earlier answer)."""
    out: dict[str, dict[str, JournalRecord]] = defaultdict(dict)
    for r in records:
        if r.ok and r.action is not None:
            out[r.state_id][r.teacher] = r
    return out


def vote(request: TeacherRequest, answers: Mapping[str, JournalRecord], config: VoteConfig) -> StateVotes:
    """Cluster the voting teachers' answers to ``request`` and find the consensus, if the thresholds are met.

    ``request`` is what the teachers were asked (:meth:`TraceState.request`, or one built by live mode): its
    ``model_family`` excludes same-family votes and its ``student_action`` is placed in a cluster.
    """
    family = request.model_family
    voters, excluded = [], []
    for teacher in sorted(answers):
        rec = answers[teacher]
        fam = family_of(rec.model_family, rec.model)
        if config.exclude_same_family and family and fam == family:
            excluded.append(teacher)
        else:
            voters.append(teacher)
    clusters = cluster_actions([(t, answers[t].action) for t in voters], config)  # type: ignore[misc]  # voters are the teachers whose answer has an action (None answers went to the failed list above)
    clusters.sort(key=lambda c: -len(c.teachers))  # stable: ties keep first-seen (name) order
    student = canonical_action(request.student_action or Action())
    student_cluster = next((i for i, c in enumerate(clusters) if agrees(c.canonical, student, config)), None)
    consensus = None
    n = len(voters)
    if n >= config.min_teachers and clusters:
        top = len(clusters[0].teachers)
        tied = len(clusters) > 1 and len(clusters[1].teachers) == top
        if not tied and top >= config.min_support and top >= config.threshold * n:
            consensus = 0
    return StateVotes(request.key, request.trace_id, voters, excluded, clusters, student_cluster, consensus)


def pairs_for_state(state: TraceState, votes: StateVotes, config: PairConfig) -> list[PreferencePair]:
    if votes.consensus is None or state.student_action.is_empty():
        return []
    n = len(votes.voters)
    top = votes.clusters[votes.consensus]
    common = {
        "prompt": [dict(m) for m in state.messages],
        "tools": [dict(t) for t in state.tools],
        "state_id": state.state_id,
        "trace_id": state.source.trace_id,
        "voters": n,
        "source_model": state.source_model,
    }
    student_msg = [state.student_action.to_message()]
    if votes.student_cluster != votes.consensus:
        k_s = len(votes.clusters[votes.student_cluster].teachers) if votes.student_cluster is not None else 0
        return [
            PreferencePair(
                **common,
                chosen=[top.action.to_message()],
                rejected=student_msg,
                kind="majority_over_student",
                margin=(len(top.teachers) - k_s) / n,
                chosen_by=list(top.teachers),
                rejected_by=[
                    "student",
                    *(votes.clusters[votes.student_cluster].teachers if votes.student_cluster is not None else []),
                ],
            )
        ]
    if not config.student_over_minority:
        return []
    return [
        PreferencePair(
            **common,
            chosen=student_msg,
            rejected=[c.action.to_message()],
            kind="student_over_minority",
            margin=(len(top.teachers) - len(c.teachers)) / n,
            chosen_by=["student", *top.teachers],
            rejected_by=list(c.teachers),
        )
        for i, c in enumerate(votes.clusters)
        if i != votes.consensus
    ]


def build_pairs(
    states: Iterable[TraceState],
    records: Iterable[JournalRecord],
    config: PairConfig = PairConfig(),
    *,
    votes_out: list[StateVotes] | None = None,
) -> Iterator[PreferencePair]:
    """Stream pairs for ``states`` from the journal ``records`` (states without answers are skipped)."""
    answers = latest_answers(records)
    for state in states:
        got = answers.get(state.state_id)
        if not got:
            continue
        v = vote(state.request(), got, config)
        if votes_out is not None:
            votes_out.append(v)
        yield from pairs_for_state(state, v, config)
