"""Per-source test venv: pytest + coverage + the project's runtime dependencies, never the project itself.

The venv is built once per requirement set (cached under ``cache_root()/venvs/<hash>``) with ``--without-pip``, so
nothing inside the sandbox can ``pip install`` the original package back; after installing, the venv is checked
for any importable copy of the project's top-level names.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from crf_prime.extras import require
from crf_prime.featdel.models import TestEnvSpec
from crf_prime.featdel.source import SourceError, cache_root
from crf_prime.sandbox import Sandbox

# pytest plugin used only during the generator's coverage run: one coverage context per test node id
# (coverage's "dynamic contexts"; the native ``dynamic_context = test_function`` collapses parametrisations).
CONTEXT_PLUGIN = '''\
"""crf-prime featdel: switch the coverage context to the running test's node id."""
import coverage
import pytest


def _switch(name):
    cov = coverage.Coverage.current()
    if cov is not None:
        cov.switch_context(name)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _switch(item.nodeid)
    yield
    _switch("")
'''


def default_spec(runtime_requirements: tuple[str, ...]) -> TestEnvSpec:
    """pytest and coverage pinned to the versions of this interpreter (unless the requirements constrain them),
    plus the project's runtime and test requirements.

    Both come with the ``featdel`` extra; without them this raises MissingExtraError naming it.
    """

    for module in ("pytest", "coverage"):
        require(module, "featdel")
    named = {re.sub(r"[-_.]+", "-", re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]).lower() for r in runtime_requirements}
    # a project that constrains pytest or coverage itself gets its range (resolved to a pin by ``pinned``)
    pins = [f"{m}=={importlib.metadata.version(m)}" if m not in named else m for m in ("pytest", "coverage")]
    return TestEnvSpec(
        python=f"{sys.version_info.major}.{sys.version_info.minor}",
        requirements=tuple(sorted(set(pins) | set(runtime_requirements))),
    )


def pinned(spec: TestEnvSpec, *, exclude: tuple[str, ...] = (), cache: Path | None = None) -> TestEnvSpec:
    """``spec`` with every requirement resolved to an exact ``name==version`` (uv's resolver, else pip's; cached per
    spec), less the distributions named in ``exclude`` (the project itself, see :func:`without`).

    Test requirements read from an sdist are ranges; the task rows must name the venv they were validated in."""
    path = (cache or cache_root()) / "pins" / f"{spec_key(spec)}.json"
    if path.is_file():
        return without(TestEnvSpec.model_validate_json(path.read_text()), exclude)
    path.parent.mkdir(parents=True, exist_ok=True)
    pins = _resolve_uv(spec, uv) if (uv := uv_bin()) else _resolve_pip(spec, path)
    out = spec.model_copy(update={"requirements": tuple(pins)})
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(out.model_dump_json())
    tmp.replace(path)
    return without(out, exclude)


def without(spec: TestEnvSpec, names: tuple[str, ...]) -> TestEnvSpec:
    """A resolved ``spec`` less the pins of ``names`` (recorded in ``excluded``: the venv is then installed without
    dependencies, so nothing brings them back), or ``spec`` itself when it pins none of them. A test dependency
    that depends on the project (pytest-perf -> keyring -> importlib-metadata) would otherwise put a copy of the
    project in the venv; left out, its dependents import the task's tree from ``PYTHONPATH``, as the tests do."""
    drop = {_canon(n) for n in names}
    kept = tuple(r for r in spec.requirements if _canon(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]) not in drop)
    if len(kept) == len(spec.requirements):
        return spec
    gone = sorted({*spec.excluded, *(r for r in spec.requirements if r not in kept)})
    return spec.model_copy(update={"requirements": kept, "excluded": tuple(gone)})


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def uv_bin() -> str | None:
    """uv's executable (the ``uv`` distribution's, else one on PATH), or None: pip then does the work. uv resolves
    and installs a test venv in seconds where pip takes half a minute to minutes a package on a loaded machine,
    and its wheel cache is shared by every venv of a corpus run."""
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def uv_index_args() -> list[str]:
    """pip's index settings from the environment (``PIP_INDEX_URL``, ``PIP_EXTRA_INDEX_URL``, ``PIP_FIND_LINKS``)
    as uv options, so uv looks where pip would; uv's own ``UV_*`` settings apply as well."""
    out: list[str] = []
    for var, opt in (
        ("PIP_INDEX_URL", "--default-index"),
        ("PIP_EXTRA_INDEX_URL", "--index"),
        ("PIP_FIND_LINKS", "--find-links"),
    ):
        for value in os.environ.get(var, "").split():
            out += [opt, value]
    return out


def _resolve_uv(spec: TestEnvSpec, uv: str) -> list[str]:
    cmd = [uv, "pip", "compile", "-", "--quiet", "--no-header", "--no-annotate", "--python", sys.executable]
    proc = subprocess.run(
        [*cmd, *uv_index_args()], input="\n".join(spec.requirements) + "\n", capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SourceError(
            f"resolving the test requirements failed ({' '.join(spec.requirements)}): {proc.stderr[-800:]}"
        )
    return sorted(line.strip() for line in proc.stdout.splitlines() if "==" in line and not line.startswith("#"))


def _resolve_pip(spec: TestEnvSpec, path: Path) -> list[str]:
    report = path.with_suffix(f".{os.getpid()}.report")
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--no-input"]
    cmd += ["--disable-pip-version-check", "--report", str(report), *spec.requirements]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not report.is_file():
        report.unlink(missing_ok=True)
        raise SourceError(
            f"resolving the test requirements failed ({' '.join(spec.requirements)}): {proc.stderr[-800:]}"
        )
    installs = json.loads(report.read_text())["install"]
    report.unlink()
    return sorted(f"{i['metadata']['name']}=={i['metadata']['version']}" for i in installs)


@dataclass(frozen=True)
class TestEnv:
    """A built venv and the plugin directory used for coverage contexts."""

    __test__ = False  # not a pytest test class

    venv: Path
    plugin_dir: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


def spec_key(spec: TestEnvSpec) -> str:
    """The venv's cache name (fields left at their defaults do not count: older specs keep their venvs)."""
    return hashlib.sha256(json.dumps(spec.model_dump(exclude_defaults=True), sort_keys=True).encode()).hexdigest()[:16]


def ensure_test_env(spec: TestEnvSpec, forbidden: tuple[str, ...] = (), *, cache: Path | None = None) -> TestEnv:
    """Build (or reuse) the venv for ``spec``; raise if any ``forbidden`` top-level name is importable in it."""
    want = f"{sys.version_info.major}.{sys.version_info.minor}"
    if spec.python != want:
        raise SourceError(f"test_env.python: tasks were built with Python {spec.python}, this is Python {want}")
    root = (cache or cache_root()) / "venvs"
    root.mkdir(parents=True, exist_ok=True)
    venv = root / spec_key(spec)
    plugin_dir = root / "plugins"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / ".complete").is_file():
            _build(venv, spec)
        if not (venv / ".bytecode").is_file():  # a venv built before its bytecode was compiled
            _compile(venv)
        plugin_dir.mkdir(exist_ok=True)
        plugin = plugin_dir / "crf_featdel_ctx.py"
        if not plugin.is_file() or plugin.read_text() != CONTEXT_PLUGIN:
            plugin.write_text(CONTEXT_PLUGIN)
    env = TestEnv(venv=venv, plugin_dir=plugin_dir)
    if forbidden:
        _check_not_importable(env, forbidden)
    return env


def system_site_dirs() -> list[Path]:
    """Package directories of interpreters visible read-only inside the sandbox (/usr and the base prefix)."""

    patterns = [
        f"{sys.base_prefix}/lib/python3*/site-packages",
        "/usr/lib/python3/dist-packages",
        "/usr/lib/python3*/site-packages",
        "/usr/local/lib/python3*/site-packages",
        "/usr/local/lib/python3*/dist-packages",
    ]
    return sorted({Path(p) for pat in patterns for p in glob.glob(pat)})


def visible_copies(
    names: tuple[str, ...], roots: list[Path] | None = None, *, sandbox: Sandbox | None = None
) -> list[Path]:
    """Installed copies of the project's top-level modules that a process in the box could read by path.

    With ``sandbox`` the check runs inside a box of that sandbox (an unsandboxed one sees the whole host), so it
    reports what a task's process really sees; without it, what exists on the host."""
    cands = [
        c
        for root in (system_site_dirs() if roots is None else roots)
        for n in names
        for c in (root / n, root / f"{n}.py")
    ]
    if sandbox is None or not cands:
        return [c for c in cands if c.exists()]

    with tempfile.TemporaryDirectory(prefix="crf-featdel-leak-") as tmp:
        script = 'for p in "$@"; do [ -e "$p" ] && echo "$p"; done; exit 0'
        result = sandbox.run(["/bin/sh", "-c", script, "leak-check", *map(str, cands)], workdir=Path(tmp))
    if result.exit_code != 0:
        raise SourceError(f"the sandbox leak check failed (exit {result.exit_code}): {result.stderr[-400:]}")
    seen = set(result.stdout.splitlines())
    return [c for c in cands if str(c) in seen]


def _build(venv: Path, spec: TestEnvSpec) -> None:
    tmp = venv.with_name(venv.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp)], check=True, capture_output=True)
    if uv := uv_bin():
        cmd = [uv, "pip", "install", "--quiet", "--python", str(tmp / "bin" / "python"), *uv_index_args()]
    else:
        cmd = [sys.executable, "-m", "pip", "--python", str(tmp / "bin" / "python"), "install", "-q"]
        cmd += ["--disable-pip-version-check", "--no-input"]
    # a spec that leaves a distribution out (``excluded``) is a closed, pinned set: its dependencies are not followed
    cmd += [*(["--no-deps"] if spec.excluded else []), *spec.requirements]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SourceError(f"building the test venv failed ({' '.join(spec.requirements)}): {proc.stderr[-800:]}")
    # the venv's python is a symlink to the base interpreter and site-packages is relative: a rename is safe
    tmp.rename(venv)
    (venv / ".complete").write_text(json.dumps(spec.model_dump(), sort_keys=True))
    _compile(venv)


BYTECODE_STORE = "bytecode"
"""Directory beside the cache's venvs holding each compiled file once, named by its source's content, mtime and size."""
_COMPILE = """\
import json, py_compile, sys
for source, compiled in json.load(sys.stdin):
    try:
        py_compile.compile(source, cfile=compiled, doraise=True)
    except (py_compile.PyCompileError, OSError, ValueError):
        pass
"""


def _compile(venv: Path) -> None:
    """Write the venv's bytecode once: every run in the box imports from it read-only with ``-B``, so without it
    each pytest start compiles pytest and the project's dependencies again (~2 s a run). A file that does not
    compile (a test fixture in a distribution) is left to fail as it would at import.

    uv links one copy of a distribution's files into every venv, so most files are the same file in every venv of
    the cache (pytest, coverage, pygments: 3.6 s of CPU to compile each time). A file compiled before (the same
    bytes, mtime and size: what its bytecode's header is checked against) gets that bytecode by a hard link from
    :data:`BYTECODE_STORE`; the others are compiled here by the venv's own interpreter and kept there. A compiled
    file names its source's path, which Python replaces with the real one when it loads the file."""
    store = venv.parent / BYTECODE_STORE / sys.implementation.cache_tag
    todo: list[tuple[Path, Path, Path]] = []
    for site in venv.glob("lib/python3*/site-packages"):
        for source in site.rglob("*.py"):
            if not source.is_file():
                continue
            st = source.stat()
            compiled = Path(importlib.util.cache_from_source(str(source)))
            if _current(compiled, st):
                continue
            key = f"{hashlib.sha256(source.read_bytes()).hexdigest()[:40]}-{st.st_mtime_ns}-{st.st_size}"
            kept = store / key[:2] / f"{key}.pyc"
            if kept.is_file():
                compiled.parent.mkdir(exist_ok=True)
                compiled.unlink(missing_ok=True)
                os.link(kept, compiled)
            else:
                todo.append((source, compiled, kept))
    pairs = json.dumps([[str(source), str(compiled)] for source, compiled, _ in todo])
    subprocess.run([str(venv / "bin" / "python"), "-c", _COMPILE], input=pairs, text=True, capture_output=True)
    for source, compiled, kept in todo:
        if _current(compiled, source.stat()):  # not a stale one the compile could not replace
            kept.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.link(compiled, kept)
    (venv / ".bytecode").write_text("")


def _current(compiled: Path, st: os.stat_result) -> bool:
    """Whether ``compiled`` is bytecode the import system takes for a source with stat ``st`` (``compileall``'s test:
    this interpreter's magic number and, unless hash-based, the source's mtime and size)."""
    try:
        with open(compiled, "rb") as fh:
            header = fh.read(16)
    except OSError:
        return False
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
        return False
    flags, mtime, size = (int.from_bytes(header[i : i + 4], "little") for i in (4, 8, 12))
    return flags != 0 or (mtime, size) == (int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF)


def _check_not_importable(env: TestEnv, names: tuple[str, ...]) -> None:
    code = "import importlib.util,sys,json;print(json.dumps([n for n in sys.argv[1:] if importlib.util.find_spec(n)]))"
    proc = subprocess.run(
        [str(env.python), "-I", "-c", code, *names], capture_output=True, text=True, cwd=env.venv, check=True
    )
    found = json.loads(proc.stdout)
    if found:
        raise SourceError(
            f"the test venv {env.venv} can import the project itself ({', '.join(found)}): a dependency pulls it in, "
            "so deleting code would be a silent no-op; pick another source"
        )
