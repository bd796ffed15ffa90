"""What a project's test suite needs beyond its runtime dependencies, read from the sdist itself.

Sources, in the order a maintainer declares them: extras named test/tests/testing (``dev`` only when none of those
exists: it usually brings linters and doc builders too), ``requirements-test*.txt`` / ``test-requirements*.txt`` /
``requirements/test*.txt`` (with ``-r`` includes inside the tree), tox.ini ``[testenv] deps``, and the pytest
plugins the pytest configuration names (``required_plugins``, or options and ini keys that only a plugin defines).
Requirements that name the project itself are dropped: the test venv must never contain it.
"""

from __future__ import annotations

import re
import shlex
import sys
import tomllib
from configparser import ConfigParser
from configparser import Error as ConfigError
from pathlib import Path

TEST_EXTRAS = ("test", "tests", "testing")
FALLBACK_EXTRAS = ("dev",)

# pytest options / ini keys that only one well-known plugin defines -> that plugin's distribution
# (not pytest-cov or pytest-xdist: the coverage map needs one coverage run in one process; when a project names
# them itself they are switched off by ``neutral_args``; their options then make pytest retry without ``addopts``)
_PLUGIN_OPTIONS = {
    "--timeout": "pytest-timeout",
    "--benchmark": "pytest-benchmark",
    "--mypy": "pytest-mypy",
    "--doctest-plus": "pytest-doctestplus",
    "--hypothesis": "hypothesis",
}
_PLUGIN_INI_KEYS = {
    "asyncio_mode": "pytest-asyncio",
    "asyncio_default_fixture_loop_scope": "pytest-asyncio",
    "timeout": "pytest-timeout",
    "trio_mode": "pytest-trio",
    "mock_use_standalone_module": "pytest-mock",
    "env": "pytest-env",
    "doctest_plus": "pytest-doctestplus",
}


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _clean(raw: list[str], project: str) -> list[str]:
    """Valid requirement strings for this interpreter, without the project itself."""
    from packaging.markers import default_environment  # optional host (pip's packaging)
    from packaging.requirements import InvalidRequirement, Requirement  # optional host (pip's packaging)

    env = default_environment()
    out = []
    for r in raw:
        r = r.split(" #", 1)[0].strip()
        if not r or r.startswith(("-", ".", "/", "{")) or "://" in r:
            continue
        try:
            req = Requirement(r)
        except InvalidRequirement:
            continue  # a line pip could not install either (tox substitutions, local paths); not ours to fix
        if _canon(req.name) == _canon(project):
            continue
        if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):  # type: ignore[dict-item]  # packaging types Environment (a str-valued TypedDict) apart from evaluate()'s dict[str, str | set[str]]
            continue
        req.marker = None
        out.append(str(req))
    return out


def _extras_from_metadata(root: Path) -> dict[str, list[str]]:
    """extra name -> requirements, from PKG-INFO (Requires-Dist with ``extra == "x"``), pyproject or setup.cfg."""
    from packaging.markers import default_environment  # optional host (pip's packaging)
    from packaging.requirements import InvalidRequirement, Requirement  # optional host (pip's packaging)

    env = default_environment()
    out: dict[str, list[str]] = {}
    pkg_info = root / "PKG-INFO"
    if pkg_info.is_file():
        for line in pkg_info.read_text(errors="replace").splitlines():
            if not line.startswith("Requires-Dist:"):
                continue
            text = line.split(":", 1)[1].strip()
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            for extra in re.findall(r"extra\s*==\s*['\"]([^'\"]+)['\"]", str(req.marker or "")):
                if req.marker is not None and req.marker.evaluate({**env, "extra": extra}):  # type: ignore[dict-item]  # as above
                    out.setdefault(_canon(extra), []).append(text.split(";", 1)[0].strip())
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(errors="replace"))
        except tomllib.TOMLDecodeError:
            data = {}
        for extra, reqs in data.get("project", {}).get("optional-dependencies", {}).items():
            out.setdefault(_canon(extra), []).extend(reqs)
        for group, reqs in data.get("dependency-groups", {}).items():  # PEP 735
            out.setdefault(_canon(group), []).extend(r for r in reqs if isinstance(r, str))
    cfg = _ini(root / "setup.cfg")
    if cfg is not None and cfg.has_section("options.extras_require"):
        for extra, value in cfg.items("options.extras_require"):
            out.setdefault(_canon(extra), []).extend(v.strip() for v in value.splitlines() if v.strip())
    return out


def _ini(path: Path) -> ConfigParser | None:
    if not path.is_file():
        return None
    cfg = ConfigParser(interpolation=None)
    try:
        cfg.read(path)
    except ConfigError:
        return None
    return cfg


def _requirements_file(path: Path, root: Path, seen: set[Path]) -> list[str]:
    if path in seen or not path.is_file() or root not in path.resolve().parents:
        return []
    seen.add(path)
    out = []
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if line.startswith(("-r ", "--requirement ")):
            out += _requirements_file((path.parent / line.split(None, 1)[1]).resolve(), root, seen)
        elif line and not line.startswith("#"):
            out.append(line)
    return out


def _requirement_files(root: Path) -> list[Path]:
    pats: tuple[str, ...] = (
        "requirements-test*.txt",
        "requirements_test*.txt",
        "test-requirements*.txt",
        "test_requirements*.txt",
    )
    pats += ("requirements/test*.txt", "requirements/tests*.txt", "tests/requirements*.txt")
    return sorted({p.resolve() for pat in pats for p in root.glob(pat) if p.is_file()})


def _tox_deps(root: Path) -> list[str]:
    cfg = _ini(root / "tox.ini")
    if cfg is None or not cfg.has_option("testenv", "deps"):
        return []
    out: list[str] = []
    for line in cfg.get("testenv", "deps").splitlines():
        line = line.strip()
        if line.startswith("-r"):
            out += _requirements_file((root / line[2:].strip()).resolve(), root.resolve(), set())
        elif ":" in line.split(" ")[0]:  # factor-conditional ("py311: foo", "django42: Django<4.3")
            factors, req = line.split(":", 1)
            if _this_python(factors):
                out.append(req.strip())
        else:
            out.append(line)
    return out


def _this_python(factors: str) -> bool:
    """Whether a tox factor condition (``py311``, ``py3,py311``, ``py311-lint``) holds for this interpreter; other
    factors (a Django version, a lint env) name environments we do not build."""

    here = {"py", "py3", f"py{sys.version_info.major}{sys.version_info.minor}"}
    return any(f.strip() in here for alt in factors.split(",") for f in alt.split("-"))


def _pytest_settings(root: Path) -> tuple[list[str], dict[str, str]]:
    """(addopts tokens, ini keys -> raw values) of the pytest configuration pytest itself would read."""
    for name in ("pytest.ini", ".pytest.ini"):
        cfg = _ini(root / name)
        if cfg is not None and cfg.has_section("pytest"):
            return _split(dict(cfg.items("pytest")))
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            opts = tomllib.loads(pyproject.read_text(errors="replace")).get("tool", {}).get("pytest", {})
        except tomllib.TOMLDecodeError:
            opts = {}
        if "ini_options" in opts:
            raw = {k: " ".join(v) if isinstance(v, list) else str(v) for k, v in opts["ini_options"].items()}
            return _split(raw)
    for name, section in (("tox.ini", "pytest"), ("setup.cfg", "tool:pytest")):
        cfg = _ini(root / name)
        if cfg is not None and cfg.has_section(section):
            return _split(dict(cfg.items(section)))
    return [], {}


def _split(raw: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    try:
        tokens = shlex.split(raw.get("addopts", ""))
    except ValueError:
        tokens = raw.get("addopts", "").split()
    return tokens, raw


def plugin_requirements(root: Path) -> list[str]:
    """Plugin distributions the project's pytest configuration cannot run without."""
    tokens, ini = _pytest_settings(root)
    out = [r for r in ini.get("required_plugins", "").split() if r]
    for tok in tokens:
        opt = tok.split("=", 1)[0]
        for prefix, dist in _PLUGIN_OPTIONS.items():
            if opt == prefix or (prefix.startswith("--") and opt.startswith(prefix)):
                out.append(dist)
    out += [dist for key, dist in _PLUGIN_INI_KEYS.items() if key in ini]
    return out


def neutral_args(requirements: tuple[str, ...]) -> tuple[str, ...]:
    """pytest arguments that switch off what installed plugins do beside the tests: what would break the per-test
    coverage map (pytest-cov measuring on its own, pytest-xdist running tests in other processes), and
    pytest-benchmark's timing rounds (a benchmarked function then runs once and the test still checks its result: a
    second or more per benchmark in every grading run otherwise)."""
    names = {_canon(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]) for r in requirements}
    return (
        (("--no-cov",) if "pytest-cov" in names else ())
        + (("-p", "no:xdist") if "pytest-xdist" in names else ())
        + (("--benchmark-disable",) if "pytest-benchmark" in names else ())
    )


def suite_requirements(root: Path, project: str) -> tuple[str, ...]:
    """Requirements the project's tests declare (sorted, deduplicated, without the project itself)."""
    extras = _extras_from_metadata(root)
    raw = [r for e in TEST_EXTRAS for r in extras.get(e, [])]
    files = _requirement_files(root)
    for path in files:
        raw += _requirements_file(path, root.resolve(), set())
    raw += _tox_deps(root)
    if not raw:
        raw = [r for e in FALLBACK_EXTRAS for r in extras.get(e, [])]
    raw += plugin_requirements(root)
    cleaned = _clean(raw, project)
    return tuple(sorted(set(cleaned)))


def _setup_tests_require(root: Path) -> list[str]:
    """``tests_require`` of setup.cfg ``[options]`` and string literals of ``tests_require=[...]`` in setup.py."""
    out: list[str] = []
    cfg = _ini(root / "setup.cfg")
    if cfg is not None:
        out += [v.strip() for v in cfg.get("options", "tests_require", fallback="").splitlines() if v.strip()]
    setup = root / "setup.py"
    if setup.is_file():
        m = re.search(r"tests_require\s*=\s*\[([^\]]*)\]", setup.read_text(errors="replace"))
        out += re.findall(r"['\"]([^'\"]+)['\"]", m.group(1)) if m else []
    return out


def _nox_installs(root: Path) -> list[str]:
    """String arguments of ``session.install(...)`` in noxfile.py (options and ``-r`` files left out)."""
    import ast

    nox = root / "noxfile.py"
    if not nox.is_file():
        return []
    try:
        tree = ast.parse(nox.read_text(errors="replace"))
    except SyntaxError:
        return []
    return [
        a.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "install"
        for a in node.args
        if isinstance(a, ast.Constant) and isinstance(a.value, str) and not a.value.startswith("-")
    ]


def requirement_hints(root: Path, project: str) -> tuple[str, ...]:
    """Every requirement the project names anywhere for its tests or development (all extras and dependency
    groups, requirement files, tox deps, setup ``tests_require``, noxfile installs): where the setup loop looks
    first for the distribution behind a module the tests import but the venv lacks."""
    extras = _extras_from_metadata(root)
    raw = [r for reqs in extras.values() for r in reqs]
    for path in (
        _requirement_files(root) + sorted(root.glob("requirements*.txt")) + sorted(root.glob("*/requirements*.txt"))
    ):
        raw += _requirements_file(path.resolve(), root.resolve(), set())
    raw += _tox_deps(root) + _setup_tests_require(root) + _nox_installs(root)
    return tuple(sorted(set(_clean(raw, project))))


__all__ = ["neutral_args", "plugin_requirements", "requirement_hints", "suite_requirements"]
