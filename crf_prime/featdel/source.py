"""Get a project's source tree (local directory or a pinned PyPI sdist), strip what leaks code, read its layout.

Leak surface: bytecode caches hold the deleted implementation
(``marshal`` + ``dis`` recover it), type-checker caches hold signatures, ``.git`` keeps old blobs, ``*.egg-info`` and
``build/``/``dist/`` hold copies or file lists. All are removed from the tree every task is built from.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from configparser import ConfigParser
from dataclasses import dataclass
from pathlib import Path

from crf_prime.errors import InputError
from crf_prime.featdel.models import SourceInfo

# directory names removed anywhere in the tree
STRIP_DIRS = frozenset(
    {
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".pytype",
        ".pyre",
        ".hypothesis",
        ".git",
        ".hg",
        ".svn",
        ".tox",
        ".nox",
        ".venv",
        "venv",
        "htmlcov",
        ".eggs",
    }
)
# directory names removed at the root only (a package may legitimately have a sub-package called "build")
STRIP_ROOT_DIRS = frozenset({"build", "dist"})
STRIP_SUFFIXES = (".pyc", ".pyo", ".so", ".pyd", ".orig", ".rej", "~", ".dmypy.json")
STRIP_FILES = frozenset({".coverage", ".dmypy.json"})

# module names that hold tests whatever their directory (a root ``tests.py``, a package's ``pkg/tests.py``)
TEST_MODULES = frozenset({"conftest.py", "tests.py", "test.py"})

TEST_CONFIG_FILES = ("pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "conftest.py")


class SourceError(InputError, RuntimeError):
    """The source cannot be used as a Feature Deletion project; the message says why."""


def cache_root() -> Path:
    """Cache directory for sdists and test venvs (``$CRF_PRIME_CACHE`` or ``~/.cache/crf-prime``)."""
    root = os.environ.get("CRF_PRIME_CACHE") or str(Path.home() / ".cache" / "crf-prime")
    return Path(root) / "featdel"


def strip_tree(root: Path) -> list[str]:
    """Remove caches, VCS data and build artefacts under ``root``; return the removed paths (relative, sorted)."""
    removed: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, topdown=True):
        here = Path(dirpath)
        keep = []
        for d in dirnames:
            full = here / d
            if d in STRIP_DIRS or d.endswith(".egg-info") or (here == root and d in STRIP_ROOT_DIRS):
                shutil.rmtree(full)
                removed.append(full.relative_to(root).as_posix())
            elif full.is_symlink():
                full.unlink()
                removed.append(full.relative_to(root).as_posix())
            else:
                keep.append(d)
        dirnames[:] = keep
        for f in filenames:
            full = here / f
            if f in STRIP_FILES or f.endswith(STRIP_SUFFIXES) or full.is_symlink():
                full.unlink()
                removed.append(full.relative_to(root).as_posix())
    return sorted(removed)


def tree_sha256(root: Path) -> str:
    """Content hash of a tree (paths + bytes, sorted) — stable across machines."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def _parse_pypi_spec(spec: str) -> tuple[str, str]:
    m = re.fullmatch(r"pypi:([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)", spec.strip())
    if not m:
        raise SourceError(f"source {spec!r}: expected 'pypi:NAME==VERSION' (pinned) or a local directory")
    return m.group(1), m.group(2)


PYPI_JSON = "https://pypi.org/pypi"
"""PyPI's JSON API: one small request names a release's sdist, its size and sha256."""


def download_sdist(name: str, version: str, cache: Path | None = None) -> Path:
    """The sdist of ``name==version`` in the cache (fetched once) and its path: straight from PyPI's JSON API when
    it serves the release (checked against its sha256), else by ``pip download`` from pip's configured indexes."""
    dest = (cache or cache_root()) / "sdists" / f"{name.lower()}-{version}"
    found = sorted(p for p in dest.glob("*") if p.suffix in (".gz", ".zip")) if dest.is_dir() else []
    if found:
        return found[0]
    tmp = Path(tempfile.mkdtemp(prefix="dl-", dir=dest.parent if dest.parent.exists() else None))
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        if not _fetch_sdist(name, version, tmp):
            _pip_download(name, version, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        tmp.rename(dest)
    except OSError:  # another process (a second test worker, a parallel generate) published it first
        shutil.rmtree(tmp)
        if not dest.is_dir():
            raise
    return sorted(p for p in dest.glob("*") if p.suffix in (".gz", ".zip"))[0]


def _fetch_sdist(name: str, version: str, into: Path) -> bool:
    """Download the release's sdist named by the JSON API into ``into``; False when the API cannot name one (no
    network, an index of its own, no sdist for that version). ``pip download`` takes seconds to minutes a package
    (it builds the sdist's metadata with its build backend); this takes one request and the file."""
    import httpx  # openai's dependency (a core one); imported here: start-up

    try:
        with httpx.Client(timeout=60, follow_redirects=True) as client:
            resp = client.get(f"{PYPI_JSON}/{name}/json")
            if resp.status_code != 200:
                return False
            files = resp.json().get("releases", {}).get(version, [])
            sdist = next((f for f in files if f.get("packagetype") == "sdist" and not f.get("yanked")), None)
            if sdist is None or "/" in sdist["filename"]:
                return False
            data = client.get(resp.url.join(sdist["url"])).raise_for_status().content  # a mirror's URLs are relative
    except (httpx.HTTPError, ValueError, KeyError):
        return False
    digest = hashlib.sha256(data).hexdigest()
    if digest != sdist.get("digests", {}).get("sha256"):
        raise SourceError(
            f"{name}=={version}: the sdist {sdist['filename']} does not match the sha256 the index gives "
            f"({digest} != {sdist.get('digests', {}).get('sha256')})"
        )
    (into / sdist["filename"]).write_bytes(data)
    return True


def _pip_download(name: str, version: str, into: Path) -> None:
    # --no-binary for this package only: its build backend (needed to read the sdist's metadata) comes as a wheel,
    # not built from source itself
    cmd = [sys.executable, "-m", "pip", "download", "--no-binary", name, "--no-deps", "--disable-pip-version-check"]
    cmd += ["-q", "-d", str(into), f"{name}=={version}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not any(p.suffix in (".gz", ".zip") for p in into.glob("*")):
        raise SourceError(
            f"pip download {name}=={version} failed (exit {proc.returncode}): {proc.stderr.strip()[-600:]}"
        )


def _unpack(archive: Path, into: Path) -> Path:
    """Unpack an sdist (tar.gz or zip) safely; return its single top-level directory."""
    into.mkdir(parents=True, exist_ok=True)
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as z:
            for m in z.namelist():
                if m.startswith("/") or ".." in Path(m).parts:
                    raise SourceError(f"{archive}: unsafe member {m!r}")
            z.extractall(into)
    else:
        with tarfile.open(archive) as t:
            t.extractall(into, filter="data")
    tops = [p for p in into.iterdir()]
    if len(tops) == 1 and tops[0].is_dir():
        return tops[0]
    return into


@dataclass(frozen=True)
class Project:
    """A stripped source tree ready for generation, with its layout."""

    root: Path
    info: SourceInfo
    package_dirs: tuple[str, ...]
    """Importable package directories (and "." when top-level modules exist), relative to root."""
    pythonpath: tuple[str, ...]
    """Relative dirs for PYTHONPATH ("src" for a src layout, "." otherwise)."""
    top_level: tuple[str, ...]
    """Top-level importable names (packages and modules) — must never be importable from the test venv."""
    runtime_requirements: tuple[str, ...]
    """The project's runtime dependencies (Requires-Dist without extras / [project].dependencies)."""
    test_requirements: tuple[str, ...] = ()
    """What its tests declare beyond those (test extras, requirement files, tox deps, pytest plugins)."""
    license: str = ""
    """Licence as the metadata states it (License-Expression, License, or the classifier); "" when absent."""


def is_test_path(rel: str) -> bool:
    """True for test modules and anything inside a test directory (``tests/``, ``test/``, ``testing/``)."""
    parts = rel.split("/")
    if any(p in ("tests", "test", "testing") for p in parts[:-1]):
        return True
    name = parts[-1]
    return name.startswith(("test_", "tests_")) or name.endswith(("_test.py", "_tests.py")) or name in TEST_MODULES


def _requirements(root: Path) -> tuple[str, ...]:
    from packaging.markers import default_environment  # optional host (pip's packaging)
    from packaging.requirements import InvalidRequirement, Requirement  # optional host (pip's packaging)

    raw: list[str] = []
    pkg_info = root / "PKG-INFO"
    pyproject = root / "pyproject.toml"
    if pkg_info.is_file():
        for line in pkg_info.read_text(errors="replace").splitlines():
            if line.startswith("Requires-Dist:"):
                raw.append(line.split(":", 1)[1].strip())
    elif pyproject.is_file():
        raw = list(tomllib.loads(pyproject.read_text()).get("project", {}).get("dependencies", []))
    if not raw and (root / "setup.cfg").is_file():
        cfg = ConfigParser()
        cfg.read(root / "setup.cfg")
        raw = [r.strip() for r in cfg.get("options", "install_requires", fallback="").splitlines() if r.strip()]
    env = default_environment()
    out = []
    for r in raw:
        try:
            req = Requirement(r)
        except InvalidRequirement as e:
            raise SourceError(f"{root}: cannot parse requirement {r!r}: {e}") from e
        if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):  # type: ignore[dict-item]  # packaging types Environment (a str-valued TypedDict) apart from evaluate()'s dict[str, str | set[str]]
            continue
        out.append(str(req))
    return tuple(sorted(set(out)))


NOT_PACKAGES = frozenset({"docs", "doc", "examples", "benchmarks", "scripts"})
"""Top-level directories that hold no part of the project's importable code, ``__init__.py`` or not."""


def _layout(root: Path) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Find importable packages/modules (src layout or flat) excluding tests, setup scripts, docs."""
    src = root / "src"
    # a src layout holds a package or a single module (``src/typing_extensions.py``)
    base_rel = "src" if src.is_dir() and (any(src.glob("*/__init__.py")) or any(src.glob("*.py"))) else "."
    base = root / base_rel
    pkgs: list[str] = []
    top: list[str] = []
    has_modules = False
    for p in sorted(base.iterdir()):
        rel = p.relative_to(root).as_posix()
        if (
            p.is_dir()
            and (p / "__init__.py").is_file()
            and not is_test_path(rel + "/x.py")
            and p.name not in NOT_PACKAGES
        ):
            pkgs.append(rel)
            top.append(p.name)
        elif (
            p.is_file()
            and p.suffix == ".py"
            and not is_test_path(rel)
            and p.name
            not in (
                "setup.py",
                "conftest.py",
                "noxfile.py",
                "fabfile.py",
                "tasks.py",
            )
        ):
            has_modules = True
            top.append(p.stem)
    if has_modules:
        pkgs.append(base_rel)
    if not pkgs:
        spaces = [
            p.name
            for p in sorted(base.iterdir())
            if p.is_dir() and p.name not in NOT_PACKAGES and not is_test_path(p.name + "/x.py")
        ]
        spaces = [n for n in spaces if any((base / n).rglob("*.py"))]
        hint = f"; namespace packages ({', '.join(n + '/' for n in spaces)} without __init__.py) are not supported"
        raise SourceError(
            f"{root}: no importable package or module found (looked in {base_rel!r}){hint if spaces else ''}"
        )
    return tuple(pkgs), (base_rel,), tuple(sorted(top))


def source_files(root: Path, package_dirs: tuple[str, ...]) -> tuple[str, ...]:
    """The project's non-test .py files (the allow-list the grader takes from the agent)."""
    out: set[str] = set()
    for d in package_dirs:
        base = root / d
        if d in (".", "src"):
            cands = [p for p in base.glob("*.py")]
        else:
            cands = list(base.rglob("*.py"))
        for p in cands:
            rel = p.relative_to(root).as_posix()
            if not is_test_path(rel) and p.name not in ("setup.py", "conftest.py"):
                out.add(rel)
    return tuple(sorted(out))


def is_metadata(rel: str) -> bool:
    """A file of the tree's ``.dist-info`` (:func:`_write_metadata`): protected, but not a test."""
    return rel.split("/")[0].endswith(".dist-info")


def protected_paths(root: Path) -> tuple[str, ...]:
    """Every test file and test-configuration file in the tree (to protect and re-materialise at grading)."""
    out: set[str] = set()
    for p in root.rglob("*"):
        if not p.is_file():
            continue
        rel = p.relative_to(root).as_posix()
        if (
            (p.suffix == ".py" and is_test_path(rel))
            or (rel in TEST_CONFIG_FILES)
            or p.name == "conftest.py"
            or is_metadata(rel)
            or is_test_path(rel)
        ):
            out.add(rel)
    return tuple(sorted(out))


def pytest_config(root: Path) -> str:
    """Which file configures pytest, in pytest's own precedence order (pytest.ini, pyproject.toml, tox.ini,
    setup.cfg); "none" when the project relies on defaults."""
    for name in ("pytest.ini", ".pytest.ini"):
        if (root / name).is_file():
            return name
    if (root / "pyproject.toml").is_file():
        try:
            tool = tomllib.loads((root / "pyproject.toml").read_text()).get("tool", {})
        except tomllib.TOMLDecodeError as e:
            raise SourceError(f"{root / 'pyproject.toml'}: invalid TOML: {e}") from e
        if "ini_options" in tool.get("pytest", {}):
            return "pyproject.toml [tool.pytest.ini_options]"
    for name, section in (("tox.ini", "pytest"), ("setup.cfg", "tool:pytest")):
        if (root / name).is_file():
            cfg = ConfigParser(interpolation=None)
            try:
                cfg.read(root / name)
            except Exception:  # a malformed ini is pytest's problem to report; skip it here
                continue
            if cfg.has_section(section):
                return f"{name} [{section}]"
    return "none"


def load_project(spec: str, workspace: Path, *, cache: Path | None = None) -> Project:
    """Materialise ``spec`` as a stripped tree under ``workspace``: ``pypi:NAME==VERSION`` (a pinned sdist),
    ``git:PATH@REV`` / ``git+URL@REV`` (a commit of a repository) or a local directory."""
    root = workspace / "base"
    if spec.startswith("pypi:"):
        name, version = _parse_pypi_spec(spec)
        archive = download_sdist(name, version, cache)
        sha = hashlib.sha256(archive.read_bytes()).hexdigest()
        unpacked = _unpack(archive, workspace / "unpack")
        shutil.move(str(unpacked), root)
    elif is_git_spec(spec):
        url, rev = parse_git_spec(spec)
        commit = git_checkout(url, rev, root)
        name, version, sha = project_name(root, url), f"git-{commit[:12]}", ""
    else:
        src = Path(spec).expanduser()
        if not src.is_dir():
            raise SourceError(
                f"source {spec!r}: not a directory, 'pypi:NAME==VERSION', 'git:PATH@REV' or 'git+URL@REV'"
            )
        shutil.copytree(src, root, symlinks=True, ignore=shutil.ignore_patterns(*STRIP_DIRS))
        name, version, sha = src.resolve().name, "local", ""
    requirements = _requirements(root)
    strip_tree(root)
    if version != "local":
        _write_metadata(root, name, version)
    if not sha:
        sha = tree_sha256(root)
    package_dirs, pythonpath, top = _layout(root)
    from crf_prime.featdel.testreqs import suite_requirements  # start-up: +12 ms on every command

    return Project(
        root=root,
        info=SourceInfo(spec=spec, name=name, version=version, sha256=sha),
        package_dirs=package_dirs,
        pythonpath=pythonpath,
        top_level=top,
        runtime_requirements=requirements,
        test_requirements=suite_requirements(root, name),
        license=license_of(root),
    )


def is_git_spec(spec: str) -> bool:
    """``git:PATH@REV`` or ``git+URL@REV``."""
    return spec.startswith(("git:", "git+"))


def parse_git_spec(spec: str) -> tuple[str, str]:
    """(repository path or URL, revision) of ``git:PATH@REV`` / ``git+URL@REV``; the revision is required (a
    branch moves, so the line says which commit it means: a tag, a branch or a commit hash)."""
    body = spec[4:] if spec.startswith(("git:", "git+")) else spec
    url, at, rev = body.rpartition("@")
    if not at or not url or not rev:
        raise SourceError(f"source {spec!r}: expected 'git:PATH@REV' or 'git+URL@REV' (a revision is required)")
    if spec.startswith("git:"):
        path = Path(url).expanduser()
        if not path.is_dir():
            raise SourceError(f"source {spec!r}: {path} is not a directory")
        url = str(path.resolve())
    return url, rev


def git_checkout(url: str, rev: str, dest: Path) -> str:
    """The tree of ``rev`` of the repository at ``url`` written to ``dest`` (without ``.git``); its commit hash."""
    with tempfile.TemporaryDirectory(prefix="crf-featdel-git-") as tmp:
        clone = Path(tmp) / "clone"
        env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1"}

        def git(*args: str, cwd: Path | None = None) -> str:
            proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                raise SourceError(f"git {' '.join(args)} failed (exit {proc.returncode}): {proc.stderr.strip()[-600:]}")
            return proc.stdout.strip()

        git("clone", "--quiet", "--no-checkout", "--", url, str(clone))
        commit = git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=clone)
        git("-c", "advice.detachedHead=false", "checkout", "--quiet", commit, cwd=clone)
        shutil.copytree(clone, dest, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    return commit


def project_name(root: Path, fallback: str) -> str:
    """The distribution name the tree declares (pyproject ``[project].name``, setup.cfg ``[metadata] name``),
    else the last part of ``fallback`` (a path or URL) without ``.git``."""
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            name = tomllib.loads(pyproject.read_text(errors="replace")).get("project", {}).get("name")
        except tomllib.TOMLDecodeError:
            name = None
        if isinstance(name, str) and name:
            return name
    cfg = ConfigParser(interpolation=None)
    try:
        cfg.read(root / "setup.cfg")
        name = cfg.get("metadata", "name", fallback="").strip()
    except Exception:  # a malformed setup.cfg names nothing
        name = ""
    m = re.search(r"\bname\s*=\s*['\"]([A-Za-z0-9][A-Za-z0-9._-]*)['\"]", _text(root / "setup.py"))
    return name or (m.group(1) if m else "") or re.sub(r"\.git$", "", fallback.rstrip("/").rsplit("/", 1)[-1])


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def license_of(root: Path) -> str:
    """The licence the project declares (PKG-INFO, then pyproject.toml, then setup.cfg); "" when it declares none."""
    pkg_info = root / "PKG-INFO"
    if pkg_info.is_file():
        fields: dict[str, str] = {}
        classifiers = []
        for line in pkg_info.read_text(errors="replace").splitlines():
            key, _, value = line.partition(": ")
            if key == "Classifier" and value.startswith("License ::"):
                classifiers.append(value.rsplit("::", 1)[-1].strip())
            elif key in ("License-Expression", "License") and key not in fields:
                fields[key] = value.strip()
        # an expression, then the trove classifiers, then a short License field (it often holds the licence text)
        if fields.get("License-Expression"):
            return fields["License-Expression"]
        if classifiers:
            return ", ".join(classifiers)
        value = fields.get("License", "")
        if value and value.upper() != "UNKNOWN" and len(value) <= 80 and not value.lower().startswith("copyright"):
            return value
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            lic = tomllib.loads(pyproject.read_text(errors="replace")).get("project", {}).get("license", "")
        except tomllib.TOMLDecodeError:
            lic = ""
        if isinstance(lic, dict):
            lic = lic.get("text", "") if len(lic.get("text", "")) <= 80 else ""
        if lic:
            return str(lic)
    cfg = ConfigParser(interpolation=None)
    try:
        cfg.read(root / "setup.cfg")
    except Exception:  # a malformed setup.cfg declares nothing we can read
        return ""
    return cfg.get("metadata", "license", fallback="").strip()


def _write_metadata(root: Path, name: str, version: str) -> None:
    """A minimal ``.dist-info`` (name + version, no RECORD / file list) so ``importlib.metadata.version(name)`` works
    from the tree as it would from an install; the stripped ``*.egg-info`` used to provide this."""
    info = root / f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def make_archive(root: Path, dest: Path) -> str:
    """Write ``root`` as a deterministic .tar.gz (sorted, mtime 0, uid 0); return its SHA-256."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            rel = path.relative_to(root).as_posix()
            data = path.read_bytes()
            ti = tarfile.TarInfo(rel)
            ti.size, ti.mtime, ti.mode = len(data), 0, 0o644
            t.addfile(ti, io.BytesIO(data))

    gz = gzip.compress(buf.getvalue(), mtime=0)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(gz)
    return hashlib.sha256(gz).hexdigest()


def extract_archive(archive: Path, into: Path, expected_sha256: str | None = None) -> None:
    """Unpack a base archive written by :func:`make_archive`, checking its hash."""
    data = archive.read_bytes()
    if expected_sha256 is not None and hashlib.sha256(data).hexdigest() != expected_sha256:
        raise SourceError(f"{archive}: SHA-256 mismatch (the task directory was modified)")
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as t:
        t.extractall(into, filter="data")
