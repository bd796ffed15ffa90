"""The suite cache (crf_prime/featdel/suite_cache.py): the setup loop's passing run is generation's baseline, a
second setup or generation of the same source reads both back, the tasks are the same, a corrupt entry is rebuilt."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import featdel_support  # noqa: F401  (one temporary cache per session)
import pytest
from corpus_support import LIB, project, write
from test_featdel_reach_env import wheel

from crf_prime.featdel import baseline, suite_cache, suite_setup
from crf_prime.featdel.generate import GenerateConfig, env_spec, generate
from crf_prime.featdel.runner import PytestRun, run_pytest
from crf_prime.featdel.source import load_project
from crf_prime.featdel.suite_setup import prepare_suite
from crf_prime.featdel.testenv import ensure_test_env
from crf_prime.sandbox import Sandbox


@pytest.fixture
def suites(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private, empty suite cache (the session's sdists and venvs are still shared)."""
    where = tmp_path / "suites"
    monkeypatch.setattr(suite_cache, "cache_dir", lambda: where)
    return where


@pytest.fixture
def coverage_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """One entry per sandboxed suite run under coverage, naming the module that started it."""
    seen: list[str] = []
    for module in (baseline, suite_setup):
        real = module.run_pytest

        def spy(*args, _real=real, _name=module.__name__.rsplit(".", 1)[1], **kwargs):
            if kwargs.get("with_coverage"):
                seen.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, "run_pytest", spy)
    return seen


def test_a_cached_baseline_round_trips() -> None:
    coverage = {"a.py": {1: set(), 2: {"t.py::x", "t.py::y[1]"}}, "b/c.py": {7: {"t.py::y[1]"}}}
    collection = {"a.py": {1, 5}, "b/c.py": set()}
    entry = suite_cache.CachedBaseline.of(("-q",), 3, coverage, collection)
    assert entry.tests == ("t.py::x", "t.py::y[1]")
    again = suite_cache.CachedBaseline.model_validate_json(entry.model_dump_json())
    assert again == entry and again.coverage_map() == coverage and again.pytest_args == ("-q",)
    assert again.collection_map() == collection


def test_the_key_changes_with_each_part_and_only_then() -> None:
    parts = {"source": "ab", "spec": ("pytest==8",), "args": ("-q",)}
    same = suite_cache.key("baseline", dict(parts))
    assert same == suite_cache.key("baseline", dict(reversed(parts.items())))
    changed = [suite_cache.key("baseline", parts | {k: "other"}) for k in parts]
    assert len({same, *changed, suite_cache.key("setup", parts)}) == len(parts) + 2


def test_setup_run_is_the_baseline_and_a_second_generation_runs_no_suite(
    tmp_path: Path, suites: Path, coverage_runs: list[str]
) -> None:
    src = project(tmp_path / "cachelib", "cachelib")
    cfg = GenerateConfig(source=str(src), unsandboxed=True, max_tasks=2, workers=1, replay=False, mutants_per_task=0)

    cold = generate(cfg.model_copy(update={"out": tmp_path / "cold"}))[0]  # no setup loop: its own baseline
    assert coverage_runs == ["baseline"]
    shutil.rmtree(suites)
    coverage_runs.clear()

    setup = prepare_suite(cfg)
    assert setup.deselected == {} and coverage_runs == ["suite_setup"]
    cfg = cfg.model_copy(update={"extra_requirements": list(setup.extra_requirements)})
    warm = generate(cfg.model_copy(update={"out": tmp_path / "warm"}))[0]
    assert coverage_runs == ["suite_setup"]  # the setup loop's run was the baseline
    assert (tmp_path / "warm" / "tasks.jsonl").read_bytes() == (tmp_path / "cold" / "tasks.jsonl").read_bytes()
    assert [t.task_id for t in warm] == [t.task_id for t in cold] and len(cold) == 2

    assert prepare_suite(cfg) == setup  # the setup loop's result is cached too: no run at all
    assert coverage_runs == ["suite_setup"]


def test_a_corrupt_entry_is_ignored_with_a_warning_and_rebuilt(
    tmp_path: Path, suites: Path, coverage_runs: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    src = project(tmp_path / "torn", "torn")
    cfg = GenerateConfig(source=str(src), unsandboxed=True)
    proj = load_project(cfg.source, tmp_path / "ws")
    spec = env_spec(proj, cfg)
    env = ensure_test_env(spec, proj.top_level)

    def coverage() -> baseline.Baseline:
        return baseline.run_baseline(proj, env, Sandbox(cfg), cfg, tmp_path / "ws", spec)

    first = coverage()
    (entry,) = suites.iterdir()
    entry.write_text(entry.read_text()[:-40])  # torn
    with caplog.at_level(logging.WARNING, logger="crf_prime.featdel.suite_cache"):
        second = coverage()
    assert f"ignoring the corrupt suite cache entry {entry}" in caplog.text
    assert coverage_runs == ["baseline", "baseline"] and not first.cached and not second.cached
    third = coverage()
    assert third.cached and coverage_runs == ["baseline", "baseline"]
    assert first.coverage == second.coverage == third.coverage and third.suite_tests == 5
    assert first.collection == third.collection and first.collection["torn/__init__.py"]  # the module's import


def test_a_test_that_fails_only_under_coverage_is_deselected_by_the_setup_loop(
    tmp_path: Path, suites: Path, coverage_runs: list[str]
) -> None:
    """The setup loop's full run is a coverage run like the baseline's: a test that passes without a tracer and
    fails under one (mistune's timing tests, ``sys.gettrace``) is deselected there, and generation does not refuse
    the package (it did: "does not pass as shipped")."""
    src = project(tmp_path / "tracelib", "tracelib")
    write(src, {"tests/test_trace.py": "import sys\n\n\ndef test_untraced():\n    assert sys.gettrace() is None\n"})
    cfg = GenerateConfig(source=str(src), unsandboxed=True, max_tasks=1, workers=1, replay=False, mutants_per_task=0)
    setup = prepare_suite(cfg)
    assert list(setup.deselected) == ["tests/test_trace.py::test_untraced"]
    assert setup.deselected["tests/test_trace.py::test_untraced"].startswith("fails as shipped")
    cfg = cfg.model_copy(
        update={"extra_requirements": list(setup.extra_requirements), "deselect": list(setup.deselected)}
    )
    tasks, summary = generate(cfg.model_copy(update={"out": tmp_path / "out"}))
    assert len(tasks) == 1 and summary.suite_tests == 5
    # the full run and the failing test again; the full run without it is the baseline: generation runs none
    assert coverage_runs == ["suite_setup", "suite_setup"]


SPARE = "\n\ndef spare(x):\n    y = x * 2\n    return y + 1\n"


def test_the_setup_run_less_its_deselected_tests_is_the_baseline(
    tmp_path: Path, suites: Path, coverage_runs: list[str]
) -> None:
    """A test that fails as shipped is deselected and the setup's one full run is generation's baseline without it:
    the suite is not run again, the lines only that test executed have no covering test, and it is not counted."""
    src = project(tmp_path / "leftlib", "leftlib", lib=LIB + SPARE)
    test_file = src / "tests/test_leftlib.py"
    test_file.write_text(
        test_file.read_text() + "\n\ndef test_spare_wrong():\n    from leftlib import spare\n\n"
        "    assert spare(1) == 0\n"
    )
    cfg = GenerateConfig(source=str(src), unsandboxed=True, max_tasks=1, workers=1, replay=False, mutants_per_task=0)
    setup = prepare_suite(cfg)
    assert list(setup.deselected) == ["tests/test_leftlib.py::test_spare_wrong"]
    assert setup.deselected["tests/test_leftlib.py::test_spare_wrong"].startswith("fails as shipped")
    assert coverage_runs == ["suite_setup", "suite_setup"]  # the full run, the failing test again

    cfg = cfg.model_copy(update={"deselect": list(setup.deselected)})
    proj = load_project(cfg.source, tmp_path / "ws")
    spec = env_spec(proj, cfg)
    got = baseline.run_baseline(proj, ensure_test_env(spec, proj.top_level), Sandbox(cfg), cfg, tmp_path / "ws", spec)
    assert got.cached and coverage_runs == ["suite_setup", "suite_setup"]
    lines = got.coverage["leftlib/__init__.py"]
    spare_body = [
        n
        for n, text in enumerate((src / "leftlib/__init__.py").read_text().splitlines(), 1)
        if text.strip() in ("y = x * 2", "return y + 1")
    ]
    assert len(spare_body) == 2 and all(lines[n] == set() for n in spare_body)  # ran, by the deselected test only
    assert not any("test_spare_wrong" in t for ids in lines.values() for t in ids)
    assert got.suite_tests == 5  # the shipped suite's 5, without the deselected one


@pytest.mark.slow
def test_after_an_install_only_the_tests_that_did_not_pass_run_again(
    tmp_path: Path, suites: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """soupsieve's tests skip where lxml is missing (``pytest.importorskip``); once the setup has installed it, those
    run again, not the whole suite, and the baseline is both runs together: each test's coverage, every test
    counted."""
    wheel(tmp_path / "wheels", "crflazy-skip", "999.0")  # a version no index serves: the resolver takes this one
    monkeypatch.setenv("PIP_FIND_LINKS", f"{tmp_path / 'wheels'} {os.environ.get('PIP_FIND_LINKS', '')}".strip())
    src = project(tmp_path / "skiplib", "skiplib")
    test_file = src / "tests/test_skiplib.py"
    test_file.write_text(
        test_file.read_text() + "\n\ndef test_needs_dep():\n    import pytest\n\n"
        '    dep = pytest.importorskip("crflazy_skip")\n    from skiplib import tally\n\n'
        "    assert tally([dep.VALUE]) == {1: 1}\n"
    )
    full_runs: list[tuple[str, ...]] = []
    real = suite_setup.run_pytest

    def spy(*args, **kwargs):
        if kwargs.get("with_coverage"):
            full_runs.append(tuple(kwargs["pytest_args"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(suite_setup, "run_pytest", spy)
    cfg = GenerateConfig(source=str(src), unsandboxed=True, max_tasks=1, workers=1, replay=False, mutants_per_task=0)
    setup = prepare_suite(cfg)
    assert setup.installed == {"crflazy_skip": "crflazy-skip==999.0"}
    assert (setup.deselected, setup.collected) == ({}, 6)
    assert len(full_runs) == 2
    assert full_runs[1][-1] == "tests/test_skiplib.py::test_needs_dep"
    assert not any("::test_" in a for a in full_runs[1][:-1])  # that test alone

    cfg = cfg.model_copy(update={"extra_requirements": list(setup.extra_requirements)})
    proj = load_project(cfg.source, tmp_path / "ws")
    spec = env_spec(proj, cfg)
    got = baseline.run_baseline(proj, ensure_test_env(spec, proj.top_level), Sandbox(cfg), cfg, tmp_path / "ws", spec)
    assert got.cached and len(full_runs) == 2
    assert got.suite_tests == 6
    lines = got.coverage["skiplib/__init__.py"]
    tally_body = [
        n
        for n, text in enumerate((src / "skiplib/__init__.py").read_text().splitlines(), 1)
        if text.strip() == "counts = {}"
    ]
    assert len(tally_body) == 1
    assert lines[tally_body[0]] == {"tests/test_skiplib.py::test_tally", "tests/test_skiplib.py::test_needs_dep"}


def _run(outcomes: dict[tuple[str, str], tuple[str, str]]) -> PytestRun:
    return PytestRun(0, outcomes, True, 0.0, None, "", "")


@pytest.mark.parametrize("found", [True, False])
def test_a_rerun_must_run_exactly_the_tests_it_names(tmp_path: Path, found: bool) -> None:
    """After an install the failing and skipped tests run again by node id; a rerun in which pytest did not run each
    of them (an id it could not find) gives way to the whole suite, and nothing of the first run is kept."""
    repo = tmp_path / "setup-1" / "repo"
    write(repo, {"tests/test_a.py": ""})
    ok, skip, bad = (("tests.test_a", n) for n in ("test_ok", "test_skip", "test_bad"))
    first = _run({ok: ("passed", ""), skip: ("skipped", "No module named 'x'"), bad: ("failed", "No module named 'x'")})
    calls: list[tuple[str, ...]] = []
    reruns = [_run({skip: ("passed", ""), bad: ("passed", "")}) if found else _run({skip: ("passed", "")})]
    whole = _run({ok: ("passed", ""), skip: ("passed", ""), bad: ("passed", "")})

    def run_once(env, args: tuple[str, ...], *, collect_only: bool) -> tuple[PytestRun, Path]:
        assert not collect_only
        calls.append(args)
        return (reruns.pop(0) if reruns else whole), repo

    got, where, kept = suite_setup._again(run_once, None, ("-q",), first, repo, False)
    assert calls[0] == ("-q", "tests/test_a.py::test_bad", "tests/test_a.py::test_skip")
    if found:
        assert (len(calls), kept) == (1, [(first, repo.parent)])
        assert set(got.outcomes) == {skip, bad}
    else:
        assert (calls[1:], kept, got) == ([("-q",)], [], whole)
    assert where == repo


def test_a_passing_test_left_out_of_the_baseline_covers_nothing(tmp_path: Path, suites: Path) -> None:
    """``remember(left_out=...)``: a test the setup deselected after a run in which it passed (flaky: it failed in
    the second run only) is taken out of that run as if it had not run."""
    src = project(tmp_path / "passlib", "passlib")
    cfg = GenerateConfig(source=str(src), unsandboxed=True)
    proj = load_project(cfg.source, tmp_path / "ws")
    spec = env_spec(proj, cfg)
    env = ensure_test_env(spec, proj.top_level)
    whole = baseline.run_baseline(proj, env, Sandbox(cfg), cfg, tmp_path / "ws", spec)
    gone = "tests/test_passlib.py::test_clamp_low"
    assert any(gone in ids for ids in whole.coverage["passlib/__init__.py"].values())

    run_dir = tmp_path / "ws" / "baseline-0"  # the run above, still on disk
    run = run_pytest(
        Sandbox(cfg), env, run_dir, pythonpath=proj.pythonpath, pytest_args=(), with_coverage=proj.package_dirs
    )
    assert run.exit_code == 0
    args = ("--deselect", gone)
    assert baseline.remember(proj, spec, args, cfg, run, run_dir, left_out=[gone])
    left = suite_cache.load(baseline.cache_key(proj, spec, args, cfg), suite_cache.CachedBaseline)
    assert left is not None and left.suite_tests == whole.suite_tests - 1
    covering = {t for ids in left.coverage_map()["passlib/__init__.py"].values() for t in ids}
    assert gone not in covering and covering == {
        t for ids in whole.coverage["passlib/__init__.py"].values() for t in ids
    } - {gone}


def test_a_test_that_ran_the_code_but_did_not_pass_is_never_a_target(tmp_path: Path, suites: Path) -> None:
    """An expected failure (boolean.py's ``@unittest.expectedFailure`` tests) or a test skipped after it ran the code
    covers lines, but it cannot tell gold from the deletion: every task it targeted was refused as
    ``original-fails`` after a grading run. Only the tests that passed count as covering."""
    extra = (
        "\n\nimport pytest\n\n\n@pytest.mark.xfail(reason='known')\ndef test_clamp_xfail():\n"
        "    assert clamp(9, 0, 3) == 9\n\n\ndef test_clamp_skipped():\n    clamp(-5, 0, 3)\n    pytest.skip('later')\n"
    )
    src = project(tmp_path / "xfaillib", "xfaillib")
    (src / "tests/test_xfaillib.py").write_text((src / "tests/test_xfaillib.py").read_text() + extra)
    cfg = GenerateConfig(source=str(src), unsandboxed=True)
    proj = load_project(cfg.source, tmp_path / "ws")
    spec = env_spec(proj, cfg)
    got = baseline.run_baseline(proj, ensure_test_env(spec, proj.top_level), Sandbox(cfg), cfg, tmp_path / "ws", spec)
    covering = {t for lines in got.coverage["xfaillib/__init__.py"].values() for t in lines}
    assert "tests/test_xfaillib.py::test_clamp_low" in covering
    assert not {"tests/test_xfaillib.py::test_clamp_xfail", "tests/test_xfaillib.py::test_clamp_skipped"} & covering
    assert got.suite_tests == 7
