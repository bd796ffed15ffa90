"""Reach refusals that say what a person would fix, and the corpus queue's order (local projects, no download)."""

from __future__ import annotations

import os
from pathlib import Path

import featdel_support  # noqa: F401  (one temporary cache per session)
import pytest
from corpus_support import project, write
from test_featdel_reach_env import wheel

from crf_prime.featdel import suite_setup
from crf_prime.featdel.corpus import smallest_first
from crf_prime.featdel.generate import GenerateConfig
from crf_prime.featdel.models import SourceLine
from crf_prime.featdel.source import SourceError
from crf_prime.featdel.suite_setup import prepare_suite


def test_tests_importing_names_from_an_unshipped_package_init_are_refused_with_that_reason(tmp_path: Path) -> None:
    """jmespath 1.1.0's sdist: ``from tests import OrderedDict`` where the sdist has no tests/__init__.py."""
    src = project(tmp_path / "hollowlib", "hollowlib")
    helper = "from tests import OrderedDict\n\n\ndef test_x():\n    assert OrderedDict\n"
    write(src, {"tests/test_a.py": helper, "tests/test_b.py": helper})
    with pytest.raises(SourceError) as err:
        prepare_suite(GenerateConfig(source=str(src), unsandboxed=True))
    assert "2 test modules cannot be collected and only 1 can" in str(err.value)
    assert "tests/test_a.py: imports 'OrderedDict' from 'tests', which the source ships without tests/__init__.py" in (
        str(err.value)
    )


def test_the_queue_starts_with_the_smallest_sdists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRF_PRIME_CACHE", str(tmp_path))
    for name, size in (("big", 300), ("small", 10), ("mid", 100)):
        dest = tmp_path / "featdel" / "sdists" / f"{name}-1.0"
        dest.mkdir(parents=True)
        (dest / f"{name}-1.0.tar.gz").write_bytes(b"x" * size)  # in the cache: nothing is downloaded
    local = SourceLine(spec=str(tmp_path), slug="local", line=4)
    lines = [SourceLine(spec=f"pypi:{n}==1.0", slug=n, line=i) for i, n in enumerate(("big", "small", "mid"), 1)]
    assert [s.slug for s in smallest_first([*lines, local])] == ["local", "small", "mid", "big"]


@pytest.mark.slow
def test_a_module_tests_import_only_when_they_run_is_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """httpcore's http2 tests import ``h2`` inside the test: collection passes, the run fails on the import."""
    wheel(tmp_path / "wheels", "crflazy-dep", "999.0")  # a version no index serves: the resolver takes this one
    monkeypatch.setenv("PIP_FIND_LINKS", f"{tmp_path / 'wheels'} {os.environ.get('PIP_FIND_LINKS', '')}".strip())
    lazy = "".join(
        f"def test_lazy{i}():\n    import crflazy_dep\n    assert crflazy_dep.VALUE == 1\n\n\n" for i in range(2)
    )
    src = project(tmp_path / "lazylib", "lazylib")
    write(src, {"tests/test_lazy.py": lazy})
    got = prepare_suite(GenerateConfig(source=str(src), unsandboxed=True))
    assert got.installed == {"crflazy_dep": "crflazy-dep==999.0"}
    assert got.deselected == {}
    assert got.collected == 7


@pytest.mark.slow
def test_every_module_one_run_lacks_is_installed_before_the_suite_runs_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """soupsieve's tests import html5lib and lxml as they run: both are installed after the first full run, and
    the suite runs once more (it ran once per module, 55 s each)."""
    for name in ("crflazy-one", "crflazy-two"):
        wheel(tmp_path / "wheels", name, "999.0")
    monkeypatch.setenv("PIP_FIND_LINKS", f"{tmp_path / 'wheels'} {os.environ.get('PIP_FIND_LINKS', '')}".strip())
    lazy = "".join(
        f"def test_{m}():\n    import crflazy_{m}\n    assert crflazy_{m}.VALUE == 1\n\n\n" for m in ("one", "two")
    )
    src = project(tmp_path / "twolib", "twolib")
    write(src, {"tests/test_lazy.py": lazy})
    full_runs: list[bool] = []
    real = suite_setup.run_pytest

    def run_pytest(*args, **kwargs):
        if not kwargs["collect_only"]:
            full_runs.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(suite_setup, "run_pytest", run_pytest)
    got = prepare_suite(GenerateConfig(source=str(src), unsandboxed=True))
    assert got.installed == {"crflazy_one": "crflazy-one==999.0", "crflazy_two": "crflazy-two==999.0"}
    assert (got.deselected, got.collected, got.rounds, len(full_runs)) == ({}, 7, 2, 2)


def test_a_verbose_addopts_does_not_hide_the_collected_tests(tmp_path: Path) -> None:
    """tqdm's ``addopts = "-v ..."`` made collection print a tree: 186 tests were read as none collected."""
    src = project(tmp_path / "verboselib", "verboselib")
    write(src, {"pytest.ini": "[pytest]\naddopts = -vv\n"})
    got = prepare_suite(GenerateConfig(source=str(src), unsandboxed=True))
    assert (got.discovery, got.collected, got.ignored, got.pytest_args) == ("pytest defaults", 5, {}, ())


def test_a_namespace_package_is_refused_naming_it(tmp_path: Path) -> None:
    src = write(tmp_path / "nslib", {"pyproject.toml": '[project]\nname = "nslib"\nversion = "1"\n'})
    write(
        src,
        {"google/api/annotations.py": "X = 1\n", "docs/conf.py": "", "tests/test_x.py": "def test_x():\n    pass\n"},
    )
    with pytest.raises(SourceError, match=r"namespace packages \(google/ without __init__.py\) are not supported$"):
        prepare_suite(GenerateConfig(source=str(src), unsandboxed=True))
