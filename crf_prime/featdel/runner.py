"""Run a project's pytest suite inside the crf-prime sandbox and read the outcome from pytest's junit XML.

Each run gets its own directory ``<run>/repo`` (the tree, cwd) + ``<run>/out`` (junit XML, coverage data); only
``<run>`` is writable inside the box (only ``<run>/out`` with ``read_only_tree``, as grading runs), test files and
test configuration are re-bound read-only (``protected``), the test venv is bound read-only, and the environment
starts empty. Results come from the junit XML, never from stdout. A warm run (generation's runs of gold's own
code only) is a fork of a warm pytest box instead, its report directory under that box's
(crf_prime/featdel/pytest_server.py).
"""

from __future__ import annotations

import functools
import logging
import re
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from crf_prime.featdel import hide_test_id, hypothesis_profile
from crf_prime.featdel.pytest_server import BoxDied, PytestServer
from crf_prime.featdel.testenv import TestEnv
from crf_prime.sandbox import Sandbox

logger = logging.getLogger(__name__)
Outcome = tuple[str, str]  # (status: "passed" | "failed" | "error" | "skipped", message)


def junit_key(nodeid: str) -> tuple[str, str]:
    """(classname, name) pytest's junitxml writes for ``nodeid`` (same rule as ``_pytest.junitxml.mangle_test_address``)."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


def node_id(repo: Path, key: tuple[str, str]) -> str:
    """The pytest node id (``path.py::Class::name[params]``, what ``--deselect`` takes) of a junit (classname, name)
    key: the longest dotted prefix of the classname that is a ``.py`` file under ``repo`` is the path."""
    classname, name = key
    if not classname and (repo / (name.replace(".", "/") + ".py")).is_file():
        return name.replace(".", "/") + ".py"  # a module that failed to collect
    parts = classname.split(".") if classname else []
    for i in range(len(parts), 0, -1):
        path = "/".join(parts[:i]) + ".py"
        if (repo / path).is_file():
            return "::".join([path, *parts[i:], name])
    return f"{classname}::{name}" if classname else name


def parse_junit(xml_text: str) -> dict[tuple[str, str], Outcome]:
    """Map (classname, name) -> (status, message) for every testcase; a failed teardown downgrades a pass."""
    root = ET.fromstring(xml_text)
    out: dict[tuple[str, str], Outcome] = {}
    for case in root.iter("testcase"):
        key = (case.get("classname", ""), case.get("name", ""))
        status, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                status = "failed" if child.tag == "failure" else "error"
                text = (child.get("message") or "") + "\n" + (child.text or "")
                message = text.strip()[:2000]
                break
            if child.tag == "skipped":
                status, message = "skipped", (child.get("message") or "")[:500]
        prev = out.get(key)
        if prev is None or prev[0] == "passed":  # setup/teardown errors appear as extra testcases with the same key
            out[key] = (status, message)
    return out


@dataclass
class PytestRun:
    """One sandboxed pytest run."""

    exit_code: int | None
    outcomes: dict[tuple[str, str], Outcome]
    junit_found: bool
    duration_s: float
    limit_hit: str | None
    stdout: str
    stderr: str
    extra: dict[str, object] = field(default_factory=dict)

    def status_of(self, nodeid: str) -> Outcome:
        return self.outcomes.get(junit_key(nodeid), ("missing", "test did not run (not in the junit report)"))

    def tail(self, n: int = 1500) -> str:
        return (self.stdout[-n:] + "\n" + self.stderr[-n:]).strip()


def pytest_env(repo: Path, pythonpath: Sequence[str], extra_paths: Sequence[Path] = ()) -> dict[str, str]:
    paths = [str((repo / p).resolve()) for p in pythonpath] + [str(p) for p in extra_paths]
    return {
        "PYTHONPATH": ":".join(paths),
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONSAFEPATH": "1",
    }


def run_pytest(
    sandbox: Sandbox,
    env: TestEnv,
    run_dir: Path,
    *,
    pythonpath: Sequence[str],
    pytest_args: Sequence[str] = (),
    node_ids: Sequence[str] = (),
    protected: Sequence[str] = (),
    collect_only: bool = False,
    with_coverage: Sequence[str] = (),
    wall_seconds: float | None = None,
    read_only_tree: bool = False,
    guarded: Sequence[str] = (),
    lookups: Mapping[str, Sequence[int]] | None = None,
    first_failure: bool = False,
    warm: PytestServer | None = None,
) -> PytestRun:
    """Run pytest on ``run_dir/repo``; ``with_coverage`` = source dirs to measure with per-test contexts.

    ``read_only_tree``: the whole of ``run_dir`` is read-only in the box except ``run_dir/out`` (junit, coverage),
    so code under test cannot write a module it later imports. The interpreter runs with ``-P`` (no cwd/script dir
    on ``sys.path``), ``-B`` and ``-s``: the only import roots are the read-only tree, the read-only venv and the
    stdlib; ``/tmp`` and ``out`` are writable but never on ``sys.path``. ``guarded``: test files (paths under the
    tree) the project's code may not open (``hide_test_id.guard``). ``lookups``: where (file under the tree -> lines) the
    project's code calls ``getattr``/``setattr``/``delattr`` with a computed name, judged when it runs (``lookup_guard``).
    ``first_failure``: stop at the first failing test (``-x``), for callers that only ask whether every test passes.
    ``warm``: run it in that server's warm box (a read-only tree of gold's own code under its runs directory, no
    coverage; crf_prime/featdel/pytest_server.py), the same run without the interpreter's start and pytest's import.
    """
    if warm is not None and not (read_only_tree and not with_coverage and warm.holds(run_dir)):
        raise ValueError("run_pytest: a warm run needs a read-only tree under the server's runs directory, no coverage")
    run = functools.partial(
        _run,
        sandbox,
        env,
        run_dir,
        pythonpath=pythonpath,
        pytest_args=pytest_args,
        node_ids=node_ids,
        protected=protected,
        collect_only=collect_only,
        with_coverage=with_coverage,
        wall_seconds=wall_seconds,
        read_only_tree=read_only_tree,
        guarded=guarded,
        lookups=lookups,
        first_failure=first_failure,
    )
    if warm is not None:
        out = warm.out_dir()
        try:
            return run(out, warm)
        except BoxDied as e:
            logger.warning("featdel: %s; running it cold", e)
        finally:
            shutil.rmtree(out, ignore_errors=True)
    out = run_dir / "out"
    out.mkdir(parents=True, exist_ok=True)
    return run(out, None)


def _run(
    sandbox: Sandbox,
    env: TestEnv,
    run_dir: Path,
    out: Path,
    warm: PytestServer | None,
    *,
    pythonpath: Sequence[str],
    pytest_args: Sequence[str],
    node_ids: Sequence[str],
    protected: Sequence[str],
    collect_only: bool,
    with_coverage: Sequence[str],
    wall_seconds: float | None,
    read_only_tree: bool,
    guarded: Sequence[str],
    lookups: Mapping[str, Sequence[int]] | None,
    first_failure: bool,
) -> PytestRun:
    """:func:`run_pytest` with its output directory ``out`` chosen (the warm box's raises :class:`BoxDied`)."""
    repo = run_dir / "repo"
    junit = out / "junit.xml"
    junit.unlink(missing_ok=True)
    head: list[str] = [str(env.python), "-s", "-P", "-B"]
    extra_paths: list[Path] = [hide_test_id.install_into(run_dir / "grader")]  # read-only in the box, beside the repo
    hypothesis_profile.install_into(extra_paths[0])
    if guarded:
        hide_test_id.guard_into(extra_paths[0], repo, guarded)
    if lookups is not None:
        hide_test_id.lookups_into(extra_paths[0], repo, lookups)
    if with_coverage:
        rc = out / "coveragerc"
        rc.write_text("[run]\n")  # ignore the project's own coverage config (plugins, omit lists)
        head += ["-m", "coverage", "run", f"--rcfile={rc}", f"--data-file={out / 'coverage.db'}"]
        head += [f"--source={','.join(str(repo / d) for d in with_coverage)}"]
        head += ["-m", "pytest", "-p", "crf_featdel_ctx"]
        extra_paths.append(env.plugin_dir)
    else:
        head += ["-m", "pytest"]
    args = ["-p", "no:cacheprovider", "-p", hide_test_id.MODULE, "-p", hypothesis_profile.MODULE]
    args += ["-q", f"--rootdir={repo}", f"--junitxml={junit}"]
    args += pytest_args
    if collect_only:
        args.append("--collect-only")
    if first_failure:
        args.append("-x")
    args += list(node_ids)
    box = sandbox if wall_seconds is None else sandbox.with_limits(wall_seconds=wall_seconds)
    run_env = pytest_env(repo, pythonpath, extra_paths)
    if warm is not None:  # the warm box is ``head`` already
        result = warm.run(args, run_dir=run_dir, cwd=repo, env=run_env, out=out, limits=box.limits_now())
    else:
        result = box.run(
            [*head, *args],
            workdir=run_dir,
            cwd=repo,
            ro_binds=[env.venv, *([env.plugin_dir] if with_coverage else [])],
            protected=[repo / p for p in protected if (repo / p).exists()],
            env=run_env,
            writable=[out] if read_only_tree else None,
        )
    outcomes: dict[tuple[str, str], Outcome] = {}
    found = junit.is_file()
    if found:
        try:
            outcomes = parse_junit(junit.read_text(errors="replace"))
        except ET.ParseError:
            found = False
    return PytestRun(
        exit_code=result.exit_code,
        outcomes=outcomes,
        junit_found=found,
        duration_s=result.duration_s,
        limit_hit=result.limit_hit,
        stdout=result.stdout,
        stderr=result.stderr,
    )
