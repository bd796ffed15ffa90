"""Recording gold's behaviour at generation: the inputs and expected outcomes of a task's replay check.

1. Run the target tests on the original tree in the sandbox with the recorder plugin (``record_plugin.py``): every
   call of a target during a test, pickled at call time (receiver included), plus follow-up inputs of callable
   results and the in-test return values.
2. Generate fresh calls the tests never made (``inputs.py``: type-aware mutation and recombination of the recorded
   calls: None <-> value, default <-> given, boundary and empty values, other sizes, other receivers).
3. Replay all calls on the original tree, tests stripped, twice (different hash seeds, separate processes): each
   call alone in a forked child, then all of them one after another in one process (two different orders).
4. Keep a call only when gold reproduces it outside the test process: it loads, finishes in time, gives the same
   outcome on both runs and, when the test saw a plain return value, the same one (past ``MAX_OUTCOME_BYTES``, only
   the largest few per target: :func:`too_large`); a generated input on which gold raises TypeError/AttributeError
   is out of domain. The rest is dropped by reason. A call a test made under a patch
   makes the task not servable (:func:`servable`). Calls holding a value that made gold raise elsewhere accept a
   raise too (:func:`lenient`: validation order is not specified), and so do calls passing ``None`` where gold
   never declares it (``inputs.declared_none``: gold's answer there is incidental). A kept call whose outcome is
   the same in both in-sequence runs as alone is checked in sequence at grading too (``replay.sequenced``): code
   right only on the first call of a process fails there. A call that passes a seed's data under another type (``inputs.retyped``)
   is kept only where gold's outcome is the same as on its seed up to those types (:func:`type_agnostic`), and is
   then compared type-loosely (``replay.TYPE_LOOSE``). A call that passes a list as a long stream
   (``inputs.STREAM``) is kept only where gold returns an iterator over it (:func:`streams`); one that passes
   stand-ins for functions (``inputs.STAND_IN``) only where gold returns (what it makes of a stand-in's result where it
   raises is not the task).

Inputs and outcomes are written into the task directory; the row gets a :class:`ReplayInfo` pointing at them.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import pickle
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import cast

from crf_prime.featdel import lookup_guard
from crf_prime.featdel.grade import materialise
from crf_prime.featdel.inputs import RETYPE, STAND_IN, STREAM, UNDECLARED_NONE
from crf_prime.featdel.models import FeatdelTask, ReplayInfo
from crf_prime.featdel.replay import (
    CALL_TIMEOUT_S,
    LENIENT,
    SEQ,
    TYPE_LOOSE,
    judged,
    lib_dir,
    loosened,
    run_driver,
    sequenced,
    strip_tests,
    targets_of,
)
from crf_prime.featdel.replay_box import CANON, sequence_timeout
from crf_prime.featdel.runner import run_pytest
from crf_prime.featdel.source import strip_tree
from crf_prime.featdel.testenv import TestEnv
from crf_prime.sandbox import Sandbox

MAX_CALLS_PER_TARGET = 40
"""Distinct recorded calls kept per target (the first ones the tests make)."""
DEDUP_BY_TARGET = True
"""Duplicate recorded calls are keyed by target and input (False, the hack suites only: by input alone, as before
issue 25, which left one of two methods called with the same arguments without calls)."""
PATCHED_SERVABLE = False
"""Serve a task whose tests called a target under a patch (True, the hack suites only: as before issue 25)."""
MAX_FOLLOWUPS = 5
"""Follow-up inputs kept per callable result."""
MAX_INPUT_BYTES = 256 * 1024
"""Larger pickled inputs are left out (counted as too-large)."""
MAX_OUTCOME_BYTES = 32 * 1024
"""A gold outcome (canonical JSON) larger than this is large: see ``MAX_LARGE_PER_TARGET``."""
MAX_LARGE_PER_TARGET = 3
"""Per target, only the 3 calls with the largest gold outcomes over 32 KiB (canonical JSON: return value, exception,
arguments and receiver after) are kept; the other large ones are left out (counted as too-large-outcome). A receiver
holding a big linked structure (an LFU cache's ring of nodes, one copy per reference) costs a tenth of a second per
call to read and compare, at every grading: 1 % of the calls of the curated corpus's first packages, on 4 tasks.
The largest stay, so code right only on small states is still caught where the tests built large ones."""
MAX_KEPT_OUTCOME_BYTES = 512 * 1024
"""No gold outcome over this is kept, largest or not: a generated input that made gold return a million-item tuple
(toolz ``partition``) gave 15 MB outcomes, a minute of every mutant replay to read and compare."""
GENERATED_PER_TARGET = 60
"""Fresh calls generated per target from the recorded ones (inputs.py), before gold's checks drop some."""
GENERATED_FOLLOWUPS = 4
"""New inputs per generated call for a callable result (0, the hack suites only: the recorded follow-ups alone)."""
GOLD_CALL_TIMEOUT_S = 4 * CALL_TIMEOUT_S
"""Gold's own limit per call at generation: generous, so that a loaded machine does not decide which calls are kept."""
GOLD_DERIVED_TIMEOUT_S = 2.0
"""Gold's limit per generated call alone at generation: a generated input that makes gold run longer (pyotp's
``verify(valid_window=10**6)``, two million HMACs) is dropped, since every grading and mutant replay would pay for it
(seconds per call, a minute per box) for a call the tests never made."""
UNDER_PATCH = "under-patch"
OUT_OF_DOMAIN = frozenset({"builtins.TypeError", "builtins.AttributeError"})
"""Gold raising these on a generated input means the input has a type the function does not take: the call is not
kept (raising or returning there is behaviour the task does not specify)."""
REACHING = frozenset({"block", "tail"})
"""Granularities that delete part of a body: a call covers such a target only when gold's run of it executes a
deleted line (the enclosing function's other calls check the rest of the body, not what was deleted)."""
_FAILED = ("load_error", "timeout", "crashed", "no_result", "unresolvable", "driver_error")


def replay_name(task: FeatdelTask) -> str:
    return "replay/" + hashlib.sha256(task.task_id.encode()).hexdigest()[:20]


def record_calls(
    task: FeatdelTask,
    task_dir: Path,
    original: dict[str, str],
    *,
    sandbox: Sandbox,
    env: TestEnv,
    run_dir: Path,
    max_calls_by_target: dict[int, int] | None = None,
    wall_seconds: float | None = None,
) -> dict:
    """Run the target tests on the original tree with the recorder; return its report (calls, unpicklable).
    ``max_calls_by_target``: a larger cap than ``MAX_CALLS_PER_TARGET`` for some targets (by index)."""
    repo = run_dir / "repo"
    materialise(task, task_dir, repo, hidden=True)
    for rel, text in original.items():
        (repo / rel).write_text(text)
    strip_tree(repo)
    lib = lib_dir(run_dir / "lib", plugin=True)
    out = run_dir / "out" / "recorded.pkl"
    out.parent.mkdir(parents=True, exist_ok=True)
    cfg = {
        "targets": targets_of(task),
        "root": str(repo.resolve()),
        "source_files": list(task.source_files),
        "out": str(out),
        "max_calls": MAX_CALLS_PER_TARGET,
        "max_calls_by_target": {str(k): v for k, v in (max_calls_by_target or {}).items()},
        "max_followups": MAX_FOLLOWUPS,
        "max_bytes": MAX_INPUT_BYTES,
        "dedup_by_target": DEDUP_BY_TARGET,
    }
    (lib / "record.json").write_text(json.dumps(cfg))
    run = run_pytest(
        sandbox,
        env,
        run_dir,
        pythonpath=(*task.pythonpath, str(lib)),
        pytest_args=(*task.pytest_args, "-p", "crf_featdel_record"),
        node_ids=task.target_tests,
        protected=tuple(task.protected_files),
        wall_seconds=wall_seconds,
    )
    if not out.is_file():
        raise RuntimeError(
            f"task {task.task_id}: the recording run wrote nothing (pytest exit {run.exit_code}):\n{run.tail(800)}"
        )
    with open(out, "rb") as fh:
        return pickle.load(fh)


def deleted_lines(broken: str, original: str) -> list[int]:
    """Lines of ``original`` (1-based) that the snapshot ``broken`` replaced or left out."""
    ops = difflib.SequenceMatcher(None, broken.splitlines(), original.splitlines(), autojunk=False).get_opcodes()
    return [j + 1 for tag, _, _, j1, j2 in ops if tag in ("replace", "insert") for j in range(j1, j2)]


def reach_of(task: FeatdelTask, original: dict[str, str]) -> dict[str, list[int]]:
    """Path -> deleted lines of a task that deletes part of a body; empty for one that deletes whole bodies (every
    call of such a target runs its deleted code)."""
    return restored_of(task, original) if task.granularity in REACHING else {}


def restored_of(task: FeatdelTask, original: dict[str, str]) -> dict[str, list[int]]:
    """Path -> the lines of ``original`` the snapshot deleted, for every task: what gold's first box traces, so that
    each kept call says which of them it ran (:func:`with_lines`; mutation testing replays a mutant only on the calls
    that run its code)."""
    return {rel: deleted_lines(text, original[rel]) for rel, text in sorted(task.broken_files.items())}


def split_reached(first: dict, repo: Path) -> tuple[dict, dict[str, dict[str, set[int]]]]:
    """Gold's outcomes without the lines each call ran (``run_driver(reach=...)``), and those lines: call id ->
    path under ``repo`` -> lines."""
    root = repo.resolve()
    outcomes: dict = {}
    ran: dict[str, dict[str, set[int]]] = {}
    for call_id, got in first.items():
        if isinstance(got, dict) and "reached" in got:
            got = dict(got)
            ran[call_id] = {Path(p).relative_to(root).as_posix(): set(ls) for p, ls in got.pop("reached").items()}
        outcomes[call_id] = got
    return outcomes, ran


def with_reach(keep: list[dict], ran: dict[str, dict[str, set[int]]], deleted: dict[str, list[int]]) -> list[dict]:
    """``keep`` with each call's ``reaches`` (did gold's run of it execute a deleted line) for a task that deletes
    part of a body (``deleted``, from :func:`reach_of`); unchanged otherwise."""
    if not deleted:
        return keep
    return [
        {**c, "reaches": any(set(deleted.get(rel, ())) & lines for rel, lines in ran.get(c["id"], {}).items())}
        for c in keep
    ]


def with_lines(keep: list[dict], ran: dict[str, dict[str, set[int]]], restored: dict[str, list[int]]) -> list[dict]:
    """``keep`` with each call's ``lines`` (path -> the ``restored`` lines gold's run of it executed, alone); a call
    gold's first box did not trace is left without them (then no mutant's replay is narrowed to its calls)."""
    out = []
    for c in keep:
        if c["id"] not in ran:
            out.append(c)
            continue
        lines = {rel: sorted(set(restored.get(rel, ())) & ls) for rel, ls in sorted(ran[c["id"]].items())}
        out.append({**c, "lines": {rel: ls for rel, ls in lines.items() if ls}})
    return out


def plain_calls(recorded: list[dict]) -> list[dict]:
    """Recorded calls as the replay takes them (what only the recording run knew removed)."""
    drop = ("in_test", "in_test_error", "test", "tests", "patched")
    return [{k: v for k, v in c.items() if k not in drop} for c in recorded]


def patched(recorded: list[dict]) -> int:
    """Recorded calls made while the test patched the code under test. A task with one is not servable (unless
    ``PATCHED_SERVABLE``) whatever gold's runs would say, so they are not run: known once the tests are recorded."""
    return 0 if PATCHED_SERVABLE else sum(1 for c in recorded if c.get("patched"))


def gold_runs(
    sandbox: Sandbox,
    env: TestEnv,
    task: FeatdelTask,
    gold: Path,
    calls: list[dict],
    reach: dict[str, list[int]] | None = None,
) -> tuple[dict, dict, dict[str, dict[str, set[int]]]]:
    """Gold's outcomes on ``calls`` from two separate boxes (hash seeds 1 and 2) on the tree at ``gold/repo``, run
    side by side (the second on a hard-linked copy of the tree: each box writes its own inputs and outputs), and
    which of the ``reach`` lines the first box ran for each call (:func:`split_reached`; empty without ``reach``).

    The first box runs each call alone and all in sequence, the second only the sequence: a call whose outcome
    there is its outcome alone in the first box is the same alone in the second (what differs in a process with
    another hash seed, random state or pid, or after other calls, shows there), so only the other calls are run
    alone in a third box. A fork per call is most of a box's time. The boxes run one after the other: a call gold
    failed in the first (a timeout, a crash) is dropped whatever the others say, and is not run again.

    A timed-out call does not stop the others (a generated input may make gold hang; that input is dropped; a
    generated call alone gets :data:`GOLD_DERIVED_TIMEOUT_S`), and the box's wall limit grows with the number of
    calls."""
    limit = GOLD_CALL_TIMEOUT_S
    wall_seconds = 60.0 + 0.5 * len(calls) + 4 * limit + sequence_timeout(limit, len(calls))

    def run(tree: Path, some: list[dict], seed: int, **how) -> dict:
        got = run_driver(
            sandbox,
            env,
            task,
            tree,
            some,
            seed=seed,
            hash_seed=seed,
            call_timeout_s=limit,
            stop_on_timeout=False,  # every call runs (a generated input may hang) under a wall limit that grows
            wall_seconds=wall_seconds,
            lookups={} if lookup_guard.ENABLED else None,  # the guard's rules for every caller, as in an agent's run
            **how,
        )
        if not isinstance(got, dict):
            raise RuntimeError(f"task {task.task_id}: the gold replay produced no result")
        return got

    twin = Path(tempfile.mkdtemp(prefix="gold-", dir=gold.parent))
    try:
        shutil.copytree(gold / "repo", twin / "repo", symlinks=True, copy_function=os.link)
        first = run(gold, calls, 1, reach=reach, derived_timeout_s=GOLD_DERIVED_TIMEOUT_S)
        first, ran = split_reached(first, gold / "repo")
        failed = {c["id"]: first.get(c["id"]) for c in calls if _failed(first.get(c["id"]))}
        calls = [c for c in calls if c["id"] not in failed]  # dropped whatever a second box says: not run again
        second = (run(twin, calls, 2, alone=False) if calls else {}) | failed
        unsettled = [c for c in calls if c["id"] + SEQ not in second or second[c["id"] + SEQ] != first.get(c["id"])]
        second |= {c["id"]: second[c["id"] + SEQ] for c in calls if c["id"] + SEQ in second}
        if unsettled:
            second |= run(twin, unsettled, 2, sequence=False)
    finally:
        shutil.rmtree(twin, ignore_errors=True)
    return first, second, ran


def reproduced(
    calls: list[dict], first: dict, second: dict, recorded: list[dict], seeds: dict[str, object] | None = None
) -> tuple[list[dict], dict[str, object], Counter[str]]:
    """The calls gold reproduces (recorded ones first, each derived call after its parent), gold's outcome of
    each, and the others counted by reason. ``seeds``: gold's outcomes of parents that are not among ``calls``
    (held-out calls derived from the served ones)."""
    in_test = {c["id"]: c for c in recorded}
    keep: list[dict] = []
    expected: dict[str, object] = {}
    dropped: Counter[str] = Counter()
    lost: set[str] = set()
    refused: list[dict] = []
    excess = too_large(calls, first)
    for call in calls:  # recorded calls come first: a derived call goes with its parent
        parent = call["id"].split("~", 1)[0]
        reason = _drop_reason(first.get(call["id"]), second.get(call["id"]), in_test.get(call["id"]))
        if not reason and call["id"] in excess:
            reason = "too-large-outcome"
        if not reason and call.get("derived") and first[call["id"]].get("raised") in OUT_OF_DOMAIN:
            reason = "out-of-domain"  # e.g. None where gold does arithmetic: what to do there is not specified
        if in_test.get(call["id"], {}).get("patched"):
            reason = UNDER_PATCH  # what the test patched is not patched here: gold's outcome may not be the test's
        if not reason and call.get("derived") and parent in lost:
            reason = "parent-dropped"  # what made gold's recorded call unreproducible applies to its variants
        if not reason and call.get("operator") == STREAM and not streams(first[call["id"]]):
            reason = "not-streamed"  # gold reads the stream whole or returns no iterator: laziness is not its contract
        if not reason and call.get("operator") == STAND_IN and "raised" in first[call["id"]]:
            reason = "stand-in-raised"  # what gold makes of a stand-in's result where it raises is not the task
        if not reason and call.get("operator") == RETYPE:
            seed = first[parent] if parent in first else (seeds or {}).get(parent)
            reason = "" if seed is not None and type_agnostic(first[call["id"]], seed) else "type-dependent"
        if reason:
            lost.add(call["id"])
            dropped[reason] += 1
            if reason == "out-of-domain":  # still says which values gold refuses (for the leniency below)
                refused.append(call)
            continue
        keep.append(call)
        expected[call["id"]] = first[call["id"]]
        if call.get("operator") == RETYPE:
            expected[call["id"]] = {**first[call["id"]], TYPE_LOOSE: True}
    undeclared = [c["id"] for c in keep if c.get("operator") == UNDECLARED_NONE]
    for i in [*lenient(keep + refused, {**expected, **{c["id"]: first[c["id"]] for c in refused}}), *undeclared]:
        if isinstance(want := expected.get(i), dict):
            expected[i] = {**want, LENIENT: True}
    return keep, sequenced(keep, expected, first, second), dropped


def too_large(calls: list[dict], outcomes: dict) -> set[str]:
    """Ids of the calls left out for their outcome's size: per target, the calls whose outcome is over
    ``MAX_OUTCOME_BYTES`` but the ``MAX_LARGE_PER_TARGET`` largest, recorded calls before generated ones (the
    biggest states the tests built stay checked), and every call whose outcome is over ``MAX_KEPT_OUTCOME_BYTES``."""
    large: dict[int, list[tuple[bool, int, int, str]]] = {}
    huge: set[str] = set()
    for i, call in enumerate(calls):
        size = len(json.dumps(outcomes.get(call["id"])))
        if size > MAX_KEPT_OUTCOME_BYTES:
            huge.add(call["id"])
        elif size > MAX_OUTCOME_BYTES:
            large.setdefault(call["target"], []).append((bool(call.get("derived")), -size, i, call["id"]))
    return huge | {cid for group in large.values() for *_, cid in sorted(group)[MAX_LARGE_PER_TARGET:]}


def streams(outcome: object) -> bool:
    """Whether gold's outcome on a stream call (``inputs.STREAM``) returned an iterator (read to its end or to
    ``MAX_ITEMS``; one that read the stream to its end is uninspectable, and dropped as such): gold reads its input as
    its result is read, so an implementation that reads every item first (``list(seq)``) ends in the stream's
    ``StreamEnd`` there. Where gold returns anything else (a value, a list, the stream itself) how it reads its input
    is not what the task specifies."""
    returned = outcome.get("returned") if isinstance(outcome, dict) else None
    return isinstance(returned, list) and len(returned) == 2 and returned[0] == "iterator"


def type_agnostic(outcome: object, seed_outcome: object) -> bool:
    """Gold's outcome on a retyped call is its outcome on the seed call up to int/float and list/tuple: only then
    does the task say what the other type must give (where gold's own answer changes with the type, an honest
    rewrite's may too)."""
    return loosened(judged(outcome), sequences=True) == loosened(judged(seed_outcome), sequences=True)


def lenient(calls: list[dict], expected: dict[str, object]) -> list[str]:
    """Calls on which gold returns although an argument holds a value that made gold raise elsewhere: the order in
    which an implementation validates its inputs is not specified, so raising there is accepted too.

    A value is invalid for a parameter when a generated call that changed only that parameter to it made gold raise
    while gold returned on the call it was generated from."""
    raised = {i for i, out in expected.items() if isinstance(out, dict) and "raised" in out}
    keys: dict[str, dict] = {}
    for c in calls:
        keys[c["id"]] = c.get("keys") or {}
        parent = c["id"].split("~", 1)[0]
        if c.get("parent_keys"):
            keys.setdefault(parent, c["parent_keys"])
    invalid = {
        (c["target"], c["varied"], c["keys"][c["varied"]])
        for c in calls
        if c.get("varied") in (c.get("keys") or {})
        and c["id"] in raised
        and c["id"].split("~", 1)[0] in expected
        and c["id"].split("~", 1)[0] not in raised
    }
    return [
        c["id"]
        for c in calls
        if c["id"] not in raised and any((c["target"], p, k) in invalid for p, k in keys.get(c["id"], {}).items())
    ]


def servable(task: FeatdelTask, info: ReplayInfo | None, dropped: Counter[str]) -> FeatdelTask:
    """The task with its replay, marked not servable when its target tests called a target under a patch."""
    update: dict[str, object] = {"replay": info}
    if dropped[UNDER_PATCH] and not PATCHED_SERVABLE:
        update["not_servable"] = (
            f"{dropped[UNDER_PATCH]} recorded call(s) were made while the test patched the code under test "
            "(monkeypatch/mock); the replay cannot reproduce the patch, so the test's answer there would go unchecked"
        )
    return task.model_copy(update=update)


def write_replay(
    task: FeatdelTask, task_dir: Path, keep: list[dict], expected: dict[str, object], dropped: Counter[str]
) -> ReplayInfo | None:
    """Write the kept calls and gold's outcomes under ``task_dir/replay/``; None when nothing was kept."""
    if not keep:
        return None
    name = replay_name(task)
    calls_bytes = pickle.dumps(keep, protocol=4)
    expected_bytes = json.dumps(expected, sort_keys=True).encode()
    (task_dir / "replay").mkdir(parents=True, exist_ok=True)
    (task_dir / f"{name}.calls.pkl").write_bytes(calls_bytes)
    (task_dir / f"{name}.expected.json").write_bytes(expected_bytes)
    n_derived = sum(1 for c in keep if c.get("derived"))
    return ReplayInfo(
        calls_file=f"{name}.calls.pkl",
        calls_sha256=hashlib.sha256(calls_bytes).hexdigest(),
        expected_file=f"{name}.expected.json",
        expected_sha256=hashlib.sha256(expected_bytes).hexdigest(),
        recorded=len(keep) - n_derived,
        derived=n_derived,
        dropped=dict(sorted(dropped.items())),
        canon=CANON,
    )


def record_replay(
    task: FeatdelTask, task_dir: Path, original: dict[str, str], *, sandbox: Sandbox, env: TestEnv
) -> tuple[ReplayInfo | None, Counter[str]]:
    """Record, derive and check gold's calls for ``task``; write the replay files under ``task_dir``."""
    dropped: Counter[str] = Counter()
    work = Path(tempfile.mkdtemp(prefix="crf-featdel-record-"))
    try:
        report = record_calls(task, task_dir, original, sandbox=sandbox, env=env, run_dir=work / "rec")
        for reason in ("unpicklable", "too_large"):
            if report[reason]:
                dropped[reason.replace("_", "-")] += report[reason]
        if report["unresolved"]:
            raise RuntimeError(f"task {task.task_id}: the recorder cannot find {'; '.join(report['unresolved'])}")
        recorded: list[dict] = report["calls"]
        if not recorded:
            return None, dropped
        if n := patched(recorded):  # not servable: gold's runs would be thrown away
            dropped[UNDER_PATCH] += n
            return None, dropped
        gold = work / "gold"
        shutil.copytree(work / "rec" / "repo", gold / "repo", symlinks=True)
        strip_tests(task, gold / "repo")
        plain = plain_calls(recorded)
        derived = run_driver(
            sandbox,
            env,
            task,
            gold,
            plain,
            mode="derive",
            seed=task.seed,
            per_target=GENERATED_PER_TARGET,
            followups=GENERATED_FOLLOWUPS,
        )
        calls = plain + list(cast("list[dict] | None", derived) or [])  # derive mode returns the derived calls
        traced = restored_of(task, original)
        first, second, ran = gold_runs(sandbox, env, task, gold, calls, traced)
        keep, expected, lost = reproduced(calls, first, second, recorded)
        keep = with_lines(with_reach(keep, ran, reach_of(task, original)), ran, traced)
        dropped += lost
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return write_replay(task, task_dir, keep, expected, dropped), dropped


def _failed(outcome: object) -> bool:
    """Whether gold gave no usable outcome (not a dict, or a timeout, crash, ...): the call is dropped."""
    return not isinstance(outcome, dict) or any(k in outcome for k in _FAILED)


def _drop_reason(first, second, recorded: dict | None) -> str:
    """Why gold cannot serve as the reference for this call ("" = keep it)."""
    if not isinstance(first, dict) or not isinstance(second, dict):
        return "no-result"
    failed = next((k for k in _FAILED if k in first or k in second), None)
    if failed:
        return f"gold-{failed.replace('_', '-')}"
    if first != second:
        return "non-deterministic"
    if '"uninspectable"' in json.dumps(first):
        return "gold-uninspectable"  # what cannot be canonicalised is a mismatch at grading: never a reference
    if recorded is not None:
        if recorded.get("in_test_error"):
            return "uninspectable"
        want = recorded.get("in_test")
        if want is not None and first.get("returned") != want:
            return "differs-from-test-run"
    return ""
