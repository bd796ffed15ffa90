"""``crf-prime swe`` commands, called in-process through the dispatcher."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from swe_log_samples import END, FORGED_LOG, START

from crf_prime.cli import main
from crf_prime.swe.fixture import INSTANCE_ID


@pytest.fixture
def mini(tmp_path: Path) -> Path:
    assert main(["swe", "mini-fixture", "--out", str(tmp_path / "mini")]) == 0
    return tmp_path / "mini"


def test_mini_fixture_refuses_a_non_empty_dir(mini: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (mini / "instances.jsonl").is_file() and (mini / "repos" / "crf-prime__mini-stats" / ".git").is_dir()
    assert main(["swe", "mini-fixture", "--out", str(mini)]) == 2
    assert "is not empty" in capsys.readouterr().err


def test_grade_resolved_and_forged(mini: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = str(mini / "instances.jsonl")
    good = tmp_path / "good.log"
    good.write_text(
        f"{START}\nPASSED tests/test_stats.py::test_median_even\nPASSED tests/test_stats.py::test_mean\n"
        "PASSED tests/test_stats.py::test_median_odd[xs0-2]\nPASSED tests/test_stats.py::test_median_odd[xs1-5]\n"
        f"{END}\n>>>>> Test Exit Code: 0\n"
    )
    assert (
        main(["swe", "grade", "--log", str(good), "--instance", INSTANCE_ID, "--dataset", dataset, "--format", "json"])
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["resolution"] == "RESOLVED_FULL" and report["found"] is True
    forged = tmp_path / "forged.log"
    forged.write_text(FORGED_LOG)
    assert main(["swe", "grade", "--log", str(forged), "--instance", INSTANCE_ID, "--dataset", dataset]) == 1
    assert "forged" in capsys.readouterr().out


def test_test_cmd_prints_the_eval_script(mini: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["swe", "test-cmd", "--instance", INSTANCE_ID, "--dataset", str(mini / "instances.jsonl")]
    assert main([*args, "--repo-dir", "/work/repo"]) == 0
    out = capsys.readouterr().out
    assert "cd /work/repo\n" in out
    assert "\nexec python -m pytest -rA -p no:cacheprovider tests/test_stats.py\n" in out


def test_grade_bad_input_is_one_line_and_exit_2(mini: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing log, an unknown instance or a bad dataset is bad input (2), not "not resolved" (1)."""
    dataset = str(mini / "instances.jsonl")
    log = tmp_path / "run.log"
    log.write_text(FORGED_LOG)
    cases = [
        (
            ["--log", str(tmp_path / "missing.log"), "--instance", INSTANCE_ID],
            f"log: {tmp_path / 'missing.log'} does not exist",
        ),
        (["--log", str(tmp_path), "--instance", INSTANCE_ID], f"log: {tmp_path} is a directory"),
        (["--log", str(log), "--instance", "nobody__nothing-1"], "instance ids not found: ['nobody__nothing-1']"),
        (["--log", str(log), "--instance", INSTANCE_ID, "--parser", "nope"], "parser: unknown log parser 'nope'"),
    ]
    for args, message in cases:
        assert main(["swe", "grade", *args, "--dataset", dataset]) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("crf-prime swe grade: error: ") and message in err and len(err.splitlines()) == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instance_id": 1}\n')
    for dataset in (str(tmp_path / "missing.jsonl"), str(bad)):
        assert main(["swe", "grade", "--log", str(log), "--instance", INSTANCE_ID, "--dataset", dataset]) == 2
        err = capsys.readouterr().err
        assert err.startswith("crf-prime swe grade: error: ") and len(err.splitlines()) == 1


def test_mini_fixture_out_must_be_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "file"
    file.write_text("x")
    assert main(["swe", "mini-fixture", "--out", str(file)]) == 2
    assert (
        capsys.readouterr().err
        == f"crf-prime swe mini-fixture: error: out: {file} is a file; this output is a directory\n"
    )
    assert file.read_text() == "x"
