"""The coverage baseline: one run of the whole suite in the sandbox, under coverage with one dynamic context per
test node id, which says which tests execute which line; the suite must pass as run.

The run is cached per source (:mod:`crf_prime.featdel.suite_cache`): the setup loop's own run, when it is this run
(same venv, same arguments, every test passing), is stored under the baseline's key, so generation after the setup
loop reads it back instead of running the suite again; so does a second generation of the same package.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from crf_prime.extras import require
from crf_prime.featdel import suite_cache
from crf_prime.featdel.models import TestEnvSpec
from crf_prime.featdel.runner import PytestRun, junit_key, node_id, run_pytest
from crf_prime.featdel.source import Project, SourceError, protected_paths
from crf_prime.featdel.testenv import TestEnv
from crf_prime.placement import GradingSandbox
from crf_prime.sandbox import Sandbox

if TYPE_CHECKING:
    from crf_prime.featdel.generate import GenerateConfig


@dataclass
class Baseline:
    project: Project
    env: TestEnv
    pytest_args: tuple[str, ...]
    suite_tests: int
    coverage: dict[str, dict[int, set[str]]]
    """path -> line -> node ids executing it."""
    collection: dict[str, set[int]] | None = None
    """path -> lines executed outside every test (importing and collecting the suite, session set-up/teardown);
    None: not known (every snapshot's collection is then checked)."""
    seconds: dict[str, float] = field(default_factory=dict)
    spec: TestEnvSpec | None = None
    """The test venv's spec (pinned when the project declares test requirements)."""
    cached: bool = False
    """Read back from the suite cache (no suite run)."""


_PYTEST_EXITS = {
    1: "tests failed",
    2: "interrupted (an error during collection)",
    3: "internal error",
    4: "usage error (an option or plugin pytest does not know)",
    5: "no tests collected",
}


def suite_failure(run: PytestRun) -> str:
    """Why a suite did not pass, in one phrase: the pytest exit status and the first missing module, if any."""
    if run.limit_hit:
        return f"sandbox limit hit: {run.limit_hit}"
    text = f"pytest exit {run.exit_code}: {_PYTEST_EXITS.get(run.exit_code or 0, 'unknown status')}"
    missing = re.search(r"No module named '([\w.]+)'", run.stdout + run.stderr)
    return f"{text}; import error: no module named {missing.group(1)!r}" if missing else text


def _suite_failures(run: PytestRun, repo: Path) -> list[str]:
    """``NODEID: status`` of each failing test (node ids, so that they can be passed to ``--deselect``)."""
    return sorted(f"{node_id(repo, key)}: {s}" for key, (s, _) in run.outcomes.items() if s in ("failed", "error"))


def suite_args(spec: TestEnvSpec | None, cfg: GenerateConfig) -> tuple[str, ...]:
    """The baseline's pytest arguments: plugins that break the coverage map switched off, the configured
    arguments, the configured deselections."""
    from crf_prime.featdel.testreqs import neutral_args  # start-up: +12 ms on every command

    return (
        neutral_args(spec.requirements if spec else ())
        + tuple(cfg.pytest_args)
        + tuple(a for n in cfg.deselect for a in ("--deselect", n))
    )


def cache_key(project: Project, spec: TestEnvSpec | None, args: tuple[str, ...], cfg: GenerateConfig) -> str:
    """The suite cache entry of the baseline run with ``args`` (:func:`suite_args`) in ``spec``'s venv."""
    return suite_cache.key(
        "baseline",
        {
            "source": project.info.sha256,
            "spec": spec,
            "args": args,
            "suite_wall_seconds": cfg.suite_wall_seconds,
            "sandbox": {k: getattr(cfg, k) for k in sorted(GradingSandbox.model_fields)},
        },
    )


def remember(
    project: Project,
    spec: TestEnvSpec | None,
    args: tuple[str, ...],
    cfg: GenerateConfig,
    run: PytestRun,
    run_dir: Path,
    left_out: Collection[str] = (),
    earlier: Sequence[tuple[PytestRun, Path]] = (),
) -> bool:
    """Store a coverage run of the whole suite with ``args`` as the baseline when every test passed (the setup
    loop's run is then generation's baseline); True when stored. ``left_out``: node ids ``args`` deselects: the run
    may fail in those tests only, and they are left out of it as if they had not run (what they executed is not
    theirs, the number of tests is without them). ``earlier``: runs (and their directories) of the rest of the suite
    whose passing tests ``run`` did not run again: their tests and coverage count with ``run``'s."""
    repo, deselected = run_dir / "repo", set(left_out)
    gone = {key for key in run.outcomes if node_id(repo, key) in deselected}
    failing = {key for key, (s, _) in run.outcomes.items() if s in ("failed", "error")}
    if run.exit_code not in ((0, 1) if gone else (0,)) or not run.outcomes or failing - gone:
        return False
    coverage, collection = _read_coverage(run_dir, project, run)
    tests = len(run.outcomes) - len(gone)
    for before, before_dir in earlier:
        more, outside = _read_coverage(before_dir, project, before)  # only its passing tests: not run again
        coverage, collection = merged_coverage(coverage, more), merged_lines(collection, outside)
        tests += sum(1 for key, (s, _) in before.outcomes.items() if s == "passed" and key not in run.outcomes)
    if gone:
        coverage = {
            path: {ln: {t for t in ids if junit_key(t) not in gone} for ln, ids in lines.items()}
            for path, lines in coverage.items()
        }
    entry = suite_cache.CachedBaseline.of(args, tests, coverage, collection)
    suite_cache.store(cache_key(project, spec, args, cfg), entry)
    return True


def merged_coverage(
    a: dict[str, dict[int, set[str]]], b: dict[str, dict[int, set[str]]]
) -> dict[str, dict[int, set[str]]]:
    """path -> line -> test ids of two coverage maps together."""
    out = {path: {ln: set(ids) for ln, ids in lines.items()} for path, lines in a.items()}
    for path, lines in b.items():
        mine = out.setdefault(path, {})
        for ln, ids in lines.items():
            mine.setdefault(ln, set()).update(ids)
    return out


def merged_lines(a: dict[str, set[int]], b: dict[str, set[int]]) -> dict[str, set[int]]:
    return {path: a.get(path, set()) | b.get(path, set()) for path in a.keys() | b.keys()}


def run_baseline(
    project: Project,
    env: TestEnv,
    sandbox: Sandbox,
    cfg: GenerateConfig,
    workspace: Path,
    spec: TestEnvSpec | None = None,
) -> Baseline:
    """One coverage run of the whole suite in the sandbox (or its cached result); fails clearly if the suite does
    not pass as shipped."""
    deselect = suite_args(spec, cfg)
    name = cache_key(project, spec, deselect, cfg)
    hit = suite_cache.load(name, suite_cache.CachedBaseline)
    if hit is not None:
        return Baseline(
            project=project,
            env=env,
            pytest_args=hit.pytest_args,
            suite_tests=hit.suite_tests,
            coverage=hit.coverage_map(),
            collection=hit.collection_map(),
            spec=spec,
            cached=True,
        )
    protected = protected_paths(project.root)
    attempts: list[tuple[str, ...]] = [deselect, ("-o", "addopts=", *deselect)]
    last: PytestRun | None = None
    for args in attempts:
        run_dir = workspace / f"baseline-{len(args) - len(deselect)}"
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.copytree(project.root, run_dir / "repo")
        run = run_pytest(
            sandbox,
            env,
            run_dir,
            pythonpath=project.pythonpath,
            pytest_args=args,
            protected=protected,
            with_coverage=project.package_dirs,
            wall_seconds=cfg.suite_wall_seconds,
        )
        last = run
        if run.exit_code in (3, 4) or (run.exit_code != 0 and not run.outcomes):
            continue  # usage error (e.g. addopts needing a plugin we do not install): retry without addopts
        failures = _suite_failures(run, run_dir / "repo")
        if failures or run.exit_code != 0:
            shown = "\n  ".join(failures[:15]) or run.tail()
            raise SourceError(
                f"{project.info.spec}: the test suite does not pass as shipped ({suite_failure(run)}, "
                f"{len(failures)} failing):\n  {shown}\nFix the environment (--extra-requirement) or leave known failures "
                "out with --deselect NODEID."
            )
        coverage, collection = _read_coverage(run_dir, project, run)
        suite_cache.store(name, suite_cache.CachedBaseline.of(args, len(run.outcomes), coverage, collection))
        return Baseline(
            project=project,
            env=env,
            pytest_args=args,
            suite_tests=len(run.outcomes),
            coverage=coverage,
            collection=collection,
            spec=spec,
        )
    assert last is not None
    raise SourceError(
        f"{project.info.spec}: could not run the test suite ({suite_failure(last)}); output tail:\n{last.tail()}"
    )


def _read_coverage(
    run_dir: Path, project: Project, run: PytestRun
) -> tuple[dict[str, dict[int, set[str]]], dict[str, set[int]]]:
    """(path -> line -> node ids of the tests that ran it and passed, path -> lines executed in no test's context).
    A test that ran the code but did not pass (an expected failure, a skip after set-up) can never tell gold from the
    deletion, so it is never a target test."""
    coverage = require("coverage", "featdel")

    def passed(nodeid: str) -> bool:
        return run.status_of(nodeid)[0] == "passed"

    data = coverage.CoverageData(basename=str(run_dir / "out" / "coverage.db"))
    data.read()
    repo = (run_dir / "repo").resolve()
    out: dict[str, dict[int, set[str]]] = {}
    outside: dict[str, set[int]] = {}
    for fname in data.measured_files():
        try:
            rel = Path(fname).resolve().relative_to(repo).as_posix()
        except ValueError:
            continue
        by_line = data.contexts_by_lineno(fname)
        out[rel] = {ln: {c for c in ctxs if c and passed(c)} for ln, ctxs in by_line.items()}
        outside[rel] = {ln for ln, ctxs in by_line.items() if "" in ctxs}
    return out, outside


__all__ = ["Baseline", "cache_key", "remember", "run_baseline", "suite_args", "suite_failure"]
