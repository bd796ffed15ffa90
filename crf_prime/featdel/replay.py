"""The replay verdict: the agent's code on gold's recorded (and derived) calls, in a box with no tests and no answers.

At grading the agent's tree (the same allow-listed changes the test run takes) is built again without any test file
or test configuration, bound read-only into a fresh sandbox together with the driver (``replay_box.py``), cloudpickle
and the call inputs; the interpreter runs with ``-S`` (no site-packages: no pytest). The driver forks one child per
call, in a shuffled order, and writes each canonical outcome; the comparison with gold's outcomes, which stay in the
task directory on the host, happens here, exact (ints and floats by value, as ``==``). A missing, crashed, timed-out or unreadable result
is a mismatch (score 0), never a skip.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from crf_prime.errors import InfraError
from crf_prime.extras import require
from crf_prime.featdel import lookup_guard
from crf_prime.featdel.hide_test_id import LOOKUP_MODULE
from crf_prime.featdel.inputs import FLOAT_EXACT
from crf_prime.featdel.models import FeatdelTask
from crf_prime.featdel.pycache import link_sources
from crf_prime.featdel.replay_box import CANON, SEQUENCE_SUFFIX, sequence_timeout
from crf_prime.featdel.source import is_metadata, is_test_path
from crf_prime.featdel.testenv import TestEnv
from crf_prime.sandbox import Sandbox

LENIENT = "may_raise"
"""Key of gold's outcome of a call on which raising is accepted too (validation order; crf_prime/featdel/record.py)."""
TYPE_LOOSE = "type_loose"
"""Key of gold's outcome of a call that passes a seed's data under another type (``inputs.retyped``): compared up to
int/float and list/tuple (:func:`loosened`), and raising is accepted (the tests never used that type)."""
CALL_TIMEOUT_S = 5.0
"""Wall-clock limit of one replayed call (its forked child is killed after it)."""
SEQUENCE = True
"""Also replay every call in one process, one after another, and compare where gold's outcome does not depend on
what ran before (False, the hack suites only: each call then starts from a fresh import, so code right only on the
first call of a process goes unseen)."""
RETYPED = True
"""Compare the calls that pass a seed's data under another type (False, the hack suites only: code fixed only for the
exact types the tests used then goes unseen)."""
SEQ = SEQUENCE_SUFFIX
_DRIVER = Path(__file__).with_name("replay_box.py")


class ReplayError(InfraError):
    """Infrastructure failure of the replay (the task's replay files are missing or altered)."""


@dataclass(frozen=True)
class ReplayVerdict:
    """Outcome of replaying one tree."""

    calls: int
    mismatches: tuple[str, ...]
    """Ids of calls whose outcome differs from gold's (or is missing); ``id@seq``: in the in-sequence run."""
    detail: str = ""
    """First mismatch, described without gold's values."""
    timed_out: bool = False
    """Every mismatched call it ran outran its limit (no outcome told from gold's): a gold mutant under a limit shorter
    than the served one may still have passed there."""

    @property
    def ok(self) -> bool:
        return not self.mismatches

    @property
    def mismatched_calls(self) -> int:
        """Distinct calls with a mismatch (alone, in sequence or both)."""
        return len({i.removesuffix(SEQ) for i in self.mismatches})


def module_of(path: str, pythonpath: tuple[str, ...]) -> str:
    """Importable module name of a source file, given the directories the project puts on ``sys.path``."""
    rel = path
    for p in sorted((p for p in pythonpath if p not in (".", "")), key=len, reverse=True):
        if path.startswith(p.rstrip("/") + "/"):
            rel = path[len(p.rstrip("/")) + 1 :]
            break
    return rel.removesuffix(".py").replace("/", ".").removesuffix(".__init__")


def targets_of(task: FeatdelTask) -> list[dict[str, str]]:
    return [{"module": module_of(t.path, task.pythonpath), "qualname": t.qualname} for t in task.targets]


def lib_dir(dest: Path, *, plugin: bool = False) -> Path:
    """Copy the driver and its input generator (and, for recording, the pytest plugin) plus cloudpickle into ``dest``."""
    cloudpickle = require("cloudpickle", "featdel")
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(_DRIVER, dest / "replay_box.py")
    shutil.copy2(_DRIVER.with_name("inputs.py"), dest / "inputs.py")
    shutil.copy2(_DRIVER.with_name("lookup_guard.py"), dest / f"{LOOKUP_MODULE}.py")
    if plugin:
        shutil.copy2(_DRIVER.with_name("record_plugin.py"), dest / "crf_featdel_record.py")
    shutil.copytree(
        Path(cloudpickle.__path__[0]),  # the package directory
        dest / "cloudpickle",
        ignore=shutil.ignore_patterns("__pycache__"),
        dirs_exist_ok=True,
    )
    return dest


def strip_tests(task: FeatdelTask, repo: Path) -> None:
    """Remove every test file and test configuration from a tree (the replay box holds no tests). The project's
    metadata stays: its import may read its own version (``importlib.metadata.version``)."""
    for rel in task.protected_files:
        if not is_metadata(rel):
            (repo / rel).unlink(missing_ok=True)
    for p in sorted(repo.rglob("*"), reverse=True):
        rel = p.relative_to(repo).as_posix()
        if p.is_file() and (is_test_path(rel) or rel.endswith(".pyc")):
            p.unlink()


def interpreter(env: TestEnv) -> Path:
    """The base interpreter behind the test venv (the box gets no venv, so no pytest)."""
    return Path(os.path.realpath(env.python))


def needs_site(task: FeatdelTask) -> bool:
    """Projects with runtime dependencies need the test venv's site-packages (which also holds pytest)."""
    return any(not r.startswith(("pytest==", "coverage==")) for r in task.test_env.requirements)


def _tree_paths(task: FeatdelTask, env: TestEnv, repo: Path) -> list[str]:
    """The box's import path for one tree: the project's source roots, then the test venv's site-packages if needed."""
    paths = [str((repo / p).resolve()) for p in (task.pythonpath or (".",))]
    if needs_site(task):
        paths += [str(p) for p in sorted((env.venv / "lib").glob("python3*/site-packages"))]
    return paths


def order_seed() -> int:
    """A fresh seed of a replay's call order (and the box's hash seed): no grading run sees the calls in an order
    known in advance."""
    return int.from_bytes(os.urandom(4), "little")


def imported_modules(repo: Path, files: Collection[str]) -> list[str]:
    """Module names that ``files`` of the tree at ``repo`` import absolutely (``import a.b``, ``from a.b import c``):
    a many-tree box imports the standard library's among them once, before forking its trees (``replay_box``)."""
    names: set[str] = set()
    for rel in files:
        try:
            names |= _imports(hashlib.sha256(source := (repo / rel).read_bytes()).digest(), source)
        except OSError:
            continue
    return sorted(names)


_IMPORTS: dict[bytes, frozenset[str]] = {}
"""A source file's absolute imports by the SHA-256 of its bytes: a task's trees share all their files but one, and
each of its boxes asks again (parsing a package's files took 50 ms a box)."""


def _imports(digest: bytes, source: bytes) -> frozenset[str]:
    if (known := _IMPORTS.get(digest)) is not None:
        return known
    names: set[str] = set()
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        tree = None
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module)
    if len(_IMPORTS) >= 4096:  # a long run's many packages: start again rather than grow
        _IMPORTS.clear()
    _IMPORTS[digest] = found = frozenset(names)
    return found


Sites = Mapping[str, Sequence[int]]
"""Where a tree's project code calls ``getattr``/``setattr``/``delattr`` with a computed name (file -> lines)."""


def _lookups(repo: Path, sites: Sites | None) -> dict | None:
    """The lookup guard's settings for the box's tree (crf_prime/featdel/lookup_guard.py), None without sites."""
    if sites is None:
        return None
    return lookup_guard.settings({str(repo.resolve() / rel): lines for rel, lines in sites.items()})


def _run_wall(call_timeout_s: float, n_calls: int, sequence: bool) -> float:
    """Wall-clock allowance of one tree's replay of ``n_calls`` calls (beyond the box's start-up)."""
    wall = min(call_timeout_s + 0.5 * n_calls, 270.0)
    return wall + sequence_timeout(call_timeout_s, n_calls) if sequence else wall


def run_driver(
    sandbox: Sandbox,
    env: TestEnv,
    task: FeatdelTask,
    run_dir: Path,
    calls: list[dict],
    *,
    mode: str = "run",
    seed: int = 0,
    hash_seed: int = 0,
    per_target: int = 60,
    followups: int = 4,
    call_timeout_s: float = CALL_TIMEOUT_S,
    stop_on_timeout: bool = True,
    wall_seconds: float | None = None,
    strict: bool = True,
    reach: dict[str, list[int]] | None = None,
    lookups: Sites | None = None,
    alone: bool = True,
    sequence: bool | None = None,
    derived_timeout_s: float | None = None,
) -> object:
    """Run the driver on ``run_dir/repo`` (already built, tests stripped); returns its output, or None if none.
    ``lookups``: the lookup guard's sites in that tree (none: no guard).
    ``stop_on_timeout=False`` runs every call even after one timed out; ``wall_seconds`` replaces the box's wall limit;
    ``strict=False`` lets the box read values through methods their class may override (hack suites only);
    ``reach`` (file path under ``run_dir/repo`` -> lines): each call alone also says which of these lines it ran;
    ``alone``, ``sequence``: run each call alone (a child each), all of them in sequence (one child; default
    ``SEQUENCE``); ``derived_timeout_s``: a shorter limit for each generated call alone (a call that timed out alone
    is left out of the sequence)."""
    sequence = SEQUENCE if sequence is None else sequence
    result_path = run_dir / "out" / ("derived.pkl" if mode == "derive" else "results.json")
    cfg = {
        "mode": mode,
        "paths": _tree_paths(task, env, run_dir / "repo"),
        "lookups": _lookups(run_dir / "repo", lookups),
        "out": str(result_path),
        "seed": seed,
        "per_target": per_target,
        "followups": followups,
        "stop_on_timeout": stop_on_timeout,
        "strict": strict,
        "sequence": sequence,
        "alone": alone,
        "reach": {str((run_dir / "repo" / rel).resolve()): lines for rel, lines in (reach or {}).items()},
        "derived_timeout_s": derived_timeout_s,
    }
    if wall_seconds is None:
        wall_seconds = 30.0 + _run_wall(call_timeout_s, len(calls), sequence) if mode == "run" else 120.0
    repos = [run_dir / "repo"]
    _launch(sandbox, env, task, run_dir, repos, [result_path], calls, cfg, call_timeout_s, wall_seconds, hash_seed)
    if not result_path.is_file():
        return None
    if mode == "derive":
        with open(result_path, "rb") as fh:
            return pickle.load(fh)
    return _results(result_path)


def run_variants(
    sandbox: Sandbox,
    env: TestEnv,
    task: FeatdelTask,
    run_dir: Path,
    trees: int,
    calls: list[dict],
    *,
    seed: int,
    sequence: bool,
    call_timeout_s: float = CALL_TIMEOUT_S,
    strict: bool = True,
    lookups: list[Sites | None] | None = None,
    only: list[int] | None = None,
    differs: dict[str, str] | None = None,
    alone: list[Collection[str] | None] | None = None,
) -> list[object]:
    """Replay ``calls`` on each of the trees ``run_dir/v{i}/repo`` (built, tests stripped) in ONE box: the driver
    starts once and forks a child per tree that imports that tree alone (mutation testing grades many gold mutants
    of one task). Each tree's output as :func:`run_driver` returns it, in order. ``lookups``: each tree's lookup
    guard sites (:func:`run_driver`); ``only``: the trees to run (default all ``trees``); ``differs``: gold's judged
    outcome of each call as JSON text (:func:`judged_texts`), given only for trees of gold's own code: a tree stops
    at its first call whose outcome text differs; ``alone``: per tree, the ids of the calls it runs alone (None:
    every call; the sequence is always whole)."""
    picked = list(range(trees)) if only is None else only
    alone_of = alone or [None] * trees
    repos = [run_dir / f"v{i}" / "repo" for i in picked]
    wall = _run_wall(call_timeout_s, len(calls), sequence) + 10.0
    outs = [run_dir / "out" / f"v{i}.json" for i in picked]
    sites_of = lookups or [None] * trees
    cfg = {
        "mode": "run",
        "variants": [
            {
                "paths": _tree_paths(task, env, repo),
                "lookups": _lookups(repo, sites),
                "out": str(out),
                "wall_s": wall,
                "alone": None if ids is None else sorted(ids),
            }
            for repo, out, sites, ids in zip(
                repos, outs, [sites_of[i] for i in picked], [alone_of[i] for i in picked], strict=True
            )
        ],
        "seed": seed,
        "stop_on_timeout": True,
        "strict": strict,
        "sequence": sequence,
        "differs": differs,
        "preload": imported_modules(repos[0], task.source_files) if repos else [],
    }
    _launch(sandbox, env, task, run_dir, repos, outs, calls, cfg, call_timeout_s, 30.0 + wall * len(picked), seed)
    return [_results(out) if out.is_file() else None for out in outs]


def _launch(
    sandbox: Sandbox,
    env: TestEnv,
    task: FeatdelTask,
    run_dir: Path,
    repos: list[Path],
    outputs: list[Path],
    calls: list[dict],
    cfg: dict,
    call_timeout_s: float,
    wall_seconds: float,
    hash_seed: int,
) -> None:
    """Write the box's inputs under ``run_dir`` and run the driver there with ``repos`` and its inputs read-only
    (``outputs``: the files the driver writes, removed first so that a stale one never reads as a result)."""
    lib = lib_dir(run_dir / "lib")
    inputs, out = run_dir / "in", run_dir / "out"
    inputs.mkdir(exist_ok=True)
    out.mkdir(exist_ok=True)
    for p in outputs:
        p.unlink(missing_ok=True)
    with open(inputs / "calls.pkl", "wb") as fh:  # what gold's run of each call reached stays with the host
        pickle.dump([{k: v for k, v in c.items() if k != "lines"} for c in calls], fh, protocol=4)
    cfg = {
        **cfg,
        "targets": targets_of(task),
        "calls": str(inputs / "calls.pkl"),
        "timeout_s": call_timeout_s,
        "canon": task.replay.canon if task.replay is not None else CANON,  # gold's outcomes' form
    }
    (inputs / "config.json").write_text(json.dumps(cfg))
    # no -E: the box's environment is only the one given here, and -E would ignore its PYTHONHASHSEED
    sandbox.with_limits(wall_seconds=wall_seconds).run(
        [str(interpreter(env)), "-S", "-s", str(lib / "replay_box.py"), str(inputs / "config.json")],
        workdir=run_dir,
        cwd=repos[0],
        ro_binds=[env.venv] if needs_site(task) else [],
        protected=[*repos, lib, inputs],
        env={"PYTHONHASHSEED": str(hash_seed), "PYTHONDONTWRITEBYTECODE": "1"},
    )


def _results(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except ValueError:
        return None


def load_replay(task: FeatdelTask, task_dir: Path) -> tuple[list[dict], dict[str, object]]:
    """(call inputs, gold's outcomes) of a task, checked against their recorded SHA-256."""
    info = task.replay
    assert info is not None
    blobs = {}
    for name, digest in ((info.calls_file, info.calls_sha256), (info.expected_file, info.expected_sha256)):
        path = task_dir / name
        try:
            data = path.read_bytes()
        except FileNotFoundError as e:
            raise ReplayError(f"task {task.task_id}: replay file {path} is missing") from e
        if hashlib.sha256(data).hexdigest() != digest:
            raise ReplayError(f"task {task.task_id}: replay file {path} does not match its recorded hash")
        blobs[name] = data
    return pickle.loads(blobs[info.calls_file]), json.loads(blobs[info.expected_file])


def compare(expected: dict[str, object], got: object) -> tuple[tuple[str, ...], str]:
    """Ids whose judged outcome (:func:`judged`) differs from gold's (:func:`_agrees`) and a description
    of the first."""
    if not SEQUENCE:
        expected = {i: want for i, want in expected.items() if not i.endswith(SEQ)}
    if not RETYPED:
        expected = {i: w for i, w in expected.items() if not (isinstance(w, dict) and w.get(TYPE_LOOSE))}
    if not isinstance(got, dict):
        return tuple(sorted(expected)), "the replay produced no result (crashed, exited early or ran out of time)"
    bad = tuple(sorted(i for i, want in expected.items() if not _agrees(want, got.get(i))))
    if not bad:
        return (), ""
    first = next((i for i in bad if i in got), bad[0])  # calls after a timeout are never run: show the timeout
    kind, want_kind = _kind(got.get(first)), _kind(expected[first])
    same = " (same kind, different value or state)" if kind == want_kind else ""
    where = (
        f"call {first.removesuffix(SEQ)}, run after the others in one process"
        if first.endswith(SEQ)
        else f"call {first}"
    )
    return bad, f"{where}: the original {want_kind}, this tree {kind}{same}"


def sequenced(calls: list[dict], expected: dict[str, object], first: dict, second: dict) -> dict[str, object]:
    """``expected`` plus, for each kept call on which gold's outcome does not depend on what ran before it (the same
    alone and in both of gold's in-sequence runs, two different orders), the same outcome under the call's
    in-sequence key: the replay then checks it there too."""
    extra = {
        c["id"] + SEQ: expected[c["id"]]
        for c in calls
        if c["id"] in expected and first.get(c["id"] + SEQ) == first.get(c["id"]) == second.get(c["id"] + SEQ)
    }
    return {**expected, **extra}


def replayed_calls(expected: dict[str, object]) -> int:
    """Distinct calls behind ``expected`` (a call checked alone and in sequence counts once)."""
    return sum(1 for i in expected if not i.endswith(SEQ))


def _agrees(want: object, got: object) -> bool:
    """Gold's outcome ``want`` and the tree's ``got`` agree: equal up to int vs float of the same value (Python's own
    ``==``, which the tests use), and for a retyped call up to list vs tuple too; raising is also fine where gold's
    is marked lenient or the call is retyped."""
    if got == want:  # most calls: what the rest decides for two equal trees, without rebuilding them
        return True
    raised = isinstance(got, dict) and "raised" in got
    retyped = isinstance(want, dict) and bool(want.get(TYPE_LOOSE))
    if isinstance(want, dict) and (want.get(LENIENT) or retyped) and raised:
        return True
    return loosened(judged(narrowed(got, want)), sequences=retyped) == loosened(judged(want), sequences=retyped)


def loosened(tree: object, *, sequences: bool = False) -> object:
    """A canonical outcome tree with ints and floats as one number kind (equal values equal, as ``1 == 1.0``) and,
    with ``sequences``, tuples as lists; sets and dicts re-sorted, since their order follows the canonical text.
    Bools stay bools and ints beyond a float's exact range stay ints."""
    if isinstance(tree, dict):
        return {k: loosened(v, sequences=sequences) for k, v in tree.items()}
    if not isinstance(tree, list):
        return tree
    if len(tree) == 2 and isinstance(tree[0], str):
        tag, payload = tree
        if tag == "int" and type(payload) is int and abs(payload) <= FLOAT_EXACT:
            return ["number", repr(float(payload) + 0.0)]
        if tag == "float" and isinstance(payload, str):
            return ["number", repr(float(payload) + 0.0)]  # + 0.0: -0.0 is 0
        if tag in ("set", "frozenset", "dict") and isinstance(payload, list):
            items = (loosened(x, sequences=sequences) for x in payload)
            return [tag, sorted(items, key=lambda x: json.dumps(x, sort_keys=True))]
        return ["list" if sequences and tag == "tuple" else tag, loosened(payload, sequences=sequences)]
    return [loosened(x, sequences=sequences) for x in tree]


def narrowed(got: object, want: object) -> object:
    """``got`` with the instance attributes gold's object at the same place never had left out. An object's state
    is specified by gold's attribute names: each must be there with gold's value, while a name of the agent's own (a
    cache, a helper) is its business. Nothing can hide there: every replayed call starts from gold's state, so an
    extra attribute can only change what the call returns or leaves in gold's names, which are compared."""
    if isinstance(got, dict) and isinstance(want, dict):
        return {k: narrowed(v, want[k]) if k in want else v for k, v in got.items()}
    if not (isinstance(got, list) and isinstance(want, list)):
        return got
    if len(got) == 2 and len(want) == 2 and got[0] == want[0] == "object" and isinstance(got[1], list):
        if isinstance(want[1], list) and len(got[1]) == 2 and len(want[1]) == 2 and got[1][0] == want[1][0]:
            return ["object", [got[1][0], _narrowed_state(got[1][1], want[1][1])]]
        return got
    if len(got) != len(want):
        return got
    return [narrowed(g, w) for g, w in zip(got, want, strict=True)]


def _narrowed_state(got: object, want: object) -> object:
    """An object's state entries (``["dict", [[name, tree], ...]]`` first, then slots, builtin base, reduction)
    narrowed to gold's attribute names."""
    if not (isinstance(got, list) and isinstance(want, list)):
        return got

    def split(state: list) -> tuple[list | None, list]:
        found = [e for e in state if isinstance(e, list) and len(e) == 2 and e[0] == "dict" and isinstance(e[1], list)]
        return (found[0][1] if found else None), [e for e in state if not found or e is not found[0]]

    got_dict, got_rest = split(got)
    want_dict, want_rest = split(want)
    narrowed_rest = narrowed(got_rest, want_rest)
    rest = narrowed_rest if isinstance(narrowed_rest, list) else got_rest  # a list in, a list out
    if got_dict is None or want_dict is None:  # gold has no __dict__ (slots only): the agent's own are its business
        return rest if want_dict is None else got
    names = {e[0]: e[1] for e in want_dict if isinstance(e, list) and len(e) == 2 and isinstance(e[0], str)}
    items = [
        [e[0], narrowed(e[1], names[e[0]])]
        for e in got_dict
        if not (isinstance(e, list) and len(e) == 2 and isinstance(e[0], str)) or e[0] in names
    ]
    return [["dict", items], *rest]


def judged(outcome: object) -> object:
    """What of a call's outcome is compared. A raise compares as "raised" only: which exception type, with which
    message, after which validation step and with what state left behind is behaviour the task does not specify
    (issue 25's false positives: another exception type, validation before an early return, a stdlib base method).
    Follow-up calls of a returned callable are judged the same way."""
    if not isinstance(outcome, dict):
        return outcome
    if "raised" in outcome:
        return {"raised": True}
    outcome = {k: v for k, v in outcome.items() if k not in (LENIENT, TYPE_LOOSE)}
    if "callable" in outcome and isinstance(outcome["callable"], list):
        return {**outcome, "callable": [judged(f) for f in outcome["callable"]]}
    return outcome


def _kind(outcome: object) -> str:
    """What a call's outcome was (returned, raised, callable, timeout, crashed, no_result, ...), without values."""
    if not isinstance(outcome, dict):
        return "missing"
    return next((k for k in sorted(outcome) if k not in ("args_after", LENIENT, TYPE_LOOSE)), "missing")


def _served(task: FeatdelTask, task_dir: Path, *, generated: bool) -> tuple[list[dict], dict[str, object]]:
    """The calls to replay and gold's outcomes (``generated=False``: only the calls the tests made)."""
    calls, expected = load_replay(task, task_dir)
    if not generated:
        calls = [c for c in calls if not c.get("derived")]
        expected = {i: expected[i] for c in calls for i in (c["id"], c["id"] + SEQ) if i in expected}
    return calls, expected


def replay_tree(
    sandbox: Sandbox,
    env: TestEnv,
    task: FeatdelTask,
    task_dir: Path,
    build: Callable[[Path], None],
    *,
    call_timeout_s: float = CALL_TIMEOUT_S,
    strict: bool = True,
    generated: bool = True,
    lookups: Sites | None = None,
) -> ReplayVerdict:
    """Replay the task's calls on a fresh tree that ``build(dest)`` writes (the agent's allow-listed changes, never a
    tree a test run could have written into), tests stripped, and compare with gold's outcomes here on the host.
    ``strict=False`` turns the box's steering-proof canonical reads off, ``generated=False`` replays only the calls
    the tests made (hack suites only)."""
    calls, expected = _served(task, task_dir, generated=generated)
    run_dir = Path(tempfile.mkdtemp(prefix="crf-featdel-replay-"))
    try:
        build(run_dir / "repo")
        strip_tests(task, run_dir / "repo")
        seed = order_seed()
        got = run_driver(
            sandbox,
            env,
            task,
            run_dir,
            calls,
            seed=seed,
            hash_seed=seed,
            call_timeout_s=call_timeout_s,
            strict=strict,
            lookups=lookups,
        )
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    bad, detail = compare(expected, got)
    return ReplayVerdict(calls=replayed_calls(expected), mismatches=bad, detail=detail)


def replay_trees(
    sandbox: Sandbox,
    env: TestEnv,
    task: FeatdelTask,
    task_dir: Path,
    builds: list[Callable[[Path], None]],
    *,
    call_timeout_s: float = CALL_TIMEOUT_S,
    strict: bool = True,
    generated: bool = True,
    lookups: list[Sites | None] | None = None,
    pycs: Path | None = None,
    stop_early: bool = False,
    alone: list[Collection[str] | None] | None = None,
) -> list[ReplayVerdict]:
    """:func:`replay_tree` for many trees in one box (mutation testing: every mutant of a task's gold). ``pycs``: the
    base's compiled modules for every tree (``pycache.source_entry``; gold and its mutants only, never an agent's
    tree).

    ``alone`` (gold's mutants only): per tree, the ids of the calls it runs alone, None for every call. A call whose
    gold run never reached the mutated code behaves as gold's does (the rest of the tree is gold's, byte for byte),
    so its outcome is taken as gold's; what a tree runs in sequence is always every call. Where the trace missed a
    reach, the call that would have differed is not run: the mutant can only look weaker, never stronger.

    ``stop_early`` (gold and its mutants only: the box then sees gold's outcomes): each tree stops at its first call
    whose outcome differs from gold's as text; the host judges the calls it ran, and a tree stopped at a difference
    the host does not count (an int for a float) is replayed again in full. The verdicts are the ones without it;
    only the mismatches listed are fewer (the first found)."""
    calls, expected = _served(task, task_dir, generated=generated)
    run_dir = Path(tempfile.mkdtemp(prefix="crf-featdel-replays-"))
    try:
        for i, build in enumerate(builds):
            build(run_dir / f"v{i}" / "repo")
            strip_tests(task, run_dir / f"v{i}" / "repo")
            link_sources(pycs, run_dir / f"v{i}" / "repo")
        seed = order_seed()

        def run(only: list[int] | None, differs: dict[str, str] | None) -> list[object]:
            return run_variants(
                sandbox,
                env,
                task,
                run_dir,
                len(builds),
                calls,
                seed=seed,
                sequence=SEQUENCE,
                call_timeout_s=call_timeout_s,
                strict=strict,
                lookups=lookups,
                only=only,
                differs=differs,
                alone=alone,
            )

        def taken(i: int, got: object) -> object:
            return with_gold_alone(expected, None if alone is None else alone[i], got)

        def verdict(ran: dict[str, object], got: object) -> ReplayVerdict:
            bad, detail = compare(ran, got)
            return ReplayVerdict(
                calls=replayed_calls(expected), mismatches=bad, detail=detail, timed_out=only_timeouts(bad, got)
            )

        outs = [taken(i, got) for i, got in enumerate(run(None, judged_texts(expected) if stop_early else None))]
        verdicts, again = [], []
        for i, got in enumerate(outs):
            ran = {k: w for k, w in expected.items() if k in got} if stop_early and isinstance(got, dict) else expected
            verdicts.append(verdict(ran, got))
            if verdicts[-1].ok and len(ran) < len(expected):
                again.append(i)  # stopped where the host sees no mismatch: its verdict needs every call
        for i, got in zip(again, run(again, None) if again else [], strict=True):
            verdicts[i] = verdict(expected, taken(i, got))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    return verdicts


def only_timeouts(bad: tuple[str, ...], got: object) -> bool:
    """Whether the mismatched calls ``bad`` that ran all outran their limit (calls after a timeout never run)."""
    ran = [got[i] for i in bad if i in got] if isinstance(got, dict) else []
    return bool(ran) and all(_kind(outcome) == "timeout" for outcome in ran)


def with_gold_alone(expected: dict[str, object], ran: Collection[str] | None, got: object) -> object:
    """A gold mutant's outcomes ``got`` with gold's ``expected`` ones for the calls it did not run alone (``ran``:
    the ids it ran alone, None for every call): those calls never reached the mutated code in gold's run, so the
    mutant's run of them is gold's."""
    if ran is None or not isinstance(got, dict):
        return got
    return {**{k: w for k, w in expected.items() if not k.endswith(SEQ) and k not in ran}, **got}


def judged_texts(expected: dict[str, object]) -> dict[str, str]:
    """Gold's judged outcome of each call run alone as JSON text with sorted keys (the box's ``judged_text``): the
    box stops a gold mutant's tree at the first call whose text differs."""
    return {i: json.dumps(judged(want), sort_keys=True) for i, want in expected.items() if not i.endswith(SEQ)}


__all__ = [
    "CALL_TIMEOUT_S",
    "ReplayError",
    "ReplayVerdict",
    "compare",
    "load_replay",
    "loosened",
    "module_of",
    "only_timeouts",
    "replay_tree",
    "replay_trees",
    "replayed_calls",
    "run_driver",
    "run_variants",
    "sequenced",
    "strip_tests",
    "with_gold_alone",
]
