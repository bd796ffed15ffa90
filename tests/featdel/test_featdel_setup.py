"""The setup loop (crf_prime/featdel/suite_setup.py), test discovery (discovery.py) and git sources, on projects
built on disk: a local wheel directory stands in for the index, local repositories for remote ones."""

from __future__ import annotations

import subprocess
import textwrap
import zipfile
from pathlib import Path

import featdel_support  # noqa: F401  (one temporary cache per session)
import pytest
from corpus_support import project, write

from crf_prime.errors import InputError
from crf_prime.featdel import discovery
from crf_prime.featdel.corpus import read_sources
from crf_prime.featdel.generate import GenerateConfig
from crf_prime.featdel.source import SourceError, is_test_path, load_project, parse_git_spec
from crf_prime.featdel.suite_setup import NOT_A_TEST_MODULE, SuiteSetup, candidates, prepare_suite, without_path

LIB = "def add(a, b):\n    total = a + b\n    return total\n\n\ndef neg(a):\n    out = -a\n    return out\n"


def wheel(where: Path, dist: str, module: str, version: str, body: str) -> None:
    """A pure-Python wheel ``dist==version`` providing ``module`` (what an index would serve)."""
    name = f"{dist.replace('-', '_')}-{version}"
    files = {
        f"{module}/__init__.py": body,
        f"{name}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n",
        f"{name}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{k},,\n" for k in [*files, f"{name}.dist-info/RECORD"])
    where.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(where / f"{name}-py3-none-any.whl", "w") as z:
        for k, v in {**files, f"{name}.dist-info/RECORD": record}.items():
            z.writestr(k, v)


def setup_of(src: Path) -> SuiteSetup:
    return prepare_suite(GenerateConfig(source=str(src), unsandboxed=True))


# --- pure parts ---------------------------------------------------------------------------------------------------


def test_candidates_prefer_the_projects_own_requirement_then_the_table_then_the_name() -> None:
    assert candidates("yaml", ("PyYAML>=6", "pytest")) == ["PyYAML>=6", "PyYAML", "yaml"]
    assert candidates("dateutil", ()) == ["python-dateutil", "dateutil"]
    assert candidates("nose2", ("hypothesis",)) == ["nose2"]
    assert candidates("pytest_mock", ()) == ["pytest_mock", "pytest-mock"]
    assert candidates("railroad", ("jinja2", "railroad-diagrams")) == ["railroad-diagrams", "railroad"]


def test_a_left_out_module_leaves_the_testpaths_override_too() -> None:
    args = ["-o", "testpaths=tests.py pkg/checks.py", "-o", "python_files=test*.py"]
    assert without_path(args, "pkg/checks.py") == [
        "-o",
        "testpaths=tests.py",
        "-o",
        "python_files=test*.py",
        "--ignore=pkg/checks.py",
    ]


def test_root_tests_module_and_package_tests_module_are_test_paths() -> None:
    assert is_test_path("tests.py") and is_test_path("pkg/tests.py") and is_test_path("pkg/util_tests.py")
    assert not is_test_path("pkg/testing_utils.py") and not is_test_path("pkg/contest.py")


def test_discovery_reads_unittest_discover_from_tox(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "tox.ini": "[testenv]\ncommands =\n    python -m unittest discover -s suite -p '*_check.py'\n",
            "suite/a_check.py": "",
        },
    )
    found = discovery.from_config(tmp_path)
    assert found is not None
    assert found.args == (
        "-o",
        "testpaths=suite",
        "-o",
        "python_files=*_check.py " + " ".join(discovery.BROAD_PATTERNS),
    )
    assert found.how == "tox.ini: suite *_check.py"


def test_discovery_reads_makefile_pytest_paths_and_nox_scripts(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "Makefile": "test:\n\t@pytest -x checks/unit {posargs}\n",
            "noxfile.py": "def tests(session):\n    session.run('python', 'test_all.py')\n",
            "checks/unit/x.py": "",
            "test_all.py": "",
        },
    )
    found = discovery.from_config(tmp_path)
    assert found is not None and found.args[:2] == ("-o", "testpaths=checks/unit test_all.py")
    assert found.how == "Makefile, noxfile.py: checks/unit test_all.py"
    assert discovery.from_config(write(tmp_path / "plain", {"tox.ini": "[testenv]\ncommands = pytest\n"})) is None


def test_a_single_module_src_layout_is_found(tmp_path: Path) -> None:
    src = write(tmp_path / "onemod", {"pyproject.toml": '[project]\nname = "onemod"\n', "src/onemod.py": LIB})
    loaded = load_project(str(src), tmp_path / "ws")
    assert (loaded.package_dirs, loaded.pythonpath, loaded.top_level) == (("src",), ("src",), ("onemod",))


def test_git_spec_needs_a_revision(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="a revision is required"):
        parse_git_spec(f"git:{tmp_path}")
    with pytest.raises(SourceError, match="not a directory"):
        parse_git_spec(f"git:{tmp_path / 'absent'}@main")
    assert parse_git_spec("git+https://example.invalid/x/y.git@v1.2") == ("https://example.invalid/x/y.git", "v1.2")


# --- git sources --------------------------------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True, env=env)
    return proc.stdout.strip()


def test_git_source_takes_the_named_revision(tmp_path: Path) -> None:
    repo = project(tmp_path / "checkout", "gitlib")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "one")
    first = _git(repo, "rev-parse", "HEAD")
    _git(repo, "tag", "v1")
    (repo / "gitlib" / "__init__.py").write_text(LIB)
    _git(repo, "commit", "-q", "-am", "two")

    old = load_project(f"git:{repo}@v1", tmp_path / "ws1")
    assert old.info.name == "gitlib" and old.info.version == f"git-{first[:12]}"
    assert "slugify" in (old.root / "gitlib" / "__init__.py").read_text()
    assert not (old.root / ".git").exists()
    new = load_project(f"git+file://{repo}@main", tmp_path / "ws2")
    assert "def neg" in (new.root / "gitlib" / "__init__.py").read_text()
    with pytest.raises(SourceError, match="rev-parse"):
        load_project(f"git:{repo}@no-such-rev", tmp_path / "ws3")

    sources = write(tmp_path, {"sources.txt": "git:checkout@v1\ngit+https://example.invalid/a/other.git@abc\n"})
    lines = read_sources(sources / "sources.txt")
    assert lines[0].spec == f"git:{repo}@v1" and lines[0].slug.startswith("checkout-")
    assert lines[1].spec == "git+https://example.invalid/a/other.git@abc" and lines[1].slug.startswith("other-")
    bad = write(tmp_path, {"bad.txt": "git:checkout\n"})
    with pytest.raises(InputError, match=r"bad.txt:1: .*a revision is required"):
        read_sources(bad / "bad.txt")


# --- the loop, on real suites (unsandboxed: the loop's logic, not the box, is under test) --------------------------


def test_pytest_own_dependency_is_refused_with_that_reason(tmp_path: Path) -> None:
    src = write(
        tmp_path / "iniconfig",
        {"pyproject.toml": '[project]\nname = "iniconfig"\nversion = "9"\n', "iniconfig/__init__.py": LIB},
    )
    with pytest.raises(SourceError, match="pytest itself imports iniconfig"):
        setup_of(src)


def test_a_suite_that_passes_as_shipped_needs_no_action(tmp_path: Path) -> None:
    src = project(tmp_path / "plainlib", "plainlib")
    got = setup_of(src)
    assert got == SuiteSetup(collected=5, rounds=1)
    assert got.actions() == []


@pytest.mark.slow
def test_loop_installs_discovers_ignores_and_deselects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheels = tmp_path / "wheels"
    wheel(wheels, "crfdemo-helper", "crfdemo_helper", "1.0", "THREE = 3\n")
    wheel(wheels, "crfdemo-helper", "crfdemo_helper", "2.0", "THREE = 'three'\n")
    monkeypatch.setenv("PIP_FIND_LINKS", f"{wheels} {__import__('os').environ.get('PIP_FIND_LINKS', '')}".strip())
    counter = tmp_path / "runs"
    src = write(
        tmp_path / "mylib",
        {
            "pyproject.toml": '[project]\nname = "mylib"\nversion = "0.1"\n',
            "mylib/__init__.py": LIB,
            # the project's nox session names the helper and a range that excludes 2.0
            "noxfile.py": "def tests(session):\n    session.install('crfdemo-helper<2')\n"
            "    session.run('python', '-m', 'unittest', 'tests', 'mylib.tests', 'mylib.checks')\n",
            "tests.py": textwrap.dedent(
                f"""\
                import unittest, pathlib
                import crfdemo_helper
                from mylib import add, neg

                class T(unittest.TestCase):
                    def test_add(self):
                        self.assertEqual(add(1, 2), crfdemo_helper.THREE)
                    def test_neg(self):
                        self.assertEqual(neg(2), -2)
                    def test_wrong_as_shipped(self):
                        self.assertEqual(add(1, 1), 3)
                    def test_flaky(self):
                        path = pathlib.Path({str(counter)!r})
                        n = int(path.read_text()) if path.exists() else 0
                        path.write_text(str(n + 1))
                        self.assertEqual(n % 2, 1)
                """
            ),
            "mylib/tests.py": "import unittest\nfrom mylib import neg\n\n\nclass C(unittest.TestCase):\n"
            "    def test_neg(self):\n        self.assertEqual(neg(0), 0)\n",
            "mylib/checks.py": "def test_here():\n    pass\n",
            "test_broken.py": "import crfdemo_absent_module\n\n\ndef test_x():\n    pass\n",
        },
    )
    got = setup_of(src)
    assert got.installed == {"crfdemo_helper": "crfdemo-helper==1.0"}
    assert got.extra_requirements == ("crfdemo-helper==1.0",)
    assert got.discovery == "noxfile.py: tests.py mylib/tests.py mylib/checks.py"
    assert list(got.ignored) == ["test_broken.py", "mylib/checks.py"]
    assert got.ignored["mylib/checks.py"].startswith("tests in a module not named as a test module")
    assert got.ignored["test_broken.py"].startswith("imports 'crfdemo_absent_module': no distribution provides it")
    assert got.deselected == {
        "tests.py::T::test_flaky": "flaky (failed in one of two runs)",
        "tests.py::T::test_wrong_as_shipped": "fails as shipped (failed: AssertionError: # != #)",
    }
    assert got.collected == 5
    assert "--ignore=test_broken.py" in got.pytest_args
    assert got.actions()[:2] == [
        "installed crfdemo-helper==1.0 (for `import crfdemo_helper`)",
        "discovery: noxfile.py: tests.py mylib/tests.py mylib/checks.py",
    ]


def test_too_few_tests_left_is_refused(tmp_path: Path) -> None:
    tests = "from badlib import add\n\n\ndef test_a():\n    assert add(1, 1) == 2\n\n\n" + "".join(
        f"def test_bad{i}():\n    assert add(1, {i}) == 0\n\n\n" for i in range(3)
    )
    src = write(
        tmp_path / "badlib",
        {"pyproject.toml": '[project]\nname = "badlib"\nversion = "1"\n', "badlib/__init__.py": LIB},
    )
    write(src, {"tests/test_badlib.py": tests})
    with pytest.raises(SourceError, match=r"3 of 4 tests fail as shipped \(fewer than 50% would be left\)"):
        setup_of(src)


def test_doctests_outside_the_test_modules_are_left_out_without_refusing(tmp_path: Path) -> None:
    """ordered-set's own pytest.ini asks for doctests in README.md and in the package: those modules are left out
    (the grader would take them for deletable source) but do not count as modules that cannot be collected."""
    src = project(tmp_path / "doclib", "doclib")
    write(
        src,
        {
            "pytest.ini": "[pytest]\naddopts = --doctest-modules --doctest-glob=README.md\n",
            "README.md": "Use it:\n\n    >>> from doclib import slugify\n    >>> slugify('A b')\n    'a-b'\n",
            "doclib/extra.py": 'def twice(x):\n    """\n    >>> twice(2)\n    4\n    """\n    return 2 * x\n',
        },
    )
    got = setup_of(src)
    assert got.ignored == {"README.md": NOT_A_TEST_MODULE, "doclib/extra.py": NOT_A_TEST_MODULE}
    assert got.collected == 5 and got.deselected == {}
    assert {"--ignore=README.md", "--ignore=doclib/extra.py"} <= set(got.pytest_args)
