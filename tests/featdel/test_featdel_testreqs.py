"""Test requirements read from an sdist: extras, requirement files, tox deps, pytest plugins; never the project."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from crf_prime.featdel.source import license_of
from crf_prime.featdel.testreqs import neutral_args, plugin_requirements, suite_requirements


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


def test_every_declared_source_is_read(tmp_path: Path) -> None:
    root = _tree(
        tmp_path / "demo-1.0",
        {
            "PKG-INFO": """\
                Metadata-Version: 2.1
                Name: demo
                Version: 1.0
                License-Expression: MIT
                Requires-Dist: attrs>=20
                Requires-Dist: hypothesis>=6; extra == "test"
                Requires-Dist: demo[extra]; extra == "tests"
                Requires-Dist: sphinx; extra == "docs"
                Requires-Dist: black; extra == "dev"
                Requires-Dist: colorama; sys_platform == "win32" and extra == "testing"
                """,
            "requirements-test.txt": "-r requirements/base.txt\nfreezegun==1.5.1  # clocks\n-e .\n",
            "requirements/base.txt": "pytest-mock\n",
            "tox.ini": """\
                [testenv]
                deps =
                    {py}: tzdata
                    django42: Django<4.3
                    py27: mock
                    {[base]deps}
                    .[test]
                    pretend
                [pytest]
                addopts = --cov=demo -n 2 --strict-markers
                asyncio_mode = auto
                required_plugins = pytest-timeout>=2
                """.replace("{py}", f"py{sys.version_info.major}{sys.version_info.minor}"),
        },
    )
    assert suite_requirements(root, "demo") == (
        "freezegun==1.5.1",
        "hypothesis>=6",
        "pretend",
        "pytest-asyncio",
        "pytest-mock",
        "pytest-timeout>=2",
        "tzdata",
    )  # not pytest-cov / pytest-xdist for --cov / -n: they would break the per-test coverage map
    assert license_of(root) == "MIT"


def test_dev_extra_only_when_nothing_else_and_pyproject_sources(tmp_path: Path) -> None:
    root = _tree(
        tmp_path / "p",
        {
            "pyproject.toml": """\
                [project]
                name = "p"
                license = {text = "BSD-3-Clause"}
                [project.optional-dependencies]
                dev = ["pytest-benchmark", "p[dev]"]
                [tool.pytest.ini_options]
                addopts = ["--benchmark-disable"]
                """,
        },
    )
    assert suite_requirements(root, "p") == ("pytest-benchmark",)
    assert plugin_requirements(root) == ["pytest-benchmark"]
    assert license_of(root) == "BSD-3-Clause"
    assert suite_requirements(_tree(tmp_path / "empty", {"setup.py": ""}), "empty") == ()


def test_plugins_that_break_the_coverage_map_are_switched_off() -> None:
    assert neutral_args(("pytest-cov>=4", "attrs")) == ("--no-cov",)
    assert neutral_args(("pytest_xdist==3.6.1", "pytest-cov")) == ("--no-cov", "-p", "no:xdist")
    assert neutral_args(("pytest", "coverage==7.6")) == ()
    assert neutral_args(("pytest-benchmark==5.1.0", "pytest")) == ("--benchmark-disable",)
