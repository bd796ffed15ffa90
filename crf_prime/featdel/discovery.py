"""Where a project's tests are when pytest's defaults find none: read from the project's own test commands.

pytest already reads its own configuration from the tree (``testpaths``, ``python_files``, ``addopts``); what it
misses are suites run another way: ``python -m unittest discover -s tests -p '*_tests.py'`` in tox.ini, a noxfile
or a Makefile, a root ``tests.py``, unittest modules that do not match ``test_*.py``. Each is turned into pytest
``-o testpaths=...`` / ``-o python_files=...`` overrides (never positional paths: grading passes node ids, and a
path argument would run the whole suite beside them). pytest collects ``unittest.TestCase`` classes itself.
"""

from __future__ import annotations

import ast
import re
import shlex
from configparser import ConfigParser
from configparser import Error as ConfigError
from dataclasses import dataclass
from pathlib import Path

# pytest's defaults plus the names unittest's ``discover`` and older projects use
BROAD_PATTERNS = ("test_*.py", "*_test.py", "test*.py", "*_tests.py")


@dataclass(frozen=True)
class Discovery:
    """pytest arguments that find the suite, and where they came from (said in the corpus summary)."""

    args: tuple[str, ...]
    how: str


def _tokens(line: str) -> list[str]:
    try:
        return shlex.split(line, comments=True)
    except ValueError:
        return line.split()


def test_commands(root: Path) -> list[tuple[str, list[str]]]:
    """(file, argv) of every command the project's tox.ini, setup.cfg, noxfile.py and Makefile run."""
    out: list[tuple[str, list[str]]] = []
    for name in ("tox.ini", "setup.cfg"):
        path = root / name
        if not path.is_file():
            continue
        cfg = ConfigParser(interpolation=None)
        try:
            cfg.read(path)
        except ConfigError:
            continue
        for section in cfg.sections():
            if section == "testenv" or section.startswith("testenv:") or section == "aliases":
                for key in ("commands", "test"):
                    for line in cfg.get(section, key, fallback="").splitlines():
                        out.append((name, _tokens(line)))
    make = root / "Makefile"
    if make.is_file():
        for line in make.read_text(errors="replace").splitlines():
            if line.startswith("\t"):
                out.append(("Makefile", _tokens(line.lstrip("\t@-"))))
    nox = root / "noxfile.py"
    if nox.is_file():
        try:
            tree = ast.parse(nox.read_text(errors="replace"))
        except SyntaxError:
            tree = ast.Module(body=[], type_ignores=[])
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run":
                argv = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                out.append(("noxfile.py", argv))
    return [(f, argv) for f, argv in out if argv]


def _module_path(root: Path, dotted: str) -> str | None:
    rel = dotted.replace(".", "/")
    for cand in (f"{rel}.py", rel):
        if re.fullmatch(r"[\w./]+", cand) and (root / cand).exists():
            return cand
    return None


def _from_unittest(root: Path, args: list[str]) -> tuple[list[str], list[str]]:
    """(paths, patterns) of ``python -m unittest ...`` arguments."""
    if args and args[0] == "discover":
        start, pattern, positional = ".", "test*.py", []
        it = iter(args[1:])
        for a in it:
            if a in ("-s", "--start-directory"):
                start = next(it, start)
            elif a in ("-p", "--pattern"):
                pattern = next(it, pattern)
            elif a in ("-t", "--top-level-directory"):
                next(it, None)
            elif not a.startswith("-"):
                positional.append(a)
        start, pattern = [*positional, start][0], [*positional[1:], pattern][0]
        return ([start] if (root / start).is_dir() else []), [pattern]
    paths = [p for a in args if not a.startswith("-") and (p := _module_path(root, a.removesuffix(".py")))]
    return paths, []


def _from_command(root: Path, argv: list[str]) -> tuple[list[str], list[str]]:
    """(paths, patterns) one command runs tests from: pytest paths, unittest modules or discover arguments, or a
    test script run by ``python``."""
    names = [Path(a).name for a in argv]
    if "unittest" in names:
        return _from_unittest(root, argv[names.index("unittest") + 1 :])
    for runner in ("pytest", "py.test"):
        if runner in names:
            rest = argv[names.index(runner) + 1 :]
            paths = [
                a.split("::")[0] for a in rest if not a.startswith(("-", "{")) and (root / a.split("::")[0]).exists()
            ]
            return [p for p in paths if p not in (".", "./")], []
    if names and names[0].startswith("python") and len(argv) > 1 and argv[1].endswith(".py"):
        script = argv[1]
        if (root / script).is_file() and Path(script).name.startswith("test"):
            return [script], []
    return [], []


def from_config(root: Path) -> Discovery | None:
    """The suite as the project's own test commands run it (None when they name nothing pytest would miss)."""
    paths: list[str] = []
    patterns: list[str] = []
    sources: list[str] = []
    for source, argv in test_commands(root):
        p, pats = _from_command(root, argv)
        if p or pats:
            sources.append(source)
        paths += [x for x in p if x not in paths]
        patterns += [x for x in pats if x not in patterns]
    if not paths and not patterns:
        return None
    args: list[str] = []
    if paths:
        args += ["-o", "testpaths=" + " ".join(paths)]
    args += ["-o", "python_files=" + " ".join(dict.fromkeys([*patterns, *BROAD_PATTERNS]))]
    return Discovery(tuple(args), f"{', '.join(dict.fromkeys(sources))}: {' '.join(paths + patterns)}")


def broad(root: Path) -> Discovery:
    """Last resort: unittest's ``test*.py`` and ``*_tests.py`` beside pytest's patterns, from the root down."""
    tests = sorted(p.name for p in root.glob("test*.py"))
    how = "broad patterns " + " ".join(BROAD_PATTERNS) + (f" (root {', '.join(tests)})" if tests else "")
    return Discovery(("-o", "testpaths=", "-o", "python_files=" + " ".join(BROAD_PATTERNS)), how)


def attempts(root: Path) -> list[Discovery]:
    """Discovery to try in order when pytest's defaults collect nothing."""
    found = from_config(root)
    return [*([found] if found else []), broad(root)]


__all__ = ["BROAD_PATTERNS", "Discovery", "attempts", "broad", "from_config", "test_commands"]
