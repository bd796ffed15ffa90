"""Feature Deletion generator: real project + its own tests -> validated "re-implement this feature" tasks.

Cursor's Composer 2.5 recipe ("Synthetic data": delete a testable feature from a codebase whose tests pass, the agent
re-implements it, the tests are the reward) made procedural and Docker-free:

1. materialise the source (local dir / pinned PyPI sdist), strip caches and build artefacts;
2. build (once, cached) a test venv without the project, run the suite once in the sandbox under coverage with one
   dynamic context per test node id -> which tests execute which function; the suite must pass as shipped;
3. candidates = public functions/methods covered by >= 1 test, plus "features" (a public class's methods, or a
   function with the private helpers only it calls), sampled deterministically for the seed;
4. delete bodies by AST positions, hide the covering test files, write the gold patch and a prompt;
5. validate each in the sandbox with the real grader: gold passes, the snapshot fails >= 1 target test, the whole
   suite still collects. Only valid tasks are written; rejections are reported by reason.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import os
import random
import re
import secrets
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Protocol

from pydantic import AliasChoices, Field
from pydantic_config import BaseConfig

from crf_prime.errors import InputError
from crf_prime.extras import require
from crf_prime.featdel.baseline import Baseline, run_baseline
from crf_prime.featdel.copies import TreeLines
from crf_prime.featdel.corpus_meta import duplicate_keys
from crf_prime.featdel.deletion import (
    FunctionInfo,
    apply_unified_diff,
    function_text,
    iter_functions,
    unified_diff,
)
from crf_prime.featdel.grade import materialise
from crf_prime.featdel.grader import Grader, grade_changes
from crf_prime.featdel.granularity import Candidate, class_candidates, delete, is_dunder, statement_candidates
from crf_prime.featdel.models import (
    FeatdelTask,
    GenerateSummary,
    GradeResult,
    Granularity,
    MutationScore,
    RateStats,
    Rejection,
    SetupConfig,
    SourceInfo,
    Target,
    TestEnvSpec,
    VerifyConfig,
)
from crf_prime.featdel.pycache import link_sources, source_entry
from crf_prime.featdel.pytest_server import PytestServer
from crf_prime.featdel.record import record_replay, servable
from crf_prime.featdel.runner import run_pytest
from crf_prime.featdel.shared import shared_gold, shared_replay
from crf_prime.featdel.source import (
    Project,
    SourceError,
    load_project,
    make_archive,
    protected_paths,
    pytest_config,
    source_files,
)
from crf_prime.featdel.syntax import shared
from crf_prime.featdel.testenv import TestEnv, default_spec, ensure_test_env, pinned, visible_copies
from crf_prime.outputs import output_dir
from crf_prime.placement import GradingSandbox
from crf_prime.sandbox import Sandbox

DEFAULT_SOURCE = "pypi:toolz==1.2.0"
logger = logging.getLogger(__name__)


class GenerateConfig(SetupConfig, VerifyConfig, GradingSandbox, BaseConfig):
    """One generation run (``crf-prime featdel generate``: flags, ``@ file.toml`` keys and these fields share names).
    The sandbox settings (``limits`` of one task's validation run, ``unsandboxed``, ``bwrap``) are
    :class:`crf_prime.placement.GradingSandbox`'s."""

    source: str = DEFAULT_SOURCE
    """Local project directory or ``pypi:NAME==VERSION`` (a pinned sdist)."""
    out: Path = Path("out/featdel")
    """Task directory written (tasks.jsonl, summary.json, bases/, replay/); replaced atomically. It must be absent,
    empty, or a task directory written before."""
    max_tasks: Annotated[int, Field(ge=1)] = 8
    """Stop after this many valid tasks."""
    time_limit_s: Annotated[float, Field(gt=0)] | None = None
    """Stop validating this many seconds after the start: the runs in flight are stopped there and their candidates
    left unchecked, and the tasks validated before are written (the summary says the limit stopped it). None = until
    ``max_tasks`` or the candidates run out. A corpus passes each package what is left of its own time limit."""
    seed: int = 0
    """Sampling seed; the same seed gives the same tasks."""
    workers: Annotated[int, Field(ge=0)] = 0
    """Parallel validations; 0 = number of CPU cores."""
    min_statements: Annotated[int, Field(ge=1)] = 2
    """Bodies with fewer statements are too trivial to re-implement."""
    max_target_tests: Annotated[int, Field(ge=1)] = 40
    """Candidates covered by more tests are central (deleting them breaks much of the suite, and every grading run
    runs those tests): they are validated after all the others, so only a package short of other tasks gets them
    (a small library whose suite tests one or two functions)."""
    max_suite_fraction: Annotated[float, Field(gt=0, le=1)] = 0.25
    """... or by more than this fraction of the suite (but never fewer than 5 tests)."""
    feature_max_functions: Annotated[int, Field(ge=1)] = 4
    """Functions deleted together in one feature task."""
    deselect: list[str] = []
    """Node ids of tests that fail as shipped and are left out (``--deselect``); everything else must pass."""
    extra_requirements: list[str] = []
    """Additional test-only requirements for the venv (e.g. ``hypothesis==6.100.0``)."""
    pytest_args: list[str] = []
    """pytest arguments the suite needs (``-o testpaths=...``, ``--ignore=PATH``); kept in every task row."""
    suite_wall_seconds: Annotated[
        float, Field(gt=0, validation_alias=AliasChoices("suite_wall_seconds", "suite_timeout_s"))
    ] = 600.0
    """Wall-clock limit of the one coverage run of the whole suite (seconds; ``--suite-timeout-s`` still works)."""
    replay: bool = True
    """Record gold's calls for the out-of-process replay check (crf_prime/featdel/record.py); without it tasks are
    graded by their tests alone."""
    replay_search: Annotated[float, Field(ge=1)] = 2.0
    """Validate up to this many times ``max_tasks`` candidates looking for tasks the replay covers; uncovered valid
    tasks only fill the places left."""
    granularities: Annotated[list[Granularity], Field(min_length=1)] = ["function", "feature"]
    """What a task may delete: function, feature, block (an if/for/while/with/try body), tail (a function's
    statements after its first ones), class (every tested method of a class); see crf_prime/featdel/granularity.py."""


def env_spec(project: Project, cfg: GenerateConfig) -> TestEnvSpec:
    """pytest + coverage + runtime deps + what the tests declare (+ ``extra_requirements``); resolved to exact
    pins when anything beyond the host-pinned pytest/coverage is asked for, less the project itself when a test
    dependency pulls it in (:func:`crf_prime.featdel.testenv.without`)."""
    spec = default_spec((*project.runtime_requirements, *project.test_requirements, *cfg.extra_requirements))
    needs_resolving = project.test_requirements or project.runtime_requirements or cfg.extra_requirements
    return pinned(spec, exclude=(project.info.name,)) if needs_resolving else spec


ProgressFn = Callable[[str, int, int], None]


def find_candidates(baseline: Baseline, cfg: GenerateConfig) -> tuple[list[Candidate], Counter[str], int]:
    """Function and feature candidates with their covering tests; also filter counts and the function count."""
    project = baseline.project
    filtered: Counter[str] = Counter()
    functions: list[FunctionInfo] = []
    for rel in source_files(project.root, project.package_dirs):
        text = (project.root / rel).read_text(errors="replace")
        try:
            functions.extend(iter_functions(rel, text))
        except SyntaxError:
            filtered["unparseable-file"] += 1
    dumps = Counter(f.body_dump for f in functions)
    limit = sys.maxsize  # central candidates are ordered last (central_limit), not left out

    def tests_of(f: FunctionInfo) -> set[str]:
        lines = baseline.coverage.get(f.path, {})
        out: set[str] = set()
        for ln in f.body_lines:
            out |= lines.get(ln, set())
        return out

    covered: dict[tuple[str, str], set[str]] = {(f.path, f.qualname): tests_of(f) for f in functions}
    cands: list[Candidate] = []
    public = [f for f in functions if f.public]
    private = [f for f in functions if not f.public and not is_dunder(f.qualname)]
    for f in [*public, *private]:  # private ones are validated after the public ones (validation_order)
        tests = covered[(f.path, f.qualname)]
        reason = ""
        if f.statements < cfg.min_statements:
            reason = "trivial-body"
        elif dumps[f.body_dump] > 1:
            reason = "duplicated-body"
        elif not tests:
            reason = "no-covering-tests"
        if not reason:
            cands.append(Candidate(_key(f.path, [f.qualname]), "function", (f,), tuple(sorted(tests))))
        elif f.public:  # the summary counts the public functions left out
            filtered[reason] += 1
    features = _features(functions, covered, limit, cfg)
    cands.extend(features)
    if set(cfg.granularities) - {"function", "feature"}:
        sources = {rel: (project.root / rel).read_text(errors="replace") for rel in {f.path for f in functions}}

        def tests_at(path: str, lines: frozenset[int]) -> set[str]:
            by_line = baseline.coverage.get(path, {})
            return set().union(*(by_line.get(ln, set()) for ln in lines))

        feature_sets = {tuple(m.qualname for m in c.functions) for c in features}
        if {"block", "tail"} & set(cfg.granularities):
            cands += statement_candidates(sources, functions, tests_at, limit, cfg.min_statements, _key)
        if "class" in cfg.granularities:
            cands += class_candidates(functions, tests_at, limit, cfg.min_statements, feature_sets, _key)
    cands = [c for c in cands if c.granularity in cfg.granularities]
    return sorted(cands, key=lambda c: c.key), filtered, len(public)


def central_limit(cfg: GenerateConfig, suite_tests: int) -> int:
    """Covering tests above which a candidate is central (``max_target_tests``, ``max_suite_fraction``)."""
    return min(cfg.max_target_tests, max(5, int(cfg.max_suite_fraction * suite_tests)))


def validation_order(cands: list[Candidate], cfg: GenerateConfig, suite_tests: int) -> list[Candidate]:
    """Candidates in validation order: the others, then private functions and their blocks and tails (``_helper``: an
    implementation detail, for a package short of public ones such as u-msgpack-python, whose one public function
    dispatches to private ones), then central ones (:func:`central_limit`); each group in a random order drawn from
    one ``random.Random(seed)``, the first group first (so its order is what it was before the later groups
    existed)."""
    limit = central_limit(cfg, suite_tests)
    rng = random.Random(cfg.seed)
    out: list[Candidate] = []
    for group in ((False, False), (False, True), (True, False), (True, True)):
        some = [c for c in cands if (len(c.tests) > limit, _private(c)) == group]
        rng.shuffle(some)
        out += some
    return out


def _private(c: Candidate) -> bool:
    """A private function's body, block or tail (a feature or class candidate is a public name's)."""
    return c.granularity in ("function", "block", "tail") and not c.functions[0].public


def _key(path: str, qualnames: list[str]) -> str:
    module = re.sub(r"(^src/)|(\.py$)", "", path).replace("/", ".").removesuffix(".__init__")
    return f"{module}.{'+'.join(qualnames)}"


def _features(
    functions: list[FunctionInfo], covered: dict[tuple[str, str], set[str]], limit: int, cfg: GenerateConfig
) -> list[Candidate]:
    """Groups deleted together: a public class's covered methods, or a function plus the private helpers only it calls."""
    out: list[Candidate] = []
    by_class: dict[tuple[str, str], list[FunctionInfo]] = defaultdict(list)
    module_level: dict[str, dict[str, FunctionInfo]] = defaultdict(dict)
    for f in functions:
        if f.class_name and f.public and f.statements >= 1 and covered[(f.path, f.qualname)]:
            by_class[(f.path, f.qualname.rsplit(".", 1)[0])].append(f)
        if "." not in f.qualname:
            module_level[f.path][f.qualname] = f
    for (path, cls), methods in sorted(by_class.items()):
        methods = sorted(methods, key=lambda m: m.lineno)[: cfg.feature_max_functions]
        tests = set().union(*(covered[(path, m.qualname)] for m in methods))
        if len(methods) >= 2 and len(tests) <= limit and sum(m.statements for m in methods) >= cfg.min_statements:
            out.append(Candidate(f"feature:{_key(path, [cls])}", "feature", tuple(methods), tuple(sorted(tests))))
    for path, fns in sorted(module_level.items()):
        callers: dict[str, set[str]] = defaultdict(set)
        for f in fns.values():
            for name in f.calls:
                callers[name].add(f.qualname)
        for f in sorted(fns.values(), key=lambda x: x.lineno):
            if not f.public or not covered[(path, f.qualname)]:
                continue
            helpers = [
                fns[n]
                for n in sorted(f.calls)
                if n in fns and n.startswith("_") and callers[n] == {f.qualname} and covered[(path, n)]
            ][: cfg.feature_max_functions - 1]
            if not helpers:
                continue
            group = (f, *helpers)
            tests = set().union(*(covered[(path, g.qualname)] for g in group))
            if len(tests) <= limit:
                out.append(Candidate(f"feature:{_key(path, [f.qualname])}", "feature", group, tuple(sorted(tests))))
    return out


def _class_header(source: str, qualname: str) -> str:
    """First line of the class that owns method ``qualname`` ("" for a module-level function)."""

    parts = qualname.split(".")
    if len(parts) < 2:
        return ""
    node: ast.AST = shared(source)
    for part in parts[:-1]:
        found = next((c for c in ast.walk(node) if isinstance(c, ast.ClassDef) and c.name == part), None)
        if found is None:
            return ""
        node = found
    if not isinstance(node, ast.ClassDef):  # no class part: the module has no header line
        return ""
    return source.splitlines()[node.lineno - 1].strip()


_BUILTIN_METHODS = frozenset(n for t in (dict, list, str, set, bytes, tuple, int, float, object) for n in dir(t))


def _call_sites(files: dict[str, str], names: set[str], exclude: set[tuple[str, int]], k: int = 5) -> list[str]:
    pat = re.compile(r"(?<![\w])(?:\.)?(" + "|".join(re.escape(n) for n in sorted(names)) + r")\s*\(")
    out: list[str] = []
    for rel in sorted(files):
        for i, line in enumerate(files[rel].splitlines(), 1):
            stripped = line.strip()
            if stripped.startswith(("def ", "async def ", "#")) or (rel, i) in exclude:
                continue
            if pat.search(line):
                out.append(f"{rel}:{i}: {stripped[:160]}")
                if len(out) >= k:
                    return out
    return out


def build_prompt(project: Project, cand: Candidate, broken: dict[str, str], visible: dict[str, str]) -> str:
    """Task statement from the targets' names, signatures, docstrings (as left in the snapshot) and call sites."""
    info = project.info
    first = f"`{cand.functions[0].qualname}` in `{cand.functions[0].path}`"
    if cand.granularity in ("block", "tail"):
        where = "one block inside" if cand.granularity == "block" else "everything after the first statements of"
        lead = (
            f"Part of the implementation of {first} was deleted: {where} the function now raises "
            "NotImplementedError; the rest of the function, its signature, decorators and docstring are unchanged. "
            "Re-implement the missing part so that the project's tests pass again."
        )
    else:
        if cand.granularity == "function":
            what = first
        elif cand.granularity == "class":
            names = ", ".join(f"`{f.qualname.rsplit('.', 1)[-1]}`" for f in cand.functions)
            what = f"the methods {names} of class `{cand.functions[0].qualname.rsplit('.', 1)[0]}` in `{cand.functions[0].path}`"
        else:
            what = "these related functions: " + ", ".join(f"`{f.qualname}` (`{f.path}`)" for f in cand.functions)
        lead = (
            f"The implementation of {what} was deleted: the body now raises NotImplementedError, while the "
            "signature, decorators and docstring are unchanged. Re-implement it so that the project's tests pass again."
        )
    parts = [f"This is {info.name} {info.version} (a Python project). {lead}"]
    for f in cand.functions:
        text = function_text(broken[f.path], f.qualname).rstrip()
        owner = _class_header(broken[f.path], f.qualname)
        if owner:
            text = owner + "\n    ...\n" + "\n".join("    " + ln if ln else ln for ln in text.splitlines())
        parts.append(f"`{f.path}`:\n```python\n{text}\n```")
    # a method named like a builtin type's method (get, update, pop, ...) would match unrelated call sites
    called = {
        f.qualname.rsplit(".", 1)[-1]
        for f in cand.functions
        if not (f.class_name and f.qualname.rsplit(".", 1)[-1] in _BUILTIN_METHODS)
    }
    sites = _call_sites(visible, called, set()) if called else []
    if sites:
        parts.append("Where it is used:\n" + "\n".join(f"- {s}" for s in sites))
    parts.append(
        "The tests that exercise this code are hidden and will be run to grade your work. Only your changes to the "
        "project's non-test source files are kept; test files and test configuration are restored before grading."
    )
    return "\n\n".join(parts)


def task_id_of(project: Project, cand: Candidate) -> str:
    return f"{project.info.name}-{project.info.version}__{cand.key.replace(':', '__')}"


def build_task(
    baseline: Baseline, cand: Candidate, cfg: GenerateConfig, base_archive: str, base_sha: str
) -> FeatdelTask:
    project = baseline.project
    root = project.root
    originals = {p: (root / p).read_text() for p in sorted({f.path for f in cand.functions})}
    broken = delete(originals, cand)
    gold = "".join(unified_diff(p, broken[p], originals[p]) for p in sorted(broken))
    if apply_unified_diff(broken, gold) != originals:
        raise ValueError("gold patch does not round-trip")
    hidden = tuple(sorted({t.split("::", 1)[0] for t in cand.tests}))
    srcs = source_files(root, project.package_dirs)
    visible = {p: (broken.get(p) or (root / p).read_text(errors="replace")) for p in srcs}
    for p in sorted(protected_paths(root)):
        if p.endswith(".py") and p not in hidden:
            visible[p] = (root / p).read_text(errors="replace")
    protected = {p: hashlib.sha256((root / p).read_bytes()).hexdigest() for p in protected_paths(root)}
    return FeatdelTask(
        task_id=task_id_of(project, cand),
        source=project.info,
        granularity=cand.granularity,
        targets=tuple(Target(path=f.path, qualname=f.qualname, lineno=f.lineno) for f in cand.functions),
        prompt=build_prompt(project, cand, broken, visible),
        base_archive=base_archive,
        base_sha256=base_sha,
        broken_files=broken,
        hidden_tests=hidden,
        target_tests=cand.tests,
        gold_patch=gold,
        source_files=srcs,
        package_dirs=project.package_dirs,
        protected_files=protected,
        pytest_args=baseline.pytest_args,
        pythonpath=project.pythonpath,
        test_env=baseline.spec or env_spec(project, cfg),
        seed=cfg.seed,
    )


def gold_violation(task: FeatdelTask, task_dir: Path) -> Rejection | None:
    """Gold must obey the code policy: else the agent could not write the original back without being scored as
    a hack, and the task would be unsolvable."""
    violation = Grader(task, task_dir).policy(dict(apply_unified_diff(dict(task.broken_files), task.gold_patch)))
    return (
        Rejection(candidate=task.task_id, reason="gold-violates-policy", detail=violation[:500]) if violation else None
    )


def collection_untouched(
    cand: Candidate, collection: dict[str, set[int]] | None, originals: dict[str, str], broken: dict[str, str]
) -> bool:
    """Whether the snapshot surely collects as the original did, so that its collection run can be skipped: no
    deleted line ran outside a test in the coverage baseline (importing and collecting the suite run none of it),
    no target is a generator or coroutine function (calling one runs none of its body; its stub raises at the
    call), and the snapshot's files compile."""
    if collection is None:
        return False
    for f in cand.functions:
        if f.body_lines & collection.get(f.path, set()) or _lazy(originals[f.path], f.lineno):
            return False
    try:
        for rel, text in broken.items():
            compile(text, rel, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def _lazy(source: str, lineno: int) -> bool:
    """The function defined at ``lineno`` of ``source`` (the original file) is async or a generator."""
    for node in ast.walk(shared(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.lineno == lineno:
            return isinstance(node, ast.AsyncFunctionDef) or _yields(node)
    return True  # not found: do not skip


def _yields(fn: ast.FunctionDef) -> bool:
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Yield | ast.YieldFrom):
            return True
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(node))
    return False


def validate_task(
    task: FeatdelTask,
    task_dir: Path,
    *,
    sandbox: Sandbox,
    env: TestEnv,
    gold: GradeResult | None = None,
    collection: bool = True,
    pycs: Path | None = None,
    warm: PytestServer | None = None,
) -> Rejection | None:
    """Gold obeys the code policy and passes every target test, the snapshot fails at least one, the suite collects.
    ``gold``: gold's grade already known (its policy checked) from a run shared with other tasks
    (crf_prime/featdel/shared.py); ``collection=False``: the snapshot is known to collect (no collection run);
    ``pycs``: the base's compiled modules for the snapshot's runs (``pycache.source_entry``); ``warm``: the warm
    pytest server for the snapshot's grading run (crf_prime/featdel/pytest_server.py)."""
    if gold is None:
        rejection = gold_violation(task, task_dir)
        if rejection is not None:
            return rejection
        try:
            gold = grade_changes(
                task,
                task_dir,
                dict(apply_unified_diff(dict(task.broken_files), task.gold_patch)),
                sandbox=sandbox,
                env=env,
            )
        except Exception as e:
            return Rejection(candidate=task.task_id, reason="error", detail=f"{type(e).__name__}: {e}"[:500])
    good = gold
    if good.hack:
        return Rejection(candidate=task.task_id, reason="grader-mismatch", detail=good.hack)
    if good.score != 1.0:
        detail = "; ".join(f"{f.name}: {f.message[:120]}" for f in good.failed[:3])
        return Rejection(candidate=task.task_id, reason="original-fails", detail=detail)
    deleted = Grader(task, task_dir, sandbox=sandbox, env=env)
    run = deleted.run_tests({}, first_failure=True, pycs=pycs, warm=warm)  # one failure is enough
    bad = deleted.finish(deleted.score_run(run, {}), {})
    if bad.score != 0.0 or not bad.failed:
        return Rejection(candidate=task.task_id, reason="deleted-passes", detail="no target test fails after deletion")
    if not collection:
        return None
    run_dir = Path(tempfile.mkdtemp(prefix="crf-featdel-collect-"))
    try:
        materialise(task, task_dir, run_dir / "repo", hidden=True)
        link_sources(pycs, run_dir / "repo")
        run = run_pytest(
            sandbox,
            env,
            run_dir,
            pythonpath=task.pythonpath,
            pytest_args=task.pytest_args,
            protected=tuple(task.protected_files),
            collect_only=True,
        )
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    if run.exit_code != 0:
        return Rejection(candidate=task.task_id, reason="collection-breaks", detail=run.tail(400))
    return None


class Turn(Protocol):
    """The caller's turn (a corpus ends a package's turn while others wait), asked with the tasks this run validated
    and its seconds of validation."""

    def keep_going(self, tasks: int, seconds: float) -> bool:
        """Whether to validate another batch or mutation score."""
        ...

    def left_s(self, tasks: int, seconds: float) -> float | None:
        """Seconds left of the turn (None: no end in sight; negative: it ended that long ago): batches are sized to
        fit."""
        ...

    def queued_rate(self) -> float | None:
        """Tasks per second of the fastest package waiting to continue (None: none waits): what the time a batch
        takes past the turn's end would make there."""
        ...


TURN_BATCH = 4
"""The first batch of a turn with an end: small, so that a slow package's first grading and recording (minutes for
sixteen candidates of a heavy suite) end near its turn's end; later ones fit what is left of it."""


def batch_len(default: int, workers: int, left_s: float | None, spent_s: float, taken: int) -> int:
    """Candidates of the next batch: ``default``, or while a turn has ``left_s`` seconds left, as many as fit in it
    at the cost per candidate measured so far (``spent_s`` seconds of recording, grading and verification over
    ``taken`` candidates; :data:`TURN_BATCH` before any), never fewer than ``workers``; 0 when not one fits (the turn
    ends there: a batch begun would have its recording or grading cut at the turn's end, and be lost). Verification
    counts: a batch sized by its grading and recording alone ran into the turn's end while verifying."""
    if left_s is None:
        return default
    fit = TURN_BATCH if not taken else int(left_s * taken / max(spent_s, 1e-9))
    return 0 if fit < 1 else max(workers, min(default, fit))


FINISH_SHARE = 1.0
"""A batch's verification goes on past the turn's end for this share of the seconds its recording and grading
took: stopping would throw that work away (the candidates are left unchecked and checked again in a continuation,
if any), so finishing may cost the waiting package up to as much. 0: stop at the turn's end. Only while finishing
pays (:func:`finish_pays`)."""


def finish_pays(made: int, in_batch: int, verify_s: float, queued: float | None) -> bool:
    """Whether verifying the rest of a batch past its turn's end makes tasks at least as fast as the fastest queued
    package would with that time (``queued``, tasks per second of its turn; None: none queued): always while the
    package has no task (``made``), else while the batch's verification, counting the next candidate as a task,
    keeps that pace (``in_batch`` tasks in ``verify_s`` seconds). Its recording and grading are paid, so finishing
    costs only verification; a heavy suite's takes 20-30 s a candidate (croniter, soupsieve, textdistance), where a
    queued package's whole turn made a task every 6 s."""
    return not made or queued is None or in_batch + 1 >= queued * verify_s


def generate(
    cfg: GenerateConfig,
    progress: ProgressFn | None = None,
    *,
    turn: Turn | None = None,
    resume: bool = False,
) -> tuple[list[FeatdelTask], GenerateSummary]:
    """Run the whole pipeline and write ``tasks.jsonl``, ``summary.json`` and the base archive under ``cfg.out``.
    ``turn``: its ``keep_going`` is asked before each batch after the first and before each mutation score; False
    stops validation there (what is not verified yet is left unchecked; a batch's verification goes on past the
    turn's end for :data:`FINISH_SHARE` of its recording and grading seconds), keeping what it has; batches fit what
    is left of it (:func:`batch_len`). ``resume``: ``cfg.out`` holds an
    earlier run of the same settings that stopped with candidates left (time limit, the turn): its tasks and
    rejections are kept and validation goes on with the candidates it did not check (a project whose archive
    differs from that run's starts afresh)."""
    if cfg.replay:  # MissingExtraError (exit 6) now, not a warning per task and tasks without their replay
        require("cloudpickle", "featdel")
    t0 = time.perf_counter()
    stop_at = None if cfg.time_limit_s is None else t0 + cfg.time_limit_s
    timed_out = stopped = False
    in_batch = 0  # tasks verified in the batch being checked (the turn counts them)
    verify_began = 0.0  # when the batch in hand began its verification
    sunk = 0.0  # seconds the batch in hand took to record and grade
    seconds: dict[str, float] = {}
    progress = progress or (lambda phase, done, total: None)
    check_out(cfg.out)
    sandbox = Sandbox(cfg)
    workspace = Path(tempfile.mkdtemp(prefix="crf-featdel-gen-"))
    staging: Path | None = None
    warm: PytestServer | None = None
    try:
        progress("source", 0, 1)
        project = load_project(cfg.source, workspace)
        seconds["source"] = time.perf_counter() - t0
        progress("venv", 0, 1)
        t = time.perf_counter()
        copies = visible_copies(project.top_level, sandbox=sandbox)
        if copies:
            raise SourceError(
                f"{cfg.source}: an installed copy of the project is readable inside the sandbox "
                f"({', '.join(map(str, copies))}); an agent could restore the deleted code from it. Uninstall it or "
                "pick another source."
            )
        spec = env_spec(project, cfg)
        env = ensure_test_env(spec, project.top_level)
        if not sandbox.unsandboxed:  # the snapshot's and gold mutants' target tests: forks of a warm pytest
            warm = PytestServer(sandbox, env)
        seconds["venv"] = time.perf_counter() - t
        progress("coverage", 0, 1)
        t = time.perf_counter()
        baseline = run_baseline(project, env, sandbox, cfg, workspace, spec)
        baseline.spec = spec
        seconds["coverage"] = time.perf_counter() - t
        cands, filtered, n_functions = find_candidates(baseline, cfg)
        cands = validation_order(cands, cfg, baseline.suite_tests)
        n_candidates = len(cands)

        out = cfg.out
        staging = _staging_dir(out)
        base_rel = f"bases/{project.info.name}-{project.info.version}.tar.gz"
        base_sha = make_archive(project.root, staging / base_rel)
        sources = source_files(project.root, project.package_dirs)
        pycs = source_entry(staging / base_rel, base_sha, sources, sandbox=sandbox, env=env)
        tree = TreeLines(project.root)  # the archived tree: what the agent can read, less each task's changes
        earlier = _earlier(out, staging, base_sha) if resume else None

        if stop_at is not None:  # what runs at the limit is stopped there: its result would not be kept
            sandbox = sandbox.with_deadline(time.monotonic() + stop_at - time.perf_counter())
        t = time.perf_counter()
        workers = cfg.workers or os.cpu_count() or 1
        covered: list[FeatdelTask] = []
        uncovered: list[FeatdelTask] = []
        rejections: list[Rejection] = []
        lost: dict[str, Counter[str]] = {}
        checked = 0
        if earlier is not None:
            kept, before = earlier
            covered = [t for t in kept if not t.unreplayed_targets or not cfg.replay]
            uncovered = [t for t in kept if t.unreplayed_targets and cfg.replay]
            rejections = list(before.rejections)
            checked = before.checked
            done = {t.task_id for t in kept} | {r.candidate for r in rejections}
            cands = [c for c in cands if task_id_of(project, c) not in done and c.key not in done]
        code_of: dict[str, str] = {}  # duplicate key (corpus_meta.duplicate_keys) -> the validated task that has it
        # task id -> its duplicate keys (worked out once: a tenth of a second for a task in a large module)
        keys_of: dict[str, tuple[str, str]] = {}

        def keys(task: FeatdelTask) -> tuple[str, str]:
            if task.task_id not in keys_of:
                keys_of[task.task_id] = duplicate_keys(task)
            return keys_of[task.task_id]

        deferred: list[Candidate] = []  # copies the last batch held back, to check once their twin's verdict is in
        for kept_task in covered + uncovered:
            for key in keys(kept_task):
                code_of.setdefault(key, kept_task.task_id)
        pos = 0
        budget = max(cfg.max_tasks, int(cfg.replay_search * cfg.max_tasks))
        progress("validate", 0, cfg.max_tasks)

        def collects(c: Candidate, task: FeatdelTask) -> bool:
            originals = {p: (baseline.project.root / p).read_text() for p in task.broken_files}
            return collection_untouched(c, baseline.collection, originals, dict(task.broken_files))

        def check(pool: ThreadPoolExecutor, batch: list[Candidate], turn_end: float | None = None) -> list[Checked]:
            """The batch's candidates checked, in order; ``turn_end`` (``time.monotonic()``): the turn's end, where
            its grading and recording runs are stopped and the batch is left unchecked (a slow package's first
            recording took five minutes). The replay is recorded before the snapshot is graded: a candidate whose
            recorded calls cannot be served (made under a patch, or none of a target) is rejected without its test
            runs (a quarter of the candidates graded on the picked list)."""
            box = sandbox
            if turn_end is not None:
                box = sandbox.with_deadline(turn_end if sandbox.deadline is None else min(turn_end, sandbox.deadline))
            built: list[FeatdelTask | Rejection] = []
            for c in batch:
                try:
                    built.append(build_task(baseline, c, cfg, base_rel, base_sha))
                except Exception as e:
                    built.append(Rejection(candidate=c.key, reason="error", detail=f"{type(e).__name__}: {e}"[:500]))
            unchecked: list[Checked] = [(None, b if isinstance(b, Rejection) else None, Counter()) for b in built]
            early: dict[str, Rejection] = {}  # rejected before grading: a duplicate, the policy, a copy in the tree,
            # then the recorded replay
            mine: dict[str, str] = {}  # duplicate key -> the candidate of this batch that has it
            held: list[Candidate] = []  # a copy of an earlier candidate of this batch: checked in the next batch
            for c, b in zip(batch, built, strict=True):
                if not isinstance(b, FeatdelTask):
                    continue
                own = keys(b)
                if twin := next((code_of[k] for k in own if k in code_of), None):
                    early[b.task_id] = Rejection(candidate=b.task_id, reason="duplicate", detail=f"the code of {twin}")
                elif any(k in mine for k in own):
                    held.append(c)
                else:
                    mine.update(dict.fromkeys(own, b.task_id))
                    if (violation := gold_violation(b, staging)) is not None:
                        early[b.task_id] = violation
                    elif (copy := tree.copy_of(b.gold_patch, skip=[*b.broken_files, *b.hidden_tests])) is not None:
                        early[b.task_id] = Rejection(candidate=b.task_id, reason="gold-in-tree", detail=copy.detail())
            later = {c.key for c in held}
            tasks = [b for c, b in zip(batch, built, strict=True) if isinstance(b, FeatdelTask) and c.key not in later]
            tasks = [b for b in tasks if b.task_id not in early]
            built_by_id = {t.task_id: t for t in tasks}
            t_record = time.perf_counter()
            replays: dict[str, tuple[FeatdelTask, Counter[str]]] = {}
            if cfg.replay:
                replays = shared_replay(tasks, staging, sandbox=box, env=env)
                alone = [t for t in tasks if t.task_id not in replays]
                for t, (task, _, dropped) in zip(
                    alone, pool.map(lambda t: _with_replay(t, staging, box, env), alone), strict=True
                ):
                    replays[t.task_id] = (task, dropped)
                if over("record", t_record, turn_end):
                    return unchecked
            ready: list[FeatdelTask] = []
            for t in tasks:
                servable = check_replay(replays[t.task_id][0] if cfg.replay else t, staging, cfg)
                if isinstance(servable, Rejection):
                    early[t.task_id] = servable
                else:
                    ready.append(servable)
            quiet = {
                b.task_id for c, b in zip(batch, built, strict=True) if isinstance(b, FeatdelTask) and collects(c, b)
            }
            t_grade = time.perf_counter()
            graded = [built_by_id[t.task_id] for t in ready]  # as built: the snapshot must fail a target test itself
            verdicts = validate_batch(
                graded, staging, sandbox=box, env=env, pool=pool, collects=quiet, pycs=pycs, warm=warm
            )
            accepted = [t for t in ready if verdicts[t.task_id] is None]
            if over("grade", t_grade, turn_end):
                return unchecked
            nonlocal sunk, verify_began
            sunk = time.perf_counter() - t_record
            t_verify = verify_began = time.perf_counter()
            final = {t.task_id: v for t, v in zip(accepted, pool.map(verify, accepted), strict=True)}
            seconds["verify"] = seconds.get("verify", 0.0) + time.perf_counter() - t_verify
            out: list[Checked] = []
            for c, b in zip(batch, built, strict=True):  # in candidate order: deterministic
                if c.key in later:
                    continue
                if isinstance(b, Rejection):
                    out.append((None, b, Counter()))
                elif b.task_id in early:
                    out.append((None, early[b.task_id], Counter()))
                elif b.task_id not in final:
                    out.append((b, verdicts[b.task_id], Counter()))
                elif (got := final[b.task_id]) is None:
                    out.append((None, None, Counter()))  # not verified before the time limit: not checked
                elif isinstance(got, Rejection):
                    out.append((None, got, Counter()))
                else:
                    out.append((got, None, replays[b.task_id][1] if cfg.replay else Counter()))
            deferred[:] = held
            return out

        def over(stage: str, began: float, turn_end: float | None) -> bool:
            """Count ``stage``'s seconds since ``began``; whether the time limit or the turn's end came while it ran:
            its runs were stopped there, so the batch is left unchecked."""
            nonlocal stopped
            now = time.perf_counter()
            seconds[stage] = seconds.get(stage, 0.0) + now - began
            if stop_at is not None and now >= stop_at:
                return True
            if turn_end is not None and time.monotonic() >= turn_end:
                stopped = True
                return True
            return False

        def verify(task: FeatdelTask) -> FeatdelTask | Rejection | None:
            nonlocal in_batch, stopped
            if stop_at is not None and time.perf_counter() >= stop_at:
                return None  # the time limit: left unchecked (a mutation score takes seconds to minutes)
            if halted() and not finishing():
                return None  # the caller stopped it: left unchecked (a slow package's batch can take minutes)
            cut = window_end()
            box = sandbox if cut is None else sandbox.with_deadline(min(cut, sandbox.deadline or cut))
            try:
                got: FeatdelTask | Rejection = check_mutants(task, staging, cfg, sandbox=box, env=env, warm=warm)
            except Exception as e:
                got = Rejection(candidate=task.task_id, reason="error", detail=f"{type(e).__name__}: {e}"[:500])
            if stop_at is not None and time.perf_counter() >= stop_at:
                return None  # finished past the limit, its runs stopped there: not checked
            if cut is not None and time.monotonic() >= cut:
                stopped = True
                return None  # past the turn's finishing window, its runs stopped there: not checked
            in_batch += isinstance(got, FeatdelTask)
            return got

        def window_end() -> float | None:
            """When a mutation score begun now is stopped (``time.monotonic()``): once the package has a task, one
            finishing window after its turn's finishing window ends (each :data:`FINISH_SHARE` of the batch's
            recording and grading seconds): a score begun in the window may outlast it by as much again, not more
            (one task's gold mutants took 90 s, past every other package's wait); None before its first task or
            while its turn has no end."""
            if turn is None or not made():
                return None
            left = turn.left_s(made(), time.perf_counter() - t)
            return None if left is None else time.monotonic() + left + 2 * FINISH_SHARE * sunk

        def made() -> int:
            return len(covered) + len(uncovered) + in_batch - (0 if earlier is None else len(earlier[0]))

        def halted() -> bool:
            """Whether the turn's ``keep_going`` (asked before each batch and each mutation score, with the tasks this
            run validated and its seconds of validation) has stopped validation."""
            nonlocal stopped
            if turn is not None and not stopped:
                stopped = not turn.keep_going(made(), time.perf_counter() - t)
            return stopped

        def finishing() -> bool:
            """Whether the turn ended less than :data:`FINISH_SHARE` of the batch's recording and grading seconds
            ago (its ``left_s`` says how long ago), and finishing the batch pays (:func:`finish_pays`)."""
            if turn is None:
                return False
            now = time.perf_counter()
            left = turn.left_s(made(), now - t)
            if left is None or left <= -FINISH_SHARE * sunk:
                return False
            return finish_pays(made(), in_batch, now - verify_began, turn.queued_rate())

        def more() -> bool:
            nonlocal timed_out, in_batch
            in_batch = 0
            if len(covered) >= cfg.max_tasks or pos >= len(cands):
                return False
            wanted = len(covered) + len(uncovered) < cfg.max_tasks or checked < budget
            timed_out = timed_out or (wanted and stop_at is not None and time.perf_counter() >= stop_at)
            return wanted and not timed_out and not (pos and halted())

        with ThreadPoolExecutor(max_workers=workers) as pool:
            while more():
                need = cfg.max_tasks - len(covered)
                left = None if turn is None else turn.left_s(made(), time.perf_counter() - t)
                spent = sum(seconds.get(stage, 0.0) for stage in ("record", "grade", "verify"))
                size = batch_len(max(workers, min(SHARED_BATCH, need)), workers, left, spent, pos)
                if not size:  # not one candidate fits in what is left of the turn: it ends here
                    stopped = True
                    break
                batch = cands[pos : pos + size]
                pos += len(batch)
                turn_end = None if left is None else time.monotonic() + left
                deferred.clear()
                for task, rej, dropped in check(pool, batch, turn_end):
                    if task is None and rej is None:
                        timed_out = timed_out or not stopped  # unchecked: the time limit, or the turn
                        continue
                    checked += 1
                    if rej is not None:
                        rejections.append(rej)
                    elif task is not None and len(covered) < cfg.max_tasks:
                        preferred = not task.unreplayed_targets or not cfg.replay  # no replay: first found
                        (covered if preferred else uncovered).append(task)
                        lost[task.task_id] = dropped
                        for key in keys(task):
                            code_of.setdefault(key, task.task_id)
                cands[pos:pos] = deferred  # the next batch begins with them
                progress("validate", min(len(covered) + len(uncovered), cfg.max_tasks), cfg.max_tasks)
        valid = (covered + uncovered)[: cfg.max_tasks]
        _remove_unused_replays(staging, valid)
        seconds["validate"] = time.perf_counter() - t
        seconds["total"] = time.perf_counter() - t0
        dropped = sum((lost.get(t.task_id, Counter()) for t in valid), Counter())
        if earlier is not None:  # the counts of the run continued are this run's too
            for k, v in earlier[1].seconds.items():
                seconds[k] = seconds.get(k, 0.0) + v
            dropped += Counter(earlier[1].replay_dropped)
        summary = GenerateSummary(
            source=project.info,
            suite_tests=baseline.suite_tests,
            pytest_config=pytest_config(project.root),
            pytest_args=baseline.pytest_args,
            functions=n_functions,
            candidates=n_candidates,
            checked=checked,
            valid=len(valid),
            rejected=dict(sorted(Counter(r.reason for r in rejections).items())),
            filtered=dict(sorted(filtered.items())),
            rejections=tuple(rejections),
            seconds={k: round(v, 2) for k, v in seconds.items()},
            replay_covered=sum(1 for t in valid if t.replay is not None),
            replay_checked=len(covered) + len(uncovered),
            replay_dropped=dict(sorted(dropped.items())),
            mutation=RateStats.of([t.mutation for t in valid]) if cfg.mutants_per_task else None,
            time_limit_reached=timed_out,
            stopped_early=stopped,
            continued=0 if earlier is None else len(earlier[0]),
        )
        with open(staging / "tasks.jsonl", "w") as fh:
            for task in valid:
                fh.write(task.model_dump_json() + "\n")
        (staging / "summary.json").write_text(summary.model_dump_json(indent=2) + "\n")
        _publish(staging, out)
        return valid, summary
    finally:  # also on SIGINT / SIGTERM (the CLI turns SIGTERM into KeyboardInterrupt): nothing half-written stays
        if warm is not None:
            warm.close()
        shutil.rmtree(workspace, ignore_errors=True)
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


def unreplayed(task: FeatdelTask, task_dir: Path) -> tuple[str, ...]:
    """Qualnames of the targets that no kept replay call exercises (every target when the task has no replay)."""
    data = Grader(task, task_dir).replay_data()
    hit = data.by_target() if data is not None else {}
    return tuple(t.qualname for i, t in enumerate(task.targets) if i not in hit)


def check_replay(task: FeatdelTask, task_dir: Path, cfg: GenerateConfig) -> FeatdelTask | Rejection:
    """The task with its replay gaps, or why it cannot be served: its target tests called a target under a patch
    (the replay cannot reproduce the patch), or a target has no replayed call (unless ``allow_unreplayed`` or the
    replay is off). Known once the replay is recorded, before any test run of the task."""
    if task.not_servable:
        return Rejection(candidate=task.task_id, reason="not-servable", detail=task.not_servable)
    gaps = unreplayed(task, task_dir)
    if gaps and cfg.replay and not cfg.allow_unreplayed:
        return Rejection(
            candidate=task.task_id, reason="no-replay-coverage", detail=f"no replayed call of {', '.join(gaps)}"
        )
    return task.model_copy(update={"unreplayed_targets": gaps})


def check_mutants(
    task: FeatdelTask,
    task_dir: Path,
    cfg: GenerateConfig,
    *,
    sandbox,
    env: TestEnv,
    warm: PytestServer | None = None,
) -> FeatdelTask | Rejection:
    """The task (its replay gaps known) with its mutation score, or why it is not written: a grader that lets
    behaviour-changing mutants through or accepts gold's one result written out (crf_prime/featdel/constant.py), or
    whose mutants' grading outlasts ``mutation_wall_s``."""
    from crf_prime.featdel.strength import mutation_score  # start-up: +25 ms on every command

    if not cfg.mutants_per_task or task.replay is None:
        return task
    budget = time.monotonic() + cfg.mutation_wall_s
    stop = budget if sandbox.deadline is None else min(budget, sandbox.deadline)
    try:
        score: MutationScore | None = mutation_score(
            task,
            task_dir,
            cap=cfg.mutants_per_task,
            sandbox=sandbox.with_deadline(stop),
            env=env,
            tests_wall_s=cfg.mutant_tests_wall_s,
            warm=warm,
        )
    except Exception:
        if time.monotonic() < budget:
            raise
        score = None  # a run stopped at the budget broke the measurement
    if score is None or time.monotonic() >= budget:  # its runs were stopped there: the score is not the grader's
        return Rejection(
            candidate=task.task_id,
            reason="slow-mutants",
            detail=f"grading gold's mutants took over {cfg.mutation_wall_s:g} s (--mutation-wall-s)",
        )
    if score.constant:
        said = f"every replayed call gives gold's one result, and the grader accepts it written out: {score.constant}"
        return Rejection(candidate=task.task_id, reason="constant-outcome", detail=said[:500])
    if score.rate is not None and score.rate < cfg.min_mutation_rate:
        return Rejection(
            candidate=task.task_id,
            reason="weak-grader",
            detail=f"the grader rejects {score.rejected} of {score.behaviour_changing} behaviour-changing mutants "
            f"({score.rate:.0%} < {cfg.min_mutation_rate:.0%}); accepted: {', '.join(score.survivors)}"[:500],
        )
    return task.model_copy(update={"mutation": score})


Checked = tuple[FeatdelTask | None, Rejection | None, Counter[str]]
SHARED_BATCH = 16
"""Candidates validated together: gold's grading run and the replay recording are shared by a batch."""


def validate_batch(
    tasks: list[FeatdelTask],
    task_dir: Path,
    *,
    sandbox,
    env: TestEnv,
    pool: ThreadPoolExecutor,
    collects: Collection[str] = (),
    pycs: Path | None = None,
    warm: PytestServer | None = None,
) -> dict[str, Rejection | None]:
    """:func:`validate_task` for many tasks of one package whose gold obeys the code policy (generate checks
    :func:`gold_violation` before the recording: a large module's check took 0.2 s a task), gold graded once for those
    whose gold tree is the original (crf_prime/featdel/shared.py); the deleted grade and the collection stay per task.
    ``collects``: ids of tasks whose snapshot is known to collect (:func:`collection_untouched`): their collection run
    is skipped."""
    try:
        golds = shared_gold(tasks, task_dir, sandbox=sandbox, env=env, pycs=pycs)
    except Exception as e:  # each task is graded on its own then (and reports its own error)
        logger.warning("featdel: the shared gold run failed (%s); grading task by task", e)
        golds = {}
    results = pool.map(
        lambda t: validate_task(
            t,
            task_dir,
            sandbox=sandbox,
            env=env,
            gold=golds.get(t.task_id),
            collection=t.task_id not in collects,
            pycs=pycs,
            warm=warm,
        ),
        tasks,
    )
    return {t.task_id: r for t, r in zip(tasks, results, strict=True)}


def _with_replay(
    task: FeatdelTask, task_dir: Path, sandbox: Sandbox, env: TestEnv
) -> tuple[FeatdelTask, None, Counter[str]]:
    """The task with its replay recorded (None when gold made no replayable call) and the calls dropped by reason."""

    original = apply_unified_diff(dict(task.broken_files), task.gold_patch)
    try:
        info, dropped = record_replay(task, task_dir, original, sandbox=sandbox, env=env)
    except Exception as e:  # a recording failure leaves the task graded by its tests alone, and says why
        logger.warning("featdel: recording the replay of %s failed: %s: %s", task.task_id, type(e).__name__, e)
        return task, None, Counter({"record-error": 1})
    return servable(task, info, dropped), None, dropped


def _earlier(out: Path, staging: Path, base_sha: str) -> tuple[list[FeatdelTask], GenerateSummary] | None:
    """The tasks and summary of the run at ``out`` that this one continues, its replay files linked into
    ``staging``; None when there is none to continue (absent, finished, or made from another archive)."""
    try:
        before = GenerateSummary.model_validate_json((out / "summary.json").read_text())
        kept = load_tasks(out)
    except (OSError, ValueError, SourceError):
        return None
    if not (before.time_limit_reached or before.stopped_early) or any(t.base_sha256 != base_sha for t in kept):
        return None
    (staging / "replay").mkdir(exist_ok=True)
    for t in kept:
        for name in (t.replay.calls_file, t.replay.expected_file) if t.replay else ():
            shutil.copy2(out / name, staging / name)
    return kept, before


def _remove_unused_replays(task_dir: Path, kept: list[FeatdelTask]) -> None:
    """Delete replay files of valid tasks that were not written (only covered-first places are kept)."""
    wanted = {name for t in kept if t.replay for name in (t.replay.calls_file, t.replay.expected_file)}
    for p in sorted((task_dir / "replay").glob("*")) if (task_dir / "replay").is_dir() else []:
        if f"replay/{p.name}" not in wanted:
            p.unlink()


def check_out(out: Path) -> None:
    """``out`` must be absent, empty, or a task directory written before (it is replaced); checked before any work."""
    output_dir("out", out)
    if out.is_dir() and not (out / "tasks.jsonl").is_file() and any(out.iterdir()):
        raise InputError.field("out", f"{out} exists, is not empty and holds no tasks.jsonl; refusing to replace it")


def _staging_dir(out: Path) -> Path:
    """A new hidden directory beside ``out`` (same filesystem, so publishing is a rename), made with the umask's
    modes (0755 under the usual 022), unlike ``mkdtemp``'s 0700."""
    parent = out.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = parent / f".featdel-staging-{os.getpid()}-{secrets.token_hex(4)}"
    staging.mkdir()
    return staging


def _publish(staging: Path, out: Path) -> None:
    """Replace ``out`` with the finished staging directory (nothing half-written is ever visible)."""
    if out.exists():
        check_out(out)  # again: it may have changed during the run
        old = out.with_name(out.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        out.rename(old)
        staging.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        staging.rename(out)


def load_tasks(task_dir: Path) -> list[FeatdelTask]:
    """Read ``task_dir/tasks.jsonl``; a bad row raises with the file and line."""
    path = task_dir / "tasks.jsonl"
    if not path.is_file():
        raise SourceError(f"{path}: not found (expected a directory written by 'crf-prime featdel generate')")
    tasks = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            tasks.append(FeatdelTask.model_validate_json(line))
        except Exception as e:
            raise SourceError(f"{path}:{i}: invalid task row: {e}") from e
    return tasks


def validate_dir(
    task_dir: Path, *, sandbox: GradingSandbox | None = None, workers: int = 0, progress: ProgressFn | None = None
) -> list[tuple[FeatdelTask, Rejection | None]]:
    """Re-run validation on every task of a generated directory."""
    tasks = load_tasks(task_dir)
    box = Sandbox(sandbox or GradingSandbox())
    envs: dict[str, TestEnv] = {}
    for t in tasks:
        key = json.dumps(t.test_env.model_dump(), sort_keys=True)
        if key not in envs:
            envs[key] = ensure_test_env(t.test_env)
    done = 0
    progress = progress or (lambda phase, d, n: None)

    def one(t: FeatdelTask) -> tuple[FeatdelTask, Rejection | None]:
        env = envs[json.dumps(t.test_env.model_dump(), sort_keys=True)]
        return t, validate_task(t, task_dir, sandbox=box, env=env)

    results = []
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        for r in pool.map(one, tasks):
            results.append(r)
            done += 1
            progress("validate", done, len(tasks))
    return results


__all__ = [
    "DEFAULT_SOURCE",
    "GenerateConfig",
    "SourceInfo",
    "generate",
    "load_tasks",
    "validate_dir",
    "validate_task",
]
