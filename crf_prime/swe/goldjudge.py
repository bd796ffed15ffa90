"""Gold as the judge of in-process tricks: the agent's change must behave like the gold patch on gold's own calls.

A fix can pass the FAIL_TO_PASS tests without fixing anything when the code under test acts on the test process
(an always-equal return value, a patched pytest report, the expected literal read off the caller's frame). The
tests cannot see this; gold's behaviour can. Feature Deletion's equivalence check is reused through its public
functions (``crf_prime.featdel.record`` / ``replay``):

1. Once per instance (the first time an attempt resolves; cached for the process), on a grader-owned tree at
   ``base_commit`` + gold patch + test patch, the FAIL_TO_PASS tests run in the sandbox with Feature Deletion's
   recorder plugin, which pickles every call of the *targets*: the functions and methods the gold patch changes
   that already exist at ``base_commit`` (:func:`changed_functions`; a function gold adds is not something the
   agent must write).
2. Fresh calls are generated from the recorded ones (``inputs.py``, on gold's tree with no tests); gold runs every
   call twice in a box with no tests; the calls gold reproduces, and gold's canonical outcomes, stay in this
   process (never in a tree the agent or the tests can reach).
3. For an attempt whose tests resolve, the same calls run on the agent's tree (tests and test configuration
   removed, ``python -S``: no pytest, no test frame to read) in a fresh box; the outcomes are canonicalised there
   with builtins bound before project code and compared here, exact but for ints vs floats of equal value (as ``==``). Any difference is unresolved.

Where this cannot run, the verdict says why (``not-applicable``) and the tests alone decide: the gold patch changes
no function that exists at ``base_commit``, the runner is not pytest, no call of a target was recorded or
reproducible (unpicklable arguments, calls made under a test's monkeypatch, non-deterministic outcomes), or the
container placement (not built: the replay box needs the host's sandbox).
"""

from __future__ import annotations

import ast
import logging
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from crf_prime.featdel import hide_test_id
from crf_prime.featdel.models import Target
from crf_prime.featdel.record import (
    GENERATED_FOLLOWUPS,
    GENERATED_PER_TARGET,
    MAX_CALLS_PER_TARGET,
    MAX_FOLLOWUPS,
    MAX_INPUT_BYTES,
    gold_runs,
    plain_calls,
    reproduced,
)
from crf_prime.featdel.replay import CALL_TIMEOUT_S, SEQ, compare, lib_dir, module_of, replayed_calls, run_driver
from crf_prime.swe.directives import is_test_path, patch_files
from crf_prime.swe.workspace import remove_tree

logger = logging.getLogger(__name__)

RECORD_WALL_S = 600.0
"""Wall limit of the recording run (gold's FAIL_TO_PASS tests under the recorder)."""
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@")
_TEST_CONFIG = frozenset({"conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"})


class GoldVerdict(BaseModel):
    """What ``trace.info["swebench"]["gold_judge"]`` holds."""

    model_config = ConfigDict(frozen=True)

    verdict: Literal["agree", "disagree", "not-applicable", "off", "not-run"]
    """``not-run``: the tests did not resolve (nothing to judge); ``off``: the defence is switched off."""
    reason: str = ""
    targets: tuple[str, ...] = ()
    """``module.qualname`` of the functions compared."""
    calls: int = 0
    """Calls compared (recorded + generated)."""
    generated: int = 0
    mismatches: int = 0


@dataclass(frozen=True)
class ChangedFunction:
    path: str
    qualname: str
    lineno: int


def changed_lines(patch: str) -> dict[str, set[int]]:
    """New-side line numbers each file's hunks touch (a pure deletion marks the lines on either side of it)."""
    out: dict[str, set[int]] = {}
    for chunk in re.split(r"(?m)^(?=diff --git )", patch):
        paths = patch_files(chunk.split("\n", 1)[0])
        if not paths:
            continue
        lines = out.setdefault(paths[0], set())
        new = None
        for line in chunk.splitlines():
            m = _HUNK.match(line)
            if m:
                new = int(m.group(1))
            elif new is None or line.startswith("\\"):
                continue
            elif line.startswith("+"):
                lines.add(new)
                new += 1
            elif line.startswith("-"):
                lines.update((new - 1, new))
            else:
                new += 1
    return out


def _defs(tree: ast.Module) -> Iterable[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Module-level functions and methods of module-level (and nested) classes, with their qualnames."""
    stack: list[tuple[str, list[ast.stmt]]] = [("", tree.body)]
    while stack:
        prefix, body = stack.pop()
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield prefix + node.name, node
            elif isinstance(node, ast.ClassDef):
                stack.append((f"{prefix}{node.name}.", node.body))


def changed_functions(patch: str, gold: dict[str, str], base: dict[str, str]) -> list[ChangedFunction]:
    """Functions of gold's tree whose lines the gold patch touches and that exist at ``base_commit`` (same path and
    qualname). ``gold``/``base``: source text of the patch's ``.py`` files after/before it (missing: not there)."""
    found: list[ChangedFunction] = []
    for path, lines in changed_lines(patch).items():
        if not path.endswith(".py") or is_test_path(path) or path not in gold or path not in base:
            continue
        try:
            before = {q for q, _ in _defs(ast.parse(base[path]))}
            after = list(_defs(ast.parse(gold[path])))
        except SyntaxError:
            continue
        for qualname, node in after:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if qualname in before and any(first <= n <= (node.end_lineno or node.lineno) for n in lines):
                found.append(ChangedFunction(path, qualname, node.lineno))
    return found


def strip_tests(repo: Path, test_paths: Iterable[str]) -> None:
    """Remove the test patch's files, every test file and every test configuration (the replay box runs no tests)."""
    listed = set(test_paths)
    for p in sorted(repo.rglob("*"), reverse=True):
        if p.is_symlink() or p.is_file():
            rel = p.relative_to(repo).as_posix()
            if rel in listed or is_test_path(rel) or p.name in _TEST_CONFIG or rel.endswith((".pyc", ".pth")):
                p.unlink()


def pythonpath_of(repo: Path) -> tuple[str, ...]:
    """Where the project's packages are imported from: the root, and ``src`` for a src layout."""
    return (".", "src") if (repo / "src").is_dir() else (".",)


@dataclass(frozen=True)
class _TestEnvSpec:
    requirements: tuple[str, ...] = ("project",)
    """Not only pytest: the box gets the interpreter's site-packages (the project's dependencies)."""


@dataclass(frozen=True)
class ReplayTask:
    """The attributes of a Feature Deletion task that its replay functions read, for one SWE instance."""

    task_id: str
    targets: tuple[Target, ...]
    pythonpath: tuple[str, ...]
    seed: int = 0
    test_env: _TestEnvSpec = field(default_factory=_TestEnvSpec)
    replay: None = None
    """No stored replay: gold's outcomes are recorded per process, in the current canonical form."""


@dataclass(frozen=True)
class ReplayEnv:
    """The interpreter the tests run with (a venv: its site-packages go into the box read-only)."""

    python: Path
    venv: Path


@dataclass(frozen=True)
class GoldRecord:
    """Gold's reproduced calls and outcomes for one instance, or why there are none."""

    task: ReplayTask | None = None
    calls: tuple[dict, ...] = ()
    expected: dict[str, object] = field(default_factory=dict)
    not_applicable: str = ""

    @property
    def target_names(self) -> tuple[str, ...]:
        if self.task is None:
            return ()
        return tuple(f"{module_of(t.path, self.task.pythonpath)}.{t.qualname}" for t in self.task.targets)


def record_gold(
    task_id: str,
    gold_repo: Path,
    *,
    base_sources: dict[str, str],
    gold_patch: str,
    test_paths: Iterable[str],
    fail_to_pass: Iterable[str],
    sandbox,
    env: ReplayEnv,
    work: Path,
) -> GoldRecord:
    """Record, derive and check gold's calls (steps 1 and 2 of the module docstring). ``gold_repo``: base + gold
    patch + test patch, grader-owned (the recording run may write into it); ``work``: an empty grader-owned dir."""
    gold_sources = {p: (gold_repo / p).read_text(errors="replace") for p in base_sources if (gold_repo / p).is_file()}
    changed = changed_functions(gold_patch, gold_sources, base_sources)
    if not changed:
        return GoldRecord(not_applicable="the gold patch changes no function that exists at base_commit")
    targets = tuple(Target(path=c.path, qualname=c.qualname, lineno=c.lineno) for c in changed)
    task = ReplayTask(task_id=task_id, targets=targets, pythonpath=pythonpath_of(gold_repo))
    clean = work / "gold" / "repo"
    shutil.copytree(gold_repo, clean, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    strip_tests(clean, test_paths)
    report = _record(task, gold_repo, fail_to_pass, sandbox=sandbox, env=env, work=work / "rec")
    if isinstance(report, str):
        return GoldRecord(task=task, not_applicable=report)
    recorded: list[dict] = report["calls"]
    if not recorded:
        lost = (
            f" ({report['unpicklable']} unpicklable, {report['too_large']} too large)" if report["unpicklable"] else ""
        )
        return GoldRecord(task=task, not_applicable=f"the FAIL_TO_PASS tests made no recordable call of a target{lost}")
    plain = plain_calls(recorded)
    derived = run_driver(
        sandbox,
        env,  # type: ignore[arg-type]  # duck-typed adapter: it has every attribute the replay reads
        task,  # type: ignore[arg-type]  # duck-typed adapter: it has every attribute the replay reads
        work / "gold",
        plain,
        mode="derive",
        seed=0,
        per_target=GENERATED_PER_TARGET,
        followups=GENERATED_FOLLOWUPS,
    )
    calls = plain + (derived if isinstance(derived, list) else [])
    first, second, _ = gold_runs(sandbox, env, task, work / "gold", calls)  # type: ignore[arg-type]  # duck-typed adapter: it has every attribute the replay reads
    keep, expected, dropped = reproduced(calls, first, second, recorded)
    if not keep:
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(dropped.items()))
        return GoldRecord(
            task=task, not_applicable=f"gold reproduces none of its recorded calls outside pytest ({why})"
        )
    return GoldRecord(task=task, calls=tuple(keep), expected=expected)


def _record(
    task: ReplayTask, repo: Path, node_ids: Iterable[str], *, sandbox, env: ReplayEnv, work: Path
) -> dict | str:
    """The recorder's report of gold's FAIL_TO_PASS run, or why there is none."""
    import json
    import pickle

    lib = lib_dir(work / "lib", plugin=True)
    hide_test_id.install_into(lib)
    out = work / "out" / "recorded.pkl"
    out.parent.mkdir(parents=True)
    cfg = {
        "targets": [{"module": module_of(t.path, task.pythonpath), "qualname": t.qualname} for t in task.targets],
        "root": str(repo.resolve()),
        "source_files": sorted(
            p.relative_to(repo).as_posix()
            for p in repo.rglob("*.py")
            if not is_test_path(p.relative_to(repo).as_posix())
        ),
        "out": str(out),
        "max_calls": MAX_CALLS_PER_TARGET,
        "max_calls_by_target": {},
        "max_followups": MAX_FOLLOWUPS,
        "max_bytes": MAX_INPUT_BYTES,
        "dedup_by_target": True,
    }
    (lib / "record.json").write_text(json.dumps(cfg))
    pythonpath = os.pathsep.join([str(lib), *(str(repo / p) for p in task.pythonpath)])
    argv = [str(env.python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", hide_test_id.MODULE]
    argv += ["-p", "crf_featdel_record", *node_ids]
    from crf_prime.sandbox import SandboxLimits

    base = sandbox.limits if hasattr(sandbox, "limits") else SandboxLimits()
    limits = base.model_copy(update={"wall_seconds": RECORD_WALL_S})
    result = sandbox.run(
        argv,
        workdir=Path(os.path.commonpath([repo, work])),  # the tree and the recorder, writable
        cwd=repo,
        ro_binds=[env.venv],
        protected=[lib],
        env={"PYTHONPATH": pythonpath, "PATH": f"{env.python.parent}:/usr/local/bin:/usr/bin:/bin"},
        limits=limits,
    )
    if not out.is_file():
        logger.warning(
            "%s: the recording run wrote nothing:\n%s",
            task.task_id,
            (result.stdout or "")[-2000:] + (result.stderr or "")[-2000:],
        )
        return f"calls not recorded: the recording run wrote nothing (pytest exit {result.exit_code})"
    with open(out, "rb") as fh:
        report = pickle.load(fh)
    if report["unresolved"]:
        return f"calls not recorded: the recorder cannot find {'; '.join(report['unresolved'])[:300]}"
    return report


def judge(record: GoldRecord, agent_repo: Path, *, sandbox, env: ReplayEnv) -> GoldVerdict:
    """Step 3: gold's calls on ``agent_repo`` (a grader-owned copy of the graded tree, tests already stripped: it is
    consumed), compared with gold's outcomes here."""
    if record.task is None or not record.calls:
        return GoldVerdict(verdict="not-applicable", reason=record.not_applicable, targets=record.target_names)
    seed = int.from_bytes(os.urandom(4), "little")
    got = run_driver(
        sandbox,
        env,  # type: ignore[arg-type]  # duck-typed adapter: it has every attribute the replay reads
        record.task,  # type: ignore[arg-type]  # duck-typed adapter: it has every attribute the replay reads
        agent_repo.parent,
        list(record.calls),
        seed=seed,
        hash_seed=seed,
        call_timeout_s=CALL_TIMEOUT_S,
    )
    bad, detail = compare(record.expected, got)
    return GoldVerdict(
        verdict="disagree" if bad else "agree",
        reason=detail,
        targets=record.target_names,
        calls=replayed_calls(record.expected),
        generated=sum(1 for c in record.calls if c.get("derived")),
        mismatches=len({i.removesuffix(SEQ) for i in bad}),
    )


_CACHE: dict[tuple, GoldRecord] = {}
_LOCKS: dict[tuple, threading.Lock] = {}
_GUARD = threading.Lock()


def cached_record(key: tuple, make) -> GoldRecord:
    """``make()`` once per ``key`` in this process (concurrent callers wait for the first)."""
    with _GUARD:
        lock = _LOCKS.setdefault(key, threading.Lock())
    with lock:
        if key not in _CACHE:
            work = Path(tempfile.mkdtemp(prefix="crf-swe-gold-"))
            try:
                _CACHE[key] = make(work)
            finally:
                errors = remove_tree(work)
                if errors:
                    logger.error("could not remove %s: %s", work, "; ".join(errors[:5]))
        return _CACHE[key]


__all__ = [
    "GoldRecord",
    "GoldVerdict",
    "ReplayEnv",
    "ReplayTask",
    "cached_record",
    "changed_functions",
    "changed_lines",
    "judge",
    "record_gold",
    "strip_tests",
]
