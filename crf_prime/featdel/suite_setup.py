"""Get a project's test suite running as shipped, the way a person would, in a bounded number of recorded steps.

1. Refuse at once a project that pytest or coverage themselves import (iniconfig, pluggy, packaging, ...): the
   test venv would always hold a copy of it. The set is read from the test venv's own pytest, not a hand list.
2. Collect (``--collect-only``) in the sandbox, and fix what stops collection, one step a round:
   a module the tests import that the venv lacks -> the distribution that provides it (the project's own
   requirement hints first, then a small table of names that differ, then the module name), pinned and installed;
   an option pytest does not know (a plugin the project's ``addopts`` needs) -> ``-o addopts=``;
   an installed plugin this pytest refuses to load (a test requirement written for an older pytest) -> ``-p no:NAME``;
   nothing collected -> the project's own test commands (:mod:`crf_prime.featdel.discovery`), then broad patterns;
   a module that still cannot be collected -> ``--ignore``d, with its reason; so is a module pytest collects that
   is not named as a test module (``source.is_test_path``), since the grader would count it as deletable source.
   At most :data:`MAX_ROUNDS` rounds and :data:`MAX_INSTALLS` installs.
3. Run the suite under coverage, as generation's baseline does (a test that fails only under the tracer, such as a
   timing test, fails here too); what its failing or skipped tests lack (a plugin, a module imported only as a test
   runs) is installed and only the tests that did not pass run again; when tests fail, run the failing ones again:
   tests that fail the same way twice are deselected ("fails as shipped"), tests that fail once are deselected as
   flaky. The project is refused when fewer than :data:`MIN_KEPT` of its collected tests are left, or when more
   test modules cannot be collected than can (modules left out for not being test modules, such as doctests in the
   package or a README, do not count).
4. That full run, without the deselected tests (every other test passed in it; what the deselected ones executed
   is not counted), is stored as generation's coverage baseline (:func:`crf_prime.featdel.baseline.remember`):
   generation does not run the suite again. The suite is not run once more without them: a test that passes only
   after a deselected one ran fails the first time it is a candidate's target test, and that candidate is refused
   (``original-fails``).

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

from crf_prime.featdel import discovery, suite_cache
from crf_prime.featdel.baseline import remember, suite_failure
from crf_prime.featdel.models import SuiteSetup, TestEnvSpec
from crf_prime.featdel.runner import PytestRun, node_id, run_pytest
from crf_prime.featdel.source import Project, SourceError, is_test_path, load_project, protected_paths
from crf_prime.featdel.testenv import TestEnv, default_spec, ensure_test_env, uv_index_args
from crf_prime.featdel.testreqs import neutral_args, requirement_hints
from crf_prime.placement import GradingSandbox
from crf_prime.sandbox import Sandbox

if TYPE_CHECKING:
    from crf_prime.featdel.generate import GenerateConfig

MAX_ROUNDS = 8
"""Collection rounds before giving up (each fixes one thing)."""
MAX_INSTALLS = 8
"""Distributions the loop may add to the test venv (each costs a resolve and a venv build: seconds with uv)."""
MIN_KEPT = 0.5
"""Share of the collected tests that must be left after deselection."""
NOT_A_TEST_MODULE = "tests in a module not named as a test module (it would be deletable source)"
"""Why a collected module outside the test paths (doctests in the package, a README) is left out; such modules do
not count as modules that cannot be collected."""

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
_BROKEN_PLUGIN = re.compile(r"PluginValidationError: Plugin '([^']+)'")  # an installed plugin this pytest rejects
EXITS_AT_IMPORT = "exits when imported (unittest.main() or sys.exit() outside `if __name__ == '__main__'`)"
"""Why a test module that raises ``SystemExit`` at import is left out (pytest stops with an internal error)."""


def exits_at_import(run: PytestRun, repo: Path) -> str | None:
    """The test module (path under ``repo``) whose import raised ``SystemExit`` and so stopped pytest with an internal
    error (ply 3.11's ``test/testcpp.py`` calls ``main()`` at module level): the last module frame of the traceback."""
    text = run.stdout + run.stderr
    if run.exit_code != 3 or "SystemExit" not in text:
        return None
    frames = re.findall(rf'File "{re.escape(str(repo))}/([^"]+\.py)", line \d+, in <module>', text)
    return frames[-1] if frames and is_test_path(frames[-1]) else None


_HOLLOW = re.compile(r"cannot import name '(\w+)' from '([\w.]+)' \(unknown location\)")  # a namespace package
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


def _is_own(project: Project, module: str) -> bool:
    return module in project.top_level or _own_module(project.root, module, project.pythonpath)


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
            # a collection lists one node id a line whatever verbosity the project's addopts set (tqdm's ``-v``
            # prints a tree :func:`collected` cannot read: 186 tests read as none, and discovery went astray)
            pytest_args=(*args, "--verbosity=-1") if collect_only else args,
            protected=self.protected,
            collect_only=collect_only,
            # full runs are coverage runs, as generation's baseline is: a test that fails only under coverage's
            # tracer fails here too (and is deselected), and a passing run is the baseline itself
            with_coverage=() if collect_only else self.project.package_dirs,
            wall_seconds=self.timeout_s,
        )
        if run.limit_hit:
            raise SourceError(f"{self.project.info.spec}: the test suite hit a sandbox limit ({run.limit_hit})")
        return run, run_dir / "repo"


class _Venv:
    """The test venv the loop grows: the distributions it added (pinned), what it tried, what it gave up on."""

    def __init__(self, project: Project, cfg: GenerateConfig) -> None:
        self.project, self.cfg = project, cfg
        self.hints = requirement_hints(project.root, project.info.name)
        self.extra: list[str] = list(cfg.extra_requirements)
        self.installed: dict[str, str] = {}
        self.tried: dict[str, list[str]] = {}
        self.given_up: dict[str, str] = {}
        self.spec, self.env = self.build(self.extra)

    def resolve(self, requirements: list[str]) -> TestEnvSpec:
        """The venv's spec as ``featdel generate`` will compute it (pinned by the resolver; nothing built)."""
        from crf_prime.featdel.generate import env_spec

        return env_spec(self.project, self.cfg.model_copy(update={"extra_requirements": requirements}))

    def build(self, requirements: list[str]) -> tuple[TestEnvSpec, TestEnv]:
        spec = self.resolve(requirements)
        return spec, ensure_test_env(spec, self.project.top_level)

    def add(self, need: str, cands: list[str], *, still: str | None) -> bool:
        """Install the first of ``cands`` that resolves for ``need`` (a module the tests import, or a
        :func:`missing_plugins` entry) and say whether the venv changed. ``need`` met before and still missing:
        ``still`` None takes the installed distribution out and tries the next candidate (a module another
        distribution may provide), else gives up with ``"<still> with <pin> installed"``."""
        from packaging.requirements import Requirement

        swapped = need in self.installed
        if swapped:
            if still is not None:
                self.given_up[need] = f"{still} with {self.installed[need]} installed"
                return False
            self.extra.remove(self.installed.pop(need))
        errors = []
        for cand in cands if len(self.installed) < MAX_INSTALLS else ():
            if cand in self.tried.setdefault(need, []):
                continue
            self.tried[need].append(cand)
            try:
                spec = self.resolve([*self.extra, cand])
            except SourceError as e:
                errors.append(f"{cand}: {str(e).splitlines()[0][:160]}")
                continue
            name = _canon(Requirement(cand).name)
            # the venv is built from the pin (not the candidate's range), so generation reuses it as it is
            pin = next((r for r in spec.requirements if _canon(r.split("==")[0]) == name), cand)
            self.spec, self.env = self.build([*self.extra, pin])
            self.extra.append(pin)
            self.installed[need] = pin
            return True
        if swapped:  # the distribution taken out above leaves the venv too: the pins name what it holds
            self.spec, self.env = self.build(self.extra)
        if len(self.installed) >= MAX_INSTALLS:
            self.given_up[need] = f"not installed: the setup loop already added {MAX_INSTALLS} distributions"
        else:
            tried = "; ".join(errors) or ", ".join(self.tried.get(need, []))
            self.given_up[need] = f"no distribution provides it (tried {tried})"
        return False


def setup_suite(project: Project, sandbox: Sandbox, cfg: GenerateConfig, workspace: Path) -> SuiteSetup:
    """The setup loop (module docstring) on a loaded project; raises :class:`SourceError` with the reason when the
    suite cannot be made to run. Its full run is a coverage run: when every test passes it is stored as the
    generation's baseline (:func:`crf_prime.featdel.baseline.remember`), which then does not run the suite again."""
    refuse_pytest_own(project, ensure_test_env(default_spec(())))
    run_once = _Runner(project, sandbox, workspace, cfg.suite_wall_seconds)
    venv = _Venv(project, cfg)
    given_up = venv.given_up
    args: list[str] = list(cfg.pytest_args)
    ignored: dict[str, str] = {}
    ways = discovery.attempts(project.root)
    how = "pytest defaults"
    deselect = tuple(a for n in cfg.deselect for a in ("--deselect", n))
    rounds = 0
    while rounds < MAX_ROUNDS:
        rounds += 1
        run, repo = run_once(venv.env, (*neutral_args(venv.spec.requirements), *args, *deselect), collect_only=True)
        missing = [m for m in missing_modules(run) if m not in given_up]
        if missing:
            module = missing[0]
            if _is_own(project, module):
                given_up[module] = "the module is in the project's tree (an import-path problem)"
            else:
                venv.add(module, candidates(module, venv.hints), still=None)
            continue
        marks = [n for n in missing_plugins(run) if n.startswith("marker ") and n not in given_up]
        if marks:  # a mark only a plugin registers, under --strict-markers: install the plugin
            venv.add(marks[0], plugin_candidates(marks[0], venv.hints), still="still unknown")
            continue
        broken_plugin = _BROKEN_PLUGIN.search(run.stdout + run.stderr) if run.exit_code == 3 else None
        if broken_plugin and f"no:{broken_plugin.group(1)}" not in args:  # base58's pytest-flake8 on pytest 8
            args = ["-p", f"no:{broken_plugin.group(1)}", *args]
            continue
        exits = exits_at_import(run, repo)
        if exits and exits not in ignored:
            ignored[exits] = EXITS_AT_IMPORT
            args = without_path(args, exits)
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
            f"(installed: {', '.join(venv.installed.values()) or 'nothing'}; gave up on: {given_up or 'nothing'})"
        )
    uncollectable = len(ignored)
    per_module = collected(run)
    for path in [m for m in per_module if not is_test_path(m)]:  # the grader would take it for source code
        ignored[path] = NOT_A_TEST_MODULE
        args = without_path(args, path)
        del per_module[path]
    n_collected, modules = sum(per_module.values()), set(per_module)
    if uncollectable > len(modules):
        raise SourceError(
            f"{project.info.spec}: {uncollectable} test modules cannot be collected and only {len(modules)} can: "
            + "; ".join(f"{p}: {r}" for p, r in list(ignored.items())[:5])
        )

    def full_run() -> tuple[tuple[str, ...], PytestRun, Path]:
        run_args = (*neutral_args(venv.spec.requirements), *args, *deselect)
        return run_args, *run_once(venv.env, run_args, collect_only=False)

    run_args, first, repo = full_run()
    first_dir = repo.parent
    passed_before: list[tuple[PytestRun, Path]] = []  # earlier runs whose passing tests did not run again
    for _ in range(MAX_ROUNDS):  # what failing tests lack, installed before they run again: a fixture or
        # async support a plugin provides, or a module a test imports only when it runs (httpcore's `h2`); all that
        # one run names at once, as a person would (soupsieve's tests named html5lib and lxml: a run each cost 55 s)
        needs = [n for n in missing_plugins(first) if n not in given_up]
        lazy = [m for m in missing_modules(first) if m not in given_up and not _is_own(project, m)]
        if not needs and not lazy:
            break
        rounds += 1
        wanted = [(n, plugin_candidates(n, venv.hints)) for n in needs] + [(m, []) for m in lazy]
        changed = [
            venv.add(need, cands or candidates(need, venv.hints), still="still missing") for need, cands in wanted
        ]
        if any(changed):
            first, repo, rest = _again(run_once, venv.env, run_args, first, repo, bool(passed_before))
            first_dir = repo.parent
            passed_before = [*passed_before, *rest] if rest else []
    failed = failures(first, repo)
    deselected: dict[str, str] = {}
    if failed or first.exit_code != 0:
        if not first.outcomes:
            raise SourceError(f"{project.info.spec}: the suite did not run ({suite_failure(first)}):\n{first.tail()}")
        # only the failing tests run again (a whole second suite run costs minutes on a big suite); a test that
        # passes alone but failed in the suite is flaky or order-dependent: left out either way
        second, repo = run_once(venv.env, (*run_args, *sorted(failed)), collect_only=False) if failed else (None, repo)
        if second is None or not second.outcomes:  # nothing to name, or pytest did not find the node ids
            second, repo = run_once(venv.env, run_args, collect_only=False)
        again = failures(second, repo)
        for node in sorted(set(failed) | set(again)):
            same = failed.get(node) == again.get(node)
            deselected[node] = f"fails as shipped ({failed[node]})" if same else "flaky (failed in one of two runs)"
    total = max(n_collected, len(first.outcomes) + sum(len(_passed(r, d / "repo")) for r, d in passed_before))
    if total == 0:
        raise SourceError(f"{project.info.spec}: no tests collected ({how})")
    _too_few_left(project, deselected, total)
    # the full run without the deselected tests is generation's baseline: every other test passed in it
    baseline_args = (*run_args, *(a for n in deselected for a in ("--deselect", n)))
    remember(project, venv.spec, baseline_args, cfg, first, first_dir, left_out=deselected, earlier=passed_before)
    return SuiteSetup(
        extra_requirements=tuple(venv.extra),
        installed=venv.installed,
        pytest_args=tuple(args),
        discovery=how,
        ignored=ignored,
        deselected=deselected,
        collected=total,
        rounds=rounds,
    )


def _passed(run: PytestRun, repo: Path) -> set[str]:
    return {node_id(repo, key) for key, (status, _) in run.outcomes.items() if status == "passed"}


def _again(
    run_once: _Runner, env: TestEnv, run_args: tuple[str, ...], last: PytestRun, repo: Path, kept: bool
) -> tuple[PytestRun, Path, list[tuple[PytestRun, Path]]]:
    """The tests that did not pass in ``last`` run again once the venv has what they lacked (the run, its tree, and
    ``[(last, its directory)]``: the passing tests it keeps); the whole suite again when none passed
    in it or before it (``kept``: earlier runs kept passing tests), or when pytest does not run exactly the tests
    named (a node id it cannot find). A second whole run of soupsieve's suite, once html5lib and lxml were there,
    cost 103 s."""
    passed = _passed(last, repo)
    todo = sorted({node_id(repo, key) for key in last.outcomes} - passed)
    if todo and (passed or kept):
        run, again = run_once(env, (*run_args, *todo), collect_only=False)
        if {node_id(again, key) for key in run.outcomes} == set(todo):
            return run, again, [(last, repo.parent)]
    run, again = run_once(env, run_args, collect_only=False)
    return run, again, []


def _too_few_left(project: Project, deselected: dict[str, str], total: int) -> None:
    if total - len(deselected) < MIN_KEPT * total:
        raise SourceError(
            f"{project.info.spec}: {len(deselected)} of {total} tests fail as shipped (fewer than "
            f"{MIN_KEPT:.0%} would be left): " + "; ".join(f"{n}: {r}" for n, r in list(deselected.items())[:5])
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
    if hollow := _HOLLOW.search(message):  # jmespath 1.1.0's sdist: ``from tests import OrderedDict``, no __init__
        name, package = hollow.groups()
        path = package.replace(".", "/")
        return f"imports {name!r} from {package!r}, which the source ships without {path}/__init__.py"
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    return (lines[-1] if lines else "collection error")[:200]


def prepare_suite(cfg: GenerateConfig) -> SuiteSetup:
    """Load ``cfg.source`` into a scratch directory and run :func:`setup_suite` on it, or read its result back from
    the suite cache (:mod:`crf_prime.featdel.suite_cache`: a second generation of the same package)."""
    workspace = Path(tempfile.mkdtemp(prefix="crf-featdel-setup-"))
    try:
        project = load_project(cfg.source, workspace)
        name = cache_key(project, cfg)
        setup = suite_cache.load(name, SuiteSetup)
        if setup is None:
            setup = setup_suite(project, Sandbox(cfg), cfg, workspace)
            suite_cache.store(name, setup)
        return setup
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


def set_up(cfg: GenerateConfig) -> tuple[GenerateConfig, SuiteSetup | None]:
    """``cfg`` with what the setup loop learned (:func:`prepare_suite`: its installs, pytest arguments and
    deselections), and the loop's record; ``cfg`` unchanged and None when ``auto_setup`` is off."""
    if not cfg.auto_setup:
        return cfg, None
    setup = prepare_suite(cfg)
    learned = {
        "extra_requirements": list(setup.extra_requirements),
        "pytest_args": list(setup.pytest_args),
        "deselect": [*cfg.deselect, *setup.deselected],
    }
    return cfg.model_copy(update=learned), setup


def cache_key(project: Project, cfg: GenerateConfig) -> str:
    """The suite cache entry of the setup loop's result: the source, what the loop starts from (the host's pytest
    and coverage pins, the configured requirements, arguments and deselections) and the sandbox it runs in."""
    return suite_cache.key(
        "setup",
        {
            "source": project.info.sha256,
            "host_pins": default_spec(()).requirements,
            "index": uv_index_args(),  # where the loop's installs come from
            "extra_requirements": cfg.extra_requirements,
            "pytest_args": cfg.pytest_args,
            "deselect": cfg.deselect,
            "suite_wall_seconds": cfg.suite_wall_seconds,
            "sandbox": {k: getattr(cfg, k) for k in sorted(GradingSandbox.model_fields)},
        },
    )


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
    "set_up",
    "setup_suite",
    "without_path",
]
