"""Validation runs shared by the candidates of one package: they all have the same gold tree, the original.

When a task's gold patch applied to its snapshot gives back the original files byte for byte, gold's grading run of
that task is the original tree running its target tests. So one grading-path run of the union of the target tests on
the original tree (fresh grading tree, protected hashes checked, outcomes from the junit report by node id, a missing
node id a failure) decides gold's verdict for every such task, and one recording run plus two gold replay boxes on
that tree serve all their replays (the recorder keys each call by target and by the tests that made it; each task
keeps the calls its own target tests made). A task whose reconstructed gold differs from the original, or a shared
run that cannot speak for every task (a box limit, no junit report, an exit status the report does not explain),
falls back to the task's own runs.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import cast

from crf_prime.featdel import lookup_guard, record
from crf_prime.featdel.deletion import apply_unified_diff
from crf_prime.featdel.grade import _original_sources, grading_run, result_from_run
from crf_prime.featdel.models import FeatdelTask, GradeResult
from crf_prime.featdel.record import (
    GENERATED_PER_TARGET,
    MAX_CALLS_PER_TARGET,
    UNDER_PATCH,
    gold_runs,
    patched,
    plain_calls,
    reach_of,
    record_calls,
    reproduced,
    restored_of,
    servable,
    with_lines,
    with_reach,
    write_replay,
)
from crf_prime.featdel.replay import SEQ, run_driver, strip_tests, targets_of
from crf_prime.featdel.testenv import TestEnv
from crf_prime.sandbox import Sandbox

logger = logging.getLogger(__name__)


def original_gold(task: FeatdelTask, task_dir: Path) -> dict[str, str] | None:
    """Gold's files when they reproduce the original (base archive) byte for byte, else None."""
    gold = apply_unified_diff(dict(task.broken_files), task.gold_patch)
    original = _original_sources(task, task_dir)
    same = set(gold) == set(task.broken_files) and all(original.get(rel) == text for rel, text in gold.items())
    return gold if same else None


def _base_key(task: FeatdelTask) -> tuple:
    return (
        task.base_archive,
        task.base_sha256,
        task.pytest_args,
        task.pythonpath,
        tuple(sorted(task.protected_files.items())),
        task.test_env.model_dump_json(),
    )


def shareable(tasks: list[FeatdelTask], task_dir: Path) -> list[FeatdelTask]:
    """The tasks whose gold tree is the original of the first such task's base (same archive, test settings)."""
    group = [t for t in tasks if original_gold(t, task_dir) is not None]
    return [t for t in group if _base_key(t) == _base_key(group[0])] if group else []


def _wall(sandbox: Sandbox, n: int) -> float:
    """The box's wall limit for one run of ``n`` tasks' tests at once."""
    return sandbox.limits.wall_seconds * max(n, 1)


def _union(task: FeatdelTask, tests: tuple[str, ...], **update) -> FeatdelTask:
    """``task`` on the original tree (no snapshot edits) with the union's target tests."""
    return task.model_copy(
        update={"target_tests": tests, "broken_files": {}, "hidden_tests": (), "replay": None, **update}
    )


def shared_gold(
    tasks: list[FeatdelTask], task_dir: Path, *, sandbox: Sandbox, env: TestEnv, pycs: Path | None = None
) -> dict[str, GradeResult]:
    """task id -> gold's grade, for the tasks :func:`shareable` keeps, from one run of their target tests' union
    (``pycs``: the base's compiled modules, ``pycache.source_entry``).

    Tasks absent from the answer are graded on their own: all of them when the run hit a box limit, wrote no junit
    report, or exited with a status other than 0 / 1 (1 must come with a failing test in the report)."""
    group = shareable(tasks, task_dir)
    if len(group) < 2:
        return {}
    tests = tuple(dict.fromkeys(n for t in group for n in t.target_tests))
    run = grading_run(
        _union(group[0], tests),
        task_dir,
        {},
        sandbox=sandbox,
        env=env,
        wall_seconds=_wall(sandbox, len(group)),
        pycs=pycs,
        lookups={} if lookup_guard.ENABLED else None,  # the guard's rules for every caller, as in an agent's run
    )
    if run.limit_hit or not run.junit_found or run.exit_code not in (0, 1):
        return {}
    failing = [n for n in tests if run.status_of(n)[0] != "passed"]
    if run.exit_code == 1 and not failing:
        return {}  # the exit status says a test failed and the report names none: each task on its own
    explained = replace(run, exit_code=0)  # a non-zero status is explained by the failing tests named
    out: dict[str, GradeResult] = {}
    for t in group:
        gold = original_gold(t, task_dir)
        assert gold is not None
        mine = run if run.exit_code == 0 or set(t.target_tests) & set(failing) else explained
        out[t.task_id] = result_from_run(t, mine, dict(gold))
    return out


def shared_replay(
    tasks: list[FeatdelTask], task_dir: Path, *, sandbox: Sandbox, env: TestEnv
) -> dict[str, tuple[FeatdelTask, Counter[str]]]:
    """task id -> (the task with its replay, calls dropped by reason) for the tasks :func:`shareable` keeps, from one
    recording run, one derivation and two gold boxes on the original tree. Tasks absent are recorded on their own
    (all of them when a shared run fails). Gold's boxes run only the calls a task keeps, and none of a task whose
    tests called a target under a patch: it comes back not servable, whatever gold's runs would say."""
    group = shareable(tasks, task_dir)
    if len(group) < 2:
        return {}
    targets = tuple({(x.path, x.qualname): x for t in group for x in t.targets}.values())
    index = {(x.path, x.qualname): i for i, x in enumerate(targets)}
    uses = Counter(index[(x.path, x.qualname)] for t in group for x in t.targets)
    tests = tuple(dict.fromkeys(n for t in group for n in t.target_tests))
    probe = _union(group[0], tests, targets=targets)
    originals = {t.task_id: cast("dict[str, str]", original_gold(t, task_dir)) for t in group}
    reach = {t.task_id: reach_of(t, originals[t.task_id]) for t in group}
    restored = {t.task_id: restored_of(t, originals[t.task_id]) for t in group}
    lines: dict[str, set[int]] = {}
    for deleted in restored.values():
        for rel, ls in deleted.items():
            lines.setdefault(rel, set()).update(ls)
    ran: dict[str, dict[str, set[int]]] = {}
    work = Path(tempfile.mkdtemp(prefix="crf-featdel-record-"))
    try:
        report = record_calls(
            probe,
            task_dir,
            {},
            sandbox=sandbox,
            env=env,
            run_dir=work / "rec",
            max_calls_by_target={i: MAX_CALLS_PER_TARGET * n for i, n in uses.items()},
            wall_seconds=_wall(sandbox, len(group)),
        )
        recorded: list[dict] = report["calls"]
        unresolved = {
            i for i, m in enumerate(targets_of(probe)) for u in report["unresolved"] if u.startswith(_name(m) + ":")
        }
        recs = {t.task_id: own_calls(t, recorded, index) for t in group}
        # gold runs only what a task will be served: not the calls of a task recorded on its own, nor those of one
        # whose tests patched the code (not servable, whatever gold says), nor calls no task's tests keep
        served = [t for t in group if _resolved(t, index, unresolved, report) and not patched(recs[t.task_id])]
        needed = {c["id"] for t in served for c in recs[t.task_id]}
        plain = plain_calls([c for c in recorded if c["id"] in needed])
        first: dict = {}
        second: dict = {}
        derived: list[dict] = []
        if plain:
            gold = work / "gold"
            shutil.copytree(work / "rec" / "repo", gold / "repo", symlinks=True)
            strip_tests(probe, gold / "repo")
            made = run_driver(
                sandbox,
                env,
                probe,
                gold,
                plain,
                mode="derive",
                seed=probe.seed,
                per_target=GENERATED_PER_TARGET,
                followups=record.GENERATED_FOLLOWUPS,
            )
            derived = list(cast("list[dict] | None", made) or [])  # derive mode returns the derived calls
            union = {rel: sorted(ls) for rel, ls in sorted(lines.items())}
            first, second, ran = gold_runs(sandbox, env, probe, gold, plain + derived, union)
    except Exception as e:  # each task is then recorded on its own
        logger.warning(
            "featdel: the shared replay recording failed (%s: %s); recording task by task", type(e).__name__, e
        )
        return {}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out: dict[str, tuple[FeatdelTask, Counter[str]]] = {}
    for t in group:
        if not _resolved(t, index, unresolved, report):
            continue  # recorded on its own, which says what the recorder cannot find
        mine = {index[(x.path, x.qualname)]: j for j, x in enumerate(t.targets)}
        rec = recs[t.task_id]
        dropped: Counter[str] = Counter()
        for reason in ("unpicklable", "too_large"):
            dropped[reason.replace("_", "-")] += sum(report[f"{reason}_by_target"].get(i, 0) for i in mine)
        if n := patched(rec):  # not servable: gold's runs were spared
            dropped[UNDER_PATCH] = n
            out[t.task_id] = (servable(t, None, dropped), +dropped)
            continue
        ids = {c["id"] for c in rec}
        calls = [c for c in plain if c["id"] in ids] + [c for c in derived if c["id"].split("~", 1)[0] in ids]
        keep, expected, lost = reproduced(calls, first, second, rec)
        keep = with_lines(with_reach(keep, ran, reach[t.task_id]), ran, restored[t.task_id])
        dropped = +(dropped + lost)
        # the task's own numbering of targets and calls, as a recording of the task alone gives them
        renum = {c["id"]: f"c{i}" for i, c in enumerate(rec)}
        keep = [{**c, "id": _renumbered(c["id"], renum), "target": mine[c["target"]]} for c in keep]
        expected = {_renumbered(k, renum): v for k, v in expected.items()}
        info = write_replay(t, task_dir, keep, expected, dropped)
        out[t.task_id] = (servable(t, info, dropped), dropped)
    return out


def own_calls(task: FeatdelTask, recorded: list[dict], index: dict[tuple[str, str], int]) -> list[dict]:
    """The recorded calls ``task`` keeps: those its own target tests made, the first ``MAX_CALLS_PER_TARGET`` per
    target (``index``: a target's number in the shared recording)."""
    mine = {index[(x.path, x.qualname)] for x in task.targets}
    own = set(task.target_tests)
    taken: Counter[int] = Counter()
    rec: list[dict] = []
    for c in recorded:
        if c["target"] in mine and own.intersection(c["tests"]) and taken[c["target"]] < MAX_CALLS_PER_TARGET:
            taken[c["target"]] += 1
            rec.append(c)
    return rec


def _resolved(task: FeatdelTask, index: dict[tuple[str, str], int], unresolved: set[int], report: dict) -> bool:
    """Whether the shared recording found every target of ``task`` (else it is recorded on its own, which says
    what the recorder cannot find)."""
    mine = {index[(x.path, x.qualname)] for x in task.targets}
    return not (unresolved & mine or len(report["unresolved"]) > len(unresolved))


def _renumbered(call_id: str, renum: dict[str, str]) -> str:
    """A call id (``cN`` or a derived ``cN~J``, either with the in-sequence suffix) in a task's own numbering."""
    base = call_id.removesuffix(SEQ)
    parent, tilde, rest = base.partition("~")
    return renum[parent] + tilde + rest + call_id[len(base) :]


def _name(target: dict[str, str]) -> str:
    return f"{target['module']}.{target['qualname']}"
