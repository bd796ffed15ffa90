"""Get a project's test suite running as shipped, the way a person would, in a bounded number of recorded steps.

1. Refuse at once a project that pytest or coverage themselves import (iniconfig, pluggy, packaging, ...): the
   test venv would always hold a copy of it. The set is read from the test venv's own pytest, not a hand list.
2. Collect (``--collect-only``) in the sandbox, and fix what stops collection, one step a round:
   a module the tests import that the venv lacks -> the distribution that provides it (the project's own
   requirement hints first, then a small table of names that differ, then the module name), pinned and installed;
   an option pytest does not know (a plugin the project's ``addopts`` needs) -> ``-o addopts=``;
   nothing collected -> the project's own test commands (:mod:`crf_prime.featdel.discovery`), then broad patterns;
   a module that still cannot be collected -> ``--ignore``d, with its reason; so is a module pytest collects that
   is not named as a test module (``source.is_test_path``), since the grader would count it as deletable source.
   At most :data:`MAX_ROUNDS` rounds and :data:`MAX_INSTALLS` installs.
3. Run the suite; when tests fail, run the failing ones again: tests that fail the same way twice are deselected
   ("fails as shipped"), tests that fail once are deselected as flaky. The project is refused when fewer than
   :data:`MIN_KEPT` of its collected tests are left, or when more test modules are ignored than collect.

The result is a :class:`SuiteSetup`: pins (they become the task rows' ``test_env``, so grading installs exactly
the same), pytest arguments, deselected node ids, and a line per action for the corpus summary.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from crf_prime.featdel import discovery
from crf_prime.featdel.models import SuiteSetup
from crf_prime.featdel.runner import PytestRun, node_id, run_pytest
from crf_prime.featdel.source import Project, SourceError, is_test_path, load_project, protected_paths
from crf_prime.featdel.testenv import TestEnv, default_spec, ensure_test_env
from crf_prime.featdel.testreqs import neutral_args, requirement_hints
from crf_prime.sandbox import Sandbox

if TYPE_CHECKING:
    from crf_prime.featdel.generate import GenerateConfig

MAX_ROUNDS = 8
"""Collection rounds before giving up (each fixes one thing)."""
MAX_INSTALLS = 8
"""Distributions the loop may add to the test venv (each costs a resolve and a venv build: seconds with uv)."""
MIN_KEPT = 0.5
"""Share of the collected tests that must be left after deselection."""

# import name -> distribution, where they differ and the name alone would install something else or nothing
KNOWN_DISTRIBUTIONS = {
    "yaml": "PyYAML",
    "attr": "attrs",
    "dateutil": "python-dateutil",
    "bs4": "beautifulsoup4",
    "PIL": "Pillow",
    "sklearn": "scikit-learn",
    "Crypto": "pycryptodome",
    "OpenSSL": "pyOpenSSL",
    "jwt": "PyJWT",
    "serial": "pyserial",
    "dns": "dnspython",
    "git": "GitPython",
    "magic": "python-magic",
    "dotenv": "python-dotenv",
    "slugify": "python-slugify",
    "multipart": "python-multipart",
    "hamcrest": "PyHamcrest",
    "pkg_resources": "setuptools",
    "google": "protobuf",
    "ruamel": "ruamel.yaml",
    "zope": "zope.interface",
    "markdown": "Markdown",
    "xdist": "pytest-xdist",
    "faker": "Faker",
    "docopt": "docopt-ng",
}

# fixtures only a well-known pytest plugin defines -> that plugin's distribution (a person reads "fixture 'mocker'
# not found" and installs pytest-mock); async tests without an async plugin -> pytest-asyncio
FIXTURE_PLUGINS = {
    "mocker": "pytest-mock",
    "class_mocker": "pytest-mock",
    "module_mocker": "pytest-mock",
    "session_mocker": "pytest-mock",
    "httpbin": "pytest-httpbin",
    "httpbin_secure": "pytest-httpbin",
    "httpbin_both": "pytest-httpbin",
    "benchmark": "pytest-benchmark",
    "fs": "pyfakefs",
    "freezer": "pytest-freezer",
    "httpserver": "pytest-httpserver",
    "requests_mock": "requests-mock",
    "respx_mock": "respx",
    "snapshot": "syrupy",
    "datadir": "pytest-datadir",
    "shared_datadir": "pytest-datadir",
    "subtests": "pytest-subtests",
    "time_machine": "time-machine",
    "event_loop": "pytest-asyncio",
    "aiohttp_client": "pytest-aiohttp",
    "nursery": "pytest-trio",
    "autojump_clock": "pytest-trio",
    "xprocess": "pytest-xprocess",
}
# pytest marks that only a plugin registers (a suite run with ``--strict-markers`` fails to collect without it)
MARKER_PLUGINS = {
    "anyio": "anyio",
    "trio": "pytest-trio",
    "asyncio": "pytest-asyncio",
    "timeout": "pytest-timeout",
    "benchmark": "pytest-benchmark",
    "httpx_mock": "pytest-httpx",
    "freeze_time": "pytest-freezer",
    "vcr": "pytest-recording",
    "flaky": "flaky",
}
ASYNC_PLUGINS = ("pytest-asyncio", "pytest-trio", "anyio")
"""Plugins that run ``async def`` tests, in the order tried when the project names none of them."""

_MISSING = re.compile(r"No module named '([\w.]+)'")
_NO_FIXTURE = re.compile(r"fixture '(\w+)' not found")
_NO_ASYNC = "async def functions are not natively supported"
_NO_MARKER = re.compile(r"'(\w+)' not found in `markers` configuration option")
_VOLATILE = re.compile(r"0x[0-9a-fA-F]+|\d+(?:\.\d+)?")  # addresses, timings, counters in a failure message
_COUNT = re.compile(r"^(\S+\.py): (\d+)$")  # ``--collect-only -qq`` (a project's addopts may add a -q)
_PYTEST_OWN = """
import importlib.metadata as md, json, re, sys
canon = lambda n: re.sub(r"[-_.]+", "-", n).lower()
seen, stack, tops = set(), list(sys.argv[1:]), set()
while stack:
    name = stack.pop()
    if canon(name) in seen:
        continue
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        continue  # a marker left it out (colorama on Linux, exceptiongroup on 3.11+)
    seen.add(canon(name))
    stack += [re.split(r"[\\s\\[<>=!~;(]", r, maxsplit=1)[0] for r in dist.requires or [] if "extra ==" not in r]
    top = (dist.read_text("top_level.txt") or "").split()
    top += [f.parts[0].removesuffix(".py") for f in dist.files or [] if len(f.parts) <= 2 and f.suffix in ("", ".py")]
    tops |= {t for t in top if t.isidentifier() and not t.startswith("_")}
print(json.dumps({"distributions": sorted(seen), "modules": sorted(tops)}))
"""


def pytest_own(env: TestEnv) -> tuple[set[str], set[str]]:
    """(distributions, top-level modules) that the test venv's pytest and coverage need to run at all."""
    proc = subprocess.run(
        [str(env.python), "-I", "-c", _PYTEST_OWN, "pytest", "coverage"], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SourceError(f"reading pytest's own distributions in {env.venv} failed: {proc.stderr[-400:]}")
    data = json.loads(proc.stdout)
    return set(data["distributions"]), set(data["modules"])


def refuse_pytest_own(project: Project, env: TestEnv) -> None:
    """Raise when pytest itself imports the project: deleting its code would break the test runner first."""
    dists, modules = pytest_own(env)
    canon = _canon(project.info.name)
    clash = sorted({canon} & dists | set(project.top_level) & modules)
    if clash:
        raise SourceError(
            f"{project.info.spec}: pytest itself imports {', '.join(clash)} (its test venv always holds a copy): "
            "this project cannot be a Feature Deletion source"
        )


def missing_modules(run: PytestRun) -> list[str]:
    """Top-level names of the modules the run could not import, in order of first mention."""
    text = run.stdout + run.stderr + "".join(msg for _, msg in run.outcomes.values())
    return list(dict.fromkeys(m.split(".")[0] for m in _MISSING.findall(text)))


def missing_plugins(run: PytestRun) -> list[str]:
    """What the failing tests lack that a plugin provides, in order of first mention: ``fixture 'NAME'`` for a
    fixture of :data:`FIXTURE_PLUGINS`, ``marker 'NAME'`` for a mark of :data:`MARKER_PLUGINS` that a strict
    collection did not know, ``async tests`` when pytest met ``async def`` tests it cannot run."""
    out: dict[str, None] = {}
    for status, msg in run.outcomes.values():
        if status not in ("failed", "error"):
            continue
        out |= {f"fixture '{m}'": None for m in _NO_FIXTURE.findall(msg) if m in FIXTURE_PLUGINS}
        out |= {f"marker '{m}'": None for m in _NO_MARKER.findall(msg) if m in MARKER_PLUGINS}
        if _NO_ASYNC in msg:
            out["async tests"] = None
    return list(out)


def plugin_candidates(need: str, hints: tuple[str, ...]) -> list[str]:
    """Distributions for a :func:`missing_plugins` entry: the project's own requirement on the plugin first (with
    its version range), then the plugin's bare name."""
    from packaging.requirements import Requirement

    kind, _, name = need.partition(" ")
    table = {"fixture": FIXTURE_PLUGINS, "marker": MARKER_PLUGINS}
    wanted = list(ASYNC_PLUGINS) if need == "async tests" else [table[kind][name.strip("'")]]
    named = {_canon(Requirement(h).name): h for h in hints}
    own = [named[_canon(w)] for w in wanted if _canon(w) in named]
    return list(dict.fromkeys([*own, *wanted]))


def candidates(module: str, hints: tuple[str, ...]) -> list[str]:
    """Distributions that may provide ``module``, most likely first: a requirement the project names whose name is
    the module's (``python-``/``py`` prefixes aside; with its version range), one whose name has the module's as a
    part (``railroad`` -> ``railroad-diagrams``), the table of known differences, then the module name itself."""
    from packaging.requirements import Requirement

    def bare(name: str) -> str:
        return _canon(name).removeprefix("python-").removeprefix("py")

    want = {bare(module), bare(KNOWN_DISTRIBUTIONS.get(module, module))}
    names = [(h, _canon(Requirement(h).name)) for h in hints]
    exact = [h for h, n in names if bare(n) in want]
    part = [h for h, n in names if _canon(module) in n.split("-") and h not in exact]
    return list(dict.fromkeys([*exact, *part, KNOWN_DISTRIBUTIONS.get(module, module), module.replace("_", "-")]))


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _own_module(root: Path, module: str, pythonpath: tuple[str, ...] = (".",)) -> bool:
    """Whether ``import module`` can find it in the tree (then its absence is an import-path problem, not a missing
    distribution): at the top of the project's import path, or beside a test module or one level up (pytest puts
    a test module's package root on ``sys.path``). A module deeper in a package (``pkg/_backends/trio.py``) is not
    ``import trio``: that one is a distribution to install."""
    tests = [p.parent for p in root.rglob("*.py") if is_test_path(p.relative_to(root).as_posix())]
    dirs = {root, *(root / p for p in pythonpath), *tests, *(d.parent for d in tests)}
    return any((d / module).is_dir() or (d / f"{module}.py").is_file() for d in dirs)


def collected(run: PytestRun) -> dict[str, int]:
    """Test module -> tests a ``--collect-only`` run listed (``-q``: one node id a line; ``-qq``: ``path: N``)."""
    out: dict[str, int] = {}
    for line in run.stdout.splitlines():
        if (m := _COUNT.match(line)) is not None:
            out[m.group(1)] = out.get(m.group(1), 0) + int(m.group(2))
        elif "::" in line and not line.startswith(("ERROR", " ", "_", "=")):
            path = line.split("::")[0]
            out[path] = out.get(path, 0) + 1
    return out


def failures(run: PytestRun, repo: Path) -> dict[str, str]:
    """Node id -> ``status: first line of the message`` (numbers and addresses blanked) of each failing test."""
    out = {}
    for key, (status, msg) in run.outcomes.items():
        if status in ("failed", "error"):
            first = (msg.strip().splitlines() or [""])[0]
            out[node_id(repo, key)] = f"{status}: {_VOLATILE.sub('#', first)[:200]}"
    return out


class _Runner:
    """Sandboxed pytest runs of one project, each on a fresh copy of its tree."""

    def __init__(self, project: Project, sandbox: Sandbox, workspace: Path, timeout_s: float) -> None:
        self.project, self.sandbox, self.workspace, self.timeout_s = project, sandbox, workspace, timeout_s
        self.protected = protected_paths(project.root)
        self.n = 0

    def __call__(self, env: TestEnv, args: tuple[str, ...], *, collect_only: bool) -> tuple[PytestRun, Path]:
        self.n += 1
        run_dir = self.workspace / f"setup-{self.n}"
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.copytree(self.project.root, run_dir / "repo")
        run = run_pytest(
            self.sandbox,
            env,
            run_dir,
            pythonpath=self.project.pythonpath,
            pytest_args=args,
            protected=self.protected,
            collect_only=collect_only,
            wall_seconds=self.timeout_s,
        )
        if run.limit_hit:
            raise SourceError(f"{self.project.info.spec}: the test suite hit a sandbox limit ({run.limit_hit})")
        return run, run_dir / "repo"


def setup_suite(project: Project, sandbox: Sandbox, cfg: GenerateConfig, workspace: Path) -> SuiteSetup:
    """The setup loop (module docstring) on a loaded project; raises :class:`SourceError` with the reason when the
    suite cannot be made to run."""
    from crf_prime.featdel.generate import env_spec, suite_failure

    refuse_pytest_own(project, ensure_test_env(default_spec(())))
    run_once = _Runner(project, sandbox, workspace, cfg.suite_wall_seconds)
    hints = requirement_hints(project.root, project.info.name)
    extra = list(cfg.extra_requirements)
    installed: dict[str, str] = {}
    tried: dict[str, list[str]] = {}
    given_up: dict[str, str] = {}
    args: list[str] = list(cfg.pytest_args)
    ignored: dict[str, str] = {}
    ways = discovery.attempts(project.root)
    how = "pytest defaults"
    deselect = tuple(a for n in cfg.deselect for a in ("--deselect", n))

    def resolve(requirements: list[str]):
        """The venv's spec as ``featdel generate`` will compute it (pinned by pip's resolver; nothing built)."""
        return env_spec(project, cfg.model_copy(update={"extra_requirements": requirements}))

    def env_for(requirements: list[str]):
        spec = resolve(requirements)
        return spec, ensure_test_env(spec, project.top_level)

    spec, env = env_for(extra)
    rounds = 0
    while rounds < MAX_ROUNDS:
        rounds += 1
        run, repo = run_once(env, (*neutral_args(spec.requirements), *args, *deselect), collect_only=True)
        missing = [m for m in missing_modules(run) if m not in given_up]
        if missing:
            module = missing[0]
            if _own_module(project.root, module, project.pythonpath) or module in project.top_level:
                given_up[module] = "the module is in the project's tree (an import-path problem)"
                continue
            if module in installed:  # that distribution did not provide it: take it out, try the next candidate
                extra.remove(installed.pop(module))
            added = _install(module, candidates(module, hints), tried, extra, resolve, env_for, len(installed))
            if isinstance(added, str):
                given_up[module] = added
                continue
            (spec, env), pin = added
            extra.append(pin)
            installed[module] = pin
            continue
        marks = [n for n in missing_plugins(run) if n.startswith("marker ") and n not in given_up]
        if marks:  # a mark only a plugin registers, under --strict-markers: install the plugin
            need = marks[0]
            if need in installed:
                given_up[need] = f"still unknown with {installed[need]} installed"
                continue
            added = _install(need, plugin_candidates(need, hints), tried, extra, resolve, env_for, len(installed))
            if isinstance(added, str):
                given_up[need] = added
                continue
            (spec, env), pin = added
            extra.append(pin)
            installed[need] = pin
            continue
        if run.exit_code == 4 and "addopts=" not in args:
            args = ["-o", "addopts=", *args]
            continue
        if (run.exit_code == 5 or (run.exit_code == 0 and not collected(run))) and ways:
            way = ways.pop(0)
            args, how = [*args, *way.args], way.how
            continue
        broken = {
            node_id(repo, key): _reason(msg, given_up)
            for key, (status, msg) in run.outcomes.items()
            if status in ("failed", "error") and node_id(repo, key) not in ignored
        }
        if broken:
            ignored |= broken
            for path in broken:
                args = without_path(args, path)
            continue
        if run.exit_code != 0:
            raise SourceError(f"{project.info.spec}: could not collect the suite ({suite_failure(run)}):\n{run.tail()}")
        break
    else:  # the last round still changed something
        raise SourceError(
            f"{project.info.spec}: the suite still did not collect after {MAX_ROUNDS} setup rounds "
            f"(installed: {', '.join(installed.values()) or 'nothing'}; gave up on: {given_up or 'nothing'})"
        )
    per_module = collected(run)
    for path in [m for m in per_module if not is_test_path(m)]:  # the grader would take it for source code
        ignored[path] = "tests in a module not named as a test module (it would be deletable source)"
        args = without_path(args, path)
        del per_module[path]
    n_collected, modules = sum(per_module.values()), set(per_module)
    if len(ignored) > len(modules):
        raise SourceError(
            f"{project.info.spec}: {len(ignored)} test modules cannot be collected and only {len(modules)} can: "
            + "; ".join(f"{p}: {r}" for p, r in list(ignored.items())[:5])
        )
    run_args = (*neutral_args(spec.requirements), *args, *deselect)
    first, repo = run_once(env, run_args, collect_only=False)
    for _ in range(MAX_ROUNDS):  # a fixture or async support a plugin provides: install it and run again
        needs = [n for n in missing_plugins(first) if n not in given_up]
        if not needs:
            break
        rounds += 1
        need = needs[0]
        if need in installed:
            given_up[need] = f"still missing with {installed[need]} installed"
            continue
        added = _install(need, plugin_candidates(need, hints), tried, extra, resolve, env_for, len(installed))
        if isinstance(added, str):
            given_up[need] = added
            continue
        (spec, env), pin = added
        extra.append(pin)
        installed[need] = pin
        run_args = (*neutral_args(spec.requirements), *args, *deselect)
        first, repo = run_once(env, run_args, collect_only=False)
    failed = failures(first, repo)
    deselected: dict[str, str] = {}
    if failed or first.exit_code != 0:
        if not first.outcomes:
            raise SourceError(f"{project.info.spec}: the suite did not run ({suite_failure(first)}):\n{first.tail()}")
        # only the failing tests run again (a whole second suite run costs minutes on a big suite); a test that
        # passes alone but failed in the suite is flaky or order-dependent: left out either way
        second, repo = run_once(env, (*run_args, *sorted(failed)), collect_only=False) if failed else (None, repo)
        if second is None or not second.outcomes:  # nothing to name, or pytest did not find the node ids
            second, repo = run_once(env, run_args, collect_only=False)
        again = failures(second, repo)
        for node in sorted(set(failed) | set(again)):
            same = failed.get(node) == again.get(node)
            deselected[node] = f"fails as shipped ({failed[node]})" if same else "flaky (failed in one of two runs)"
    total = max(n_collected, len(first.outcomes))
    if total == 0:
        raise SourceError(f"{project.info.spec}: no tests collected ({how})")
    if total - len(deselected) < MIN_KEPT * total:
        raise SourceError(
            f"{project.info.spec}: {len(deselected)} of {total} tests fail as shipped (fewer than "
            f"{MIN_KEPT:.0%} would be left): " + "; ".join(f"{n}: {r}" for n, r in list(deselected.items())[:5])
        )
    return SuiteSetup(
        extra_requirements=tuple(extra),
        installed=installed,
        pytest_args=tuple(args),
        discovery=how,
        ignored=ignored,
        deselected=deselected,
        collected=total,
        rounds=rounds,
    )


def without_path(args: list[str], path: str) -> list[str]:
    """``args`` that leave ``path`` out: ``--ignore`` it, and drop it from a ``-o testpaths=`` override (pytest
    collects a path it is given explicitly whatever ``--ignore`` says)."""
    out = [
        f"testpaths={' '.join(p for p in a.removeprefix('testpaths=').split() if p != path)}"
        if a.startswith("testpaths=")
        else a
        for a in args
    ]
    return [*out, f"--ignore={path}"]


def _reason(message: str, given_up: dict[str, str]) -> str:
    missing = _MISSING.search(message)
    if missing and missing.group(1).split(".")[0] in given_up:
        module = missing.group(1).split(".")[0]
        return f"imports {module!r}: {given_up[module]}"
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    return (lines[-1] if lines else "collection error")[:200]


def _install(
    module: str, cands: list[str], tried: dict[str, list[str]], extra: list[str], resolve, env_for, n_installed: int
):
    """((spec, env), pin) after installing the first of ``cands`` (distributions for ``module``, a module name or a
    :func:`missing_plugins` entry) that resolves, or why none did. The venv is built from the pin (not the
    candidate's range), so generation later reuses it as it is."""
    from packaging.requirements import Requirement

    if n_installed >= MAX_INSTALLS:
        return f"not installed: the setup loop already added {MAX_INSTALLS} distributions"
    errors = []
    for cand in cands:
        if cand in tried.setdefault(module, []):
            continue
        tried[module].append(cand)
        try:
            spec = resolve([*extra, cand])
            name = _canon(Requirement(cand).name)
            pin = next((r for r in spec.requirements if _canon(r.split("==")[0]) == name), cand)
            return env_for([*extra, pin]), pin
        except SourceError as e:
            errors.append(f"{cand}: {str(e).splitlines()[0][:160]}")
    return "no distribution provides it (tried " + ("; ".join(errors) or ", ".join(tried[module])) + ")"


def prepare_suite(cfg: GenerateConfig) -> SuiteSetup:
    """Load ``cfg.source`` into a scratch directory and run :func:`setup_suite` on it."""
    workspace = Path(tempfile.mkdtemp(prefix="crf-featdel-setup-"))
    try:
        project = load_project(cfg.source, workspace)
        return setup_suite(project, Sandbox(cfg), cfg, workspace)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


__all__ = [
    "FIXTURE_PLUGINS",
    "KNOWN_DISTRIBUTIONS",
    "MARKER_PLUGINS",
    "MAX_INSTALLS",
    "MAX_ROUNDS",
    "MIN_KEPT",
    "SuiteSetup",
    "candidates",
    "missing_modules",
    "missing_plugins",
    "plugin_candidates",
    "prepare_suite",
    "pytest_own",
    "refuse_pytest_own",
    "setup_suite",
    "without_path",
]
