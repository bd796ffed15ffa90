"""The grader's strength on one task: the share of behaviour-changing gold mutants it rejects.

Mutation testing applied to the grader (EvalPlus, Liu et al. 2023, measured test insufficiency the same way): each
mutant of gold's deleted code (crf_prime/featdel/mutants.py) is graded as the task is served — the replay of the
task's calls (``replay_changes``) and the target tests in a fresh grading tree — and the verdict is the grader's
(1.0 only when both pass; the replay runs first because it is the cheaper of the two). A mutant the grader accepts
is then replayed on **held-out calls**: fresh variations of every served call (recorded or derived: a second step
away from what the tests did), drawn with another seed and more per call than the served replay, minus the served
inputs themselves, kept where gold is deterministic. A mutant that differs from gold there is a
survivor (behaviour-changing, accepted); one that agrees everywhere counts as equivalent and is left out. The rate
is ``rejected / (rejected + survivors)``.

The static code policy is not applied to mutants (it judges constructs, not behaviour; gold passes it).
"""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path

from crf_prime.featdel.deletion import apply_unified_diff
from crf_prime.featdel.grade import build_grading_tree, grading_run, result_from_run
from crf_prime.featdel.models import FeatdelTask, MutationScore
from crf_prime.featdel.mutants import Mutant, gold_mutants
from crf_prime.featdel.record import gold_runs, reproduced
from crf_prime.featdel.replay import compare, load_replay, replay_changes, run_driver, strip_tests
from crf_prime.featdel.testenv import TestEnv

HELD_OUT_PER_CALL = 8
"""Fresh calls derived from each served call for the held-out set (the served replay derives 3 per recorded call)."""
MAX_HELD_OUT = 400
"""Held-out calls kept per task (a deterministic sample), so that one task's check stays within seconds."""
HELD_OUT_SEED = 7919
"""Added to the task's seed: the held-out variations are not the served ones."""
MUTANT_TEST_WALL_S = 60.0
"""Wall limit of one mutant's test run (seconds); a mutant that runs past it is scored 0, as the grader would."""


def mutation_seed(task: FeatdelTask) -> str:
    return f"{task.seed}:{task.task_id}"


class HeldOut:
    """Held-out calls of a task and gold's outcomes on them, derived on first use (most tasks never need them)."""

    def __init__(self, task: FeatdelTask, task_dir: Path, original: dict[str, str], *, sandbox, env: TestEnv) -> None:
        self.task, self.task_dir, self.original = task, task_dir, original
        self.sandbox, self.env = sandbox, env
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
        served, _ = load_replay(self.task, self.task_dir)
        seen = {c["payload"] for c in served}
        work = Path(tempfile.mkdtemp(prefix="crf-featdel-heldout-"))
        try:
            gold = work / "gold"
            build_grading_tree(self.task, self.task_dir, dict(self.original), gold / "repo")
            strip_tests(self.task, gold / "repo")
            fresh = run_driver(
                self.sandbox,
                self.env,
                self.task,
                gold,
                served,
                mode="derive",
                seed=self.task.seed + HELD_OUT_SEED,
                per_call=HELD_OUT_PER_CALL,
            )
            calls = [{**c, "id": f"h:{c['id']}"} for c in (fresh or []) if c["payload"] not in seen]
            if len(calls) > MAX_HELD_OUT:
                picked = sorted(random.Random(mutation_seed(self.task)).sample(range(len(calls)), MAX_HELD_OUT))
                calls = [calls[i] for i in picked]
            if not calls:
                return []
            first, second = gold_runs(self.sandbox, self.env, self.task, gold, calls, shared=True)
            keep, self.expected, _ = reproduced(calls, first, second, [])
            return keep
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _verdict(task: FeatdelTask, task_dir: Path, m: Mutant, held: HeldOut | None, *, sandbox, env: TestEnv) -> str:
    """ "rejected", "survived" or "equivalent" for one mutant."""
    changes: dict[str, str | None] = {m.path: m.text}
    if task.replay is not None and not replay_changes(sandbox, env, task, task_dir, changes).ok:
        return "rejected"
    run = grading_run(task, task_dir, changes, sandbox=sandbox, env=env, wall_seconds=MUTANT_TEST_WALL_S)
    if result_from_run(task, run, changes).score != 1.0:
        return "rejected"
    if held is None:
        return "survived"  # nothing tells it from gold but the tests: counted, not proven equivalent
    calls = held.calls()
    if not calls:
        return "equivalent"
    run_dir = Path(tempfile.mkdtemp(prefix="crf-featdel-mutant-"))
    try:
        build_grading_tree(task, task_dir, changes, run_dir / "repo")
        strip_tests(task, run_dir / "repo")
        got = run_driver(sandbox, env, task, run_dir, calls, seed=3, hash_seed=3)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    bad, _ = compare(held.expected, got)
    return "survived" if bad else "equivalent"


def mutation_score(task: FeatdelTask, task_dir: Path, *, cap: int, sandbox, env: TestEnv) -> MutationScore:
    """Grade up to ``cap`` mutants of ``task``'s gold (deterministic for the task's seed) and count the verdicts.
    The rate is measured only for tasks whose every target has replayed calls (None otherwise)."""
    original = apply_unified_diff(dict(task.broken_files), task.gold_patch)
    broken = {p: task.broken_files[p] for p in original}
    mutants = gold_mutants(broken, original, cap=cap, seed=mutation_seed(task))
    measurable = task.replay is not None and not task.unreplayed_targets
    held = HeldOut(task, task_dir, original, sandbox=sandbox, env=env) if measurable else None
    verdicts = [(m.label, _verdict(task, task_dir, m, held, sandbox=sandbox, env=env)) for m in mutants]
    rejected = sum(1 for _, v in verdicts if v == "rejected")
    survivors = tuple(label for label, v in verdicts if v == "survived")
    changing = rejected + len(survivors)
    return MutationScore(
        mutants=len(mutants),
        behaviour_changing=changing,
        rejected=rejected,
        survivors=survivors,
        held_out_calls=held.derived if held is not None else 0,
        rate=round(rejected / changing, 4) if measurable and changing else None,
    )


__all__ = ["HELD_OUT_PER_CALL", "MUTANT_TEST_WALL_S", "mutation_score", "mutation_seed"]
