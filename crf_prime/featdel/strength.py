"""The grader's strength on one task: the share of behaviour-changing gold mutants it rejects.

Mutation testing applied to the grader (EvalPlus, Liu et al. 2023, measured test insufficiency the same way): each
mutant of gold's deleted code (crf_prime/featdel/mutants.py) is graded as the task is served — the replay of the
task's recorded and generated calls and the target tests in a fresh grading tree, both through
:class:`crf_prime.featdel.grader.Grader` — and the verdict is the grader's (1.0 only when both pass). The replay runs
first because it is the cheaper of the two, for all mutants of a task in one box, each tree stopped at its first
difference from gold. A mutant the grader accepts
is then replayed on **held-out calls**: inputs generated (crf_prime/featdel/inputs.py) from every served call,
recorded or generated — a second step away from what the tests did — with another seed and more per target than
the served replay, minus the served inputs themselves, kept where gold is deterministic; all such mutants of a task in
one box, each running alone only the calls whose gold run reached its code (gold's first run of them is traced, as
the served calls' is). A mutant that differs from gold there is a survivor (behaviour-changing, accepted); one that
agrees everywhere counts as equivalent and is left out. The rate is ``rejected / (rejected + survivors)``.

The static code policy is not applied to mutants (it judges constructs, not behaviour; gold passes it). Where every
replayed call of each target gave gold's one literal result, that result written out as the whole body is graded
too (:func:`constant_passes`, crf_prime/featdel/constant.py): no rate tells it from gold.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import Literal, cast

from crf_prime.featdel.constant import constant_body
from crf_prime.featdel.deletion import apply_unified_diff
from crf_prime.featdel.grader import Grader
from crf_prime.featdel.models import FeatdelTask, GraderConfig, MutationScore, VerifyConfig
from crf_prime.featdel.mutants import Mutant, gold_mutants
from crf_prime.featdel.pycache import link_sources, source_entry
from crf_prime.featdel.pytest_server import PytestServer
from crf_prime.featdel.record import gold_runs, reproduced, restored_of, with_lines
from crf_prime.featdel.replay import (
    SEQ,
    SEQUENCE,
    ReplayVerdict,
    compare,
    load_replay,
    run_driver,
    run_variants,
    strip_tests,
    with_gold_alone,
)
from crf_prime.featdel.testenv import TestEnv
from crf_prime.sandbox import Sandbox

HELD_OUT_PER_TARGET = 200
"""Held-out calls generated per target (the served replay generates ``record.GENERATED_PER_TARGET``)."""
MAX_HELD_OUT = 400
"""Held-out calls kept per task (a deterministic sample), so that one task's check stays within seconds."""
MUTANT_CALL_TIMEOUT_S = 1.0
"""A call's limit in the mutants' replay (the served limit is the grader's ``call_timeout_s``, 5 s): a mutated loop
that never ends cost the served limit per mutant, where gold's calls take milliseconds (32 tasks of webcolors,
simpleeval and base58: 50.1 s of replay against 65.2 s under the served limit). A mutant whose only difference from
gold is a call past it is counted apart (``timed_out``, on neither side of the rate) where gold runs that call within
it (:func:`gold_within`): under the served limit it might still have passed."""
HELD_OUT_SEED = 7919
"""Added to the task's seed: the held-out variations are not the served ones."""


def mutation_seed(task: FeatdelTask) -> str:
    return f"{task.seed}:{task.task_id}"


def task_mutants(task: FeatdelTask, cap: int) -> tuple[dict[str, str], list[Mutant]]:
    """Gold's changed files (path -> text) and up to ``cap`` of its mutants: the deterministic sample
    :func:`mutation_score` grades."""
    original = apply_unified_diff(dict(task.broken_files), task.gold_patch)
    broken = {p: task.broken_files[p] for p in original}
    return original, gold_mutants(broken, original, cap=cap, seed=mutation_seed(task))


class HeldOut:
    """Held-out calls of a task and gold's outcomes on them, derived on first use (most tasks never need them)."""

    def __init__(self, grader: Grader, original: dict[str, str], pycs: Path | None = None) -> None:
        self.grader, self.original, self.pycs = grader, original, pycs
        self._calls: list[dict] | None = None
        self.expected: dict[str, object] = {}

    @property
    def derived(self) -> int:
        """Held-out calls kept (0 until first needed)."""
        return len(self._calls or [])

    def calls(self) -> list[dict]:
        if self._calls is None:
            self._calls = self._derive()
        return self._calls

    def _derive(self) -> list[dict]:
        g, task = self.grader, self.grader.task
        served, served_expected = load_replay(task, g.task_dir)
        work = Path(tempfile.mkdtemp(prefix="crf-featdel-heldout-"))
        try:
            gold = work / "gold"
            g.build_tree(dict(self.original), gold / "repo")
            strip_tests(task, gold / "repo")
            link_sources(self.pycs, gold / "repo")
            seed = task.seed + HELD_OUT_SEED
            fresh = run_driver(
                g.sandbox, g.env, task, gold, served, mode="derive", seed=seed, per_target=HELD_OUT_PER_TARGET
            )
            calls = [
                {**c, "id": f"h:{c['id']}"} for c in (cast("list[dict] | None", fresh) or [])
            ]  # never a served input (the box skips those)
            if len(calls) > MAX_HELD_OUT:
                picked = sorted(random.Random(mutation_seed(task)).sample(range(len(calls)), MAX_HELD_OUT))
                calls = [calls[i] for i in picked]
            if not calls:
                return []
            restored = restored_of(task, self.original)
            first, second, ran = gold_runs(g.sandbox, g.env, task, gold, calls, reach=restored)
            seeds = {f"h:{i}": want for i, want in served_expected.items()}  # a retyped call's seed is a served call
            keep, self.expected, _ = reproduced(calls, first, second, [], seeds)
            return with_lines(keep, ran, restored)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def reaching_calls(calls: list[dict], mutant: Mutant) -> frozenset[str] | None:
    """Ids of the served ``calls`` whose gold run executed the mutated code (a line of ``mutant.reach``), or None
    where that is not known: code run at import, or calls recorded without their lines (an older task)."""
    if mutant.reach is None or any("lines" not in c for c in calls):
        return None
    return frozenset(c["id"] for c in calls if not mutant.reach.isdisjoint(c["lines"].get(mutant.path, ())))


ReplayKind = Literal["rejected", "pass", "timeout"]


def replay_verdicts(
    grader: Grader,
    mutants: list[Mutant],
    *,
    base: Path | None = None,
    pycs: Path | None = None,
    gold: dict[str, str] | None = None,
) -> list[ReplayKind]:
    """The replay's verdict on each mutant: all mutants in one box, each tree stopped at its first difference
    from gold (most mutants differ on their first calls; one that does not runs every call, as the served replay
    does), and running alone only the calls whose gold run reached its mutated code (:func:`reaching_calls`; the
    others cannot differ: a mutant the tests' calls never reach cost a whole replay to pass it), each call under
    :data:`MUTANT_CALL_TIMEOUT_S`. "timeout": its only difference is a call past that limit. Where gold itself
    (``gold``: its changed files, path -> text) does not run those calls within it, the limit says nothing: they
    are replayed again under the served one. ``base``: :meth:`Grader.shared_base`'s tree; ``pycs``: its compiled
    modules (``pycache.source_entry``).
    A first pass on a sample of the calls cost more than it saved once each tree stops at its first difference: the
    mutants it did not reject ran those calls twice, in a second box."""
    if grader.task.replay is None:
        return ["pass"] * len(mutants)
    calls, _ = load_replay(grader.task, grader.task_dir)
    served = [c for c in calls if grader.config.generated_calls or not c.get("derived")]
    alone: list[Collection[str] | None] = [reaching_calls(served, m) for m in mutants]
    attempts: list[dict[str, str | None]] = [{m.path: m.text} for m in mutants]
    limit = min(MUTANT_CALL_TIMEOUT_S, grader.config.call_timeout_s)
    verdicts = grader.replay_many(attempts, base=base, pycs=pycs, stop_early=True, alone=alone, call_timeout_s=limit)
    shorter = limit < grader.config.call_timeout_s  # else a timeout is the served grader's own rejection
    slow = [i for i, v in enumerate(verdicts) if v.timed_out] if shorter else []
    if slow and not gold_within(grader, slow, verdicts, base, pycs, gold):
        again = grader.replay_many(
            [attempts[i] for i in slow], base=base, pycs=pycs, stop_early=True, alone=[alone[i] for i in slow]
        )
        verdicts = [*verdicts]
        for i, v in zip(slow, again, strict=True):
            verdicts[i] = dataclasses.replace(v, timed_out=False)  # the served limit's verdict is the grader's
    return ["pass" if v.ok else "timeout" if v.timed_out and shorter else "rejected" for v in verdicts]


def gold_within(
    grader: Grader,
    slow: list[int],
    verdicts: list[ReplayVerdict],
    base: Path | None,
    pycs: Path | None,
    gold: dict[str, str] | None,
) -> bool:
    """Whether gold runs the calls the ``slow`` mutants timed out on within the mutants' limit (alone, as they
    did); unknown without ``gold``'s text: False."""
    if gold is None:
        return False
    ids = frozenset(c.removesuffix(SEQ) for i in slow for c in verdicts[i].mismatches)
    [own] = grader.replay_many(
        [dict(gold)], base=base, pycs=pycs, stop_early=True, alone=[ids], call_timeout_s=MUTANT_CALL_TIMEOUT_S
    )
    return own.ok


TestsVerdict = Literal["pass", "fail", "timeout"]


def verdict_of_tests(
    grader: Grader,
    m: Mutant,
    base: Path,
    wall_s: float,
    pycs: Path | None = None,
    warm: PytestServer | None = None,
) -> TestsVerdict:
    """Whether the target tests all pass on mutant ``m`` (stopped at the first failure: only that is asked), in at
    most ``wall_s`` seconds. "timeout": still running then, below the served wall limit, where it might still pass
    (a mutated loop condition that never ends would cost the served limit, minutes, to find out)."""
    changes: dict[str, str | None] = {m.path: m.text}
    served = grader.sandbox.limits.wall_seconds
    run = grader.run_tests(
        changes, base=base, first_failure=True, wall_seconds=min(wall_s, served), pycs=pycs, warm=warm
    )
    if run.limit_hit == "wall" and wall_s < served:
        return "timeout"
    return "pass" if grader.score_run(run, changes).score == 1.0 else "fail"


def held_out_verdicts(
    grader: Grader, passing: list[Mutant], held: HeldOut | None, base: Path, pycs: Path | None = None
) -> list[str]:
    """ "survived" or "equivalent" for each mutant the replay and the tests accept: whether it differs from gold on the
    held-out calls, all mutants in one box (a child per tree, as the replay's passes), each running alone only the
    calls whose gold run reached its code (:func:`reaching_calls`, as the replay does; gold's outcome stands for the
    others, and the in-sequence run is whole); "survived" without held-out calls to tell (nothing tells it from gold
    but the tests: counted, not proven equivalent)."""
    if held is None:
        return ["survived"] * len(passing)
    calls = held.calls() if passing else []
    if not calls:
        return ["equivalent"] * len(passing)
    run_dir = Path(tempfile.mkdtemp(prefix="crf-featdel-mutant-"))
    try:
        for i, m in enumerate(passing):
            grader.build_tree({m.path: m.text}, run_dir / f"v{i}" / "repo", base=base)
            strip_tests(grader.task, run_dir / f"v{i}" / "repo")
            link_sources(pycs, run_dir / f"v{i}" / "repo")
        alone: list[Collection[str] | None] = [reaching_calls(calls, m) for m in passing]
        outs = run_variants(
            grader.sandbox,
            grader.env,
            grader.task,
            run_dir,
            len(passing),
            calls,
            seed=3,
            sequence=SEQUENCE,
            alone=alone,
        )
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    outs = [with_gold_alone(held.expected, ids, got) for ids, got in zip(alone, outs, strict=True)]
    return ["survived" if compare(held.expected, got)[0] else "equivalent" for got in outs]


def mutation_score(
    task: FeatdelTask,
    task_dir: Path,
    *,
    cap: int,
    sandbox: Sandbox,
    env: TestEnv,
    tests_wall_s: float = VerifyConfig().mutant_tests_wall_s,
    warm: PytestServer | None = None,
) -> MutationScore:
    """Grade up to ``cap`` mutants of ``task``'s gold (deterministic for the task's seed) and count the verdicts.
    The rate is measured only for tasks whose every target has replayed calls (None otherwise). A mutant whose
    target tests run past ``tests_wall_s`` is counted apart (``timed_out``), in neither side of the rate. ``warm``: the
    test venv's warm pytest server, for the mutants' target-test runs (crf_prime/featdel/pytest_server.py)."""
    original, mutants = task_mutants(task, cap)
    measurable = task.replay is not None and not task.unreplayed_targets
    grader = Grader(task, task_dir, sandbox=sandbox, env=env, config=GraderConfig(scan=False))
    base_archive = task_dir / task.base_archive
    pycs = (
        source_entry(base_archive, task.base_sha256, task.source_files, sandbox=sandbox, env=env) if mutants else None
    )
    held = HeldOut(grader, original, pycs) if measurable else None
    with grader.shared_base() as base:  # one grading tree for every mutant, each made from it by hard links
        replayed = replay_verdicts(grader, mutants, base=base, pycs=pycs, gold=original)
        tests = {
            i: verdict_of_tests(grader, mutants[i], base, tests_wall_s, pycs, warm)
            for i, r in enumerate(replayed)
            if r == "pass"
        }
        passing = [i for i, v in tests.items() if v == "pass"]
        verdicts_held = held_out_verdicts(grader, [mutants[i] for i in passing], held, base, pycs)
        accepted = dict(zip(passing, verdicts_held, strict=True))
        accepted |= {i: "timeout" for i, v in [*tests.items(), *enumerate(replayed)] if v == "timeout"}
        verdicts = [(m.label, accepted.get(i, "rejected")) for i, m in enumerate(mutants)]
        constant = constant_passes(grader, original, base, tests_wall_s, pycs, warm)
    rejected = sum(1 for _, v in verdicts if v == "rejected")
    survivors = tuple(label for label, v in verdicts if v == "survived")
    changing = rejected + len(survivors)
    return MutationScore(
        mutants=len(mutants),
        behaviour_changing=changing,
        rejected=rejected,
        survivors=survivors,
        held_out_calls=held.derived if held is not None else 0,
        timed_out=sum(1 for _, v in verdicts if v == "timeout"),
        rate=round(rejected / changing, 4) if measurable and changing else None,
        constant=constant,
    )


def constant_passes(
    grader: Grader,
    original: dict[str, str],
    base: Path,
    tests_wall_s: float,
    pycs: Path | None = None,
    warm: PytestServer | None = None,
) -> str:
    """What a body of one literal result per target (crf_prime/featdel/constant.py) says where the grader accepts it
    (its replay and its target tests, as a mutant's), else "". Asked only of tasks whose every replayed call of each
    target gave one such result."""
    if grader.task.replay is None:
        return ""
    calls, expected = load_replay(grader.task, grader.task_dir)
    found = constant_body(grader.task, original, calls, expected)
    if found is None:
        return ""
    body, said = found
    if replay_verdicts(grader, [body], base=base, pycs=pycs, gold=original) != ["pass"]:
        return ""
    return said if verdict_of_tests(grader, body, base, tests_wall_s, pycs, warm) == "pass" else ""


__all__ = [
    "HELD_OUT_PER_TARGET",
    "MUTANT_CALL_TIMEOUT_S",
    "HeldOut",
    "ReplayKind",
    "constant_passes",
    "gold_within",
    "held_out_verdicts",
    "mutation_score",
    "mutation_seed",
    "reaching_calls",
    "replay_verdicts",
    "task_mutants",
    "verdict_of_tests",
]
