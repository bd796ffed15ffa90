"""The setup loop installs the plugin behind a fixture the tests use (``mocker`` -> pytest-mock) or behind
``async def`` tests, as a person reading pytest's error would; a local wheel directory stands in for the index."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import featdel_support  # noqa: F401  (one temporary cache per session)
import pytest
from corpus_support import write

from crf_prime.featdel.generate import GenerateConfig
from crf_prime.featdel.runner import PytestRun
from crf_prime.featdel.suite_setup import (
    EXITS_AT_IMPORT,
    _own_module,
    missing_plugins,
    plugin_candidates,
    prepare_suite,
)

LIB = "def add(a, b):\n    total = a + b\n    return total\n"


def run_with(outcomes: dict[tuple[str, str], tuple[str, str]]) -> PytestRun:
    return PytestRun(
        exit_code=1, outcomes=outcomes, junit_found=True, duration_s=0.0, limit_hit=None, stdout="", stderr=""
    )


def test_missing_fixtures_and_async_support_are_read_from_failures() -> None:
    run = run_with(
        {
            ("t", "a"): (
                "error",
                "failed on setup with \"file t.py, line 1\n  def test_a(mocker):\nE  fixture 'mocker' not found",
            ),
            ("t", "b"): ("failed", "Failed: async def functions are not natively supported.\nYou need to install"),
            ("t", "c"): ("error", "E  fixture 'my_own_fixture' not found"),  # the project's own: no plugin guess
            ("t", "d"): ("passed", "fixture 'httpbin' not found"),  # a passing test says nothing
            ("t", "e"): ("error", "E  fixture 'mocker' not found"),
        }
    )
    assert missing_plugins(run) == ["fixture 'mocker'", "async tests"]
    strict = run_with(
        {
            ("tests.test_a", ""): ("error", "'anyio' not found in `markers` configuration option"),
            ("tests.test_b", ""): (
                "error",
                "'slow_network' not found in `markers` configuration option",
            ),  # the project's
        }
    )
    assert missing_plugins(strict) == ["marker 'anyio'"]
    assert plugin_candidates("marker 'trio'", ("pytest-trio>=0.8",)) == ["pytest-trio>=0.8", "pytest-trio"]


def test_plugin_candidates_prefer_the_projects_own_requirement() -> None:
    assert plugin_candidates("fixture 'mocker'", ("pytest-mock>=3.10", "pytest")) == [
        "pytest-mock>=3.10",
        "pytest-mock",
    ]
    assert plugin_candidates("fixture 'httpbin'", ()) == ["pytest-httpbin"]
    assert plugin_candidates("async tests", ("pytest_trio",)) == [
        "pytest_trio",
        "pytest-asyncio",
        "pytest-trio",
        "anyio",
    ]


def test_a_module_deep_in_a_package_is_not_the_projects_own_import(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/_backends/trio.py": "",  # `import trio` does not find this one: trio is a distribution to install
            "tests/helpers.py": "",  # beside the tests: pytest puts tests/ on sys.path
            "tests/test_x.py": "",
            "src/srconly.py": "",
        },
    )
    assert not _own_module(tmp_path, "trio")
    assert _own_module(tmp_path, "helpers") and _own_module(tmp_path, "pkg") and _own_module(tmp_path, "tests")
    assert not _own_module(tmp_path, "srconly") and _own_module(tmp_path, "srconly", ("src",))


def plugin_wheel(where: Path, dist: str, version: str, module: str, body: str) -> None:
    """A pure-Python wheel registering ``module`` as a pytest plugin (the ``pytest11`` entry point)."""
    name = f"{dist.replace('-', '_')}-{version}"
    files = {
        f"{module}.py": body,
        f"{name}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n",
        f"{name}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{name}.dist-info/entry_points.txt": f"[pytest11]\n{module} = {module}\n",
    }
    files[f"{name}.dist-info/RECORD"] = "".join(f"{k},,\n" for k in [*files, f"{name}.dist-info/RECORD"])
    where.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(where / f"{name}-py3-none-any.whl", "w") as z:
        for k, v in files.items():
            z.writestr(k, v)


@pytest.mark.slow
def test_loop_installs_the_plugin_behind_a_missing_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheels = tmp_path / "wheels"
    # a version no index serves, so the resolver takes this one (the stand-in for pytest-mock)
    plugin_wheel(
        wheels,
        "pytest-mock",
        "999.0",
        "crfdemo_mock",
        "import pytest\n\n\n@pytest.fixture\ndef mocker():\n    return 7\n",
    )
    monkeypatch.setenv("PIP_FIND_LINKS", f"{wheels} {os.environ.get('PIP_FIND_LINKS', '')}".strip())
    tests = "from mocklib import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n\n\n" + "".join(
        f"def test_mocked{i}(mocker):\n    assert add(mocker, {i}) == 7 + {i}\n\n\n" for i in range(3)
    )
    src = write(
        tmp_path / "mocklib",
        {
            "pyproject.toml": '[project]\nname = "mocklib"\nversion = "0.1"\n',
            "mocklib/__init__.py": LIB,
            "tests/test_mocklib.py": tests,
        },
    )
    got = prepare_suite(GenerateConfig(source=str(src), unsandboxed=True))
    assert got.installed == {"fixture 'mocker'": "pytest-mock==999.0"}
    assert got.extra_requirements == ("pytest-mock==999.0",)
    assert got.deselected == {}
    assert got.collected == 4
    assert got.actions() == ["installed pytest-mock==999.0 (for fixture 'mocker')"]


def test_only_the_failing_tests_run_again(tmp_path: Path) -> None:
    counter = tmp_path / "runs"
    tests = (
        "import pathlib\nfrom rerunlib import add\n\n\ndef test_counted():\n"
        f"    path = pathlib.Path({str(counter)!r})\n"
        "    path.write_text(str(int(path.read_text()) + 1 if path.exists() else 1))\n\n\n"
        "def test_ok():\n    assert add(1, 1) == 2\n\n\ndef test_bad():\n    assert add(1, 1) == 3\n"
    )
    src = write(
        tmp_path / "rerunlib",
        {
            "pyproject.toml": '[project]\nname = "rerunlib"\nversion = "0.1"\n',
            "rerunlib/__init__.py": LIB,
            "tests/test_rerunlib.py": tests,
        },
    )
    got = prepare_suite(GenerateConfig(source=str(src), unsandboxed=True))
    assert got.deselected == {"tests/test_rerunlib.py::test_bad": "fails as shipped (failed: assert # == #)"}
    # the passing tests ran once, in the full run (without test_bad, generation's baseline); the run after it was
    # test_bad's alone
    assert counter.read_text() == "1"


@pytest.mark.slow
def test_a_test_requirement_whose_plugin_this_pytest_rejects_is_switched_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """base58 2.1.1 lists pytest-flake8, whose hook takes ``path`` (gone from pytest 8): pytest stops with an internal
    error before collecting anything. A person runs without that plugin (``-p no:NAME``)."""
    wheels = tmp_path / "wheels"
    plugin_wheel(
        wheels,
        "pytest-oldlint",
        "999.0",
        "crfdemo_oldlint",
        "def pytest_collect_file(file_path, path, parent):\n    return None\n",
    )
    monkeypatch.setenv("PIP_FIND_LINKS", f"{wheels} {os.environ.get('PIP_FIND_LINKS', '')}".strip())
    src = write(
        tmp_path / "lintlib",
        {
            "pyproject.toml": '[project]\nname = "lintlib"\nversion = "0.1"\n'
            '[project.optional-dependencies]\ntest = ["pytest-oldlint==999.0"]\n',
            "lintlib/__init__.py": LIB,
            "tests/test_lintlib.py": "from lintlib import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
        },
    )
    got = prepare_suite(GenerateConfig(source=str(src), unsandboxed=True))
    assert got.pytest_args == ("-p", "no:crfdemo_oldlint")
    assert got.collected == 1 and got.deselected == {} and got.installed == {}
    assert got.actions() == ["ran without the plugin crfdemo_oldlint (it does not load in this pytest)"]


def test_a_test_module_that_exits_when_imported_is_ignored(tmp_path: Path) -> None:
    """ply 3.11's ``test/testcpp.py`` calls ``main()`` at module level: ``unittest.main`` parses pytest's own
    arguments, exits, and pytest stops with an internal error before collecting anything. A person leaves that
    module out; the rest of the suite runs."""
    src = write(
        tmp_path / "exitlib",
        {
            "pyproject.toml": '[project]\nname = "exitlib"\nversion = "0.1"\n',
            "exitlib/__init__.py": LIB,
            "tests/test_exitlib.py": "from exitlib import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
            "tests/test_main.py": "import unittest\n\n\nclass T(unittest.TestCase):\n    def test_x(self):\n"
            "        pass\n\n\nunittest.main()\n",
        },
    )
    got = prepare_suite(GenerateConfig(source=str(src), unsandboxed=True))
    assert got.ignored == {"tests/test_main.py": EXITS_AT_IMPORT}
    assert got.collected == 1 and got.deselected == {}
    assert got.actions() == [f"ignored tests/test_main.py: {EXITS_AT_IMPORT}"]
