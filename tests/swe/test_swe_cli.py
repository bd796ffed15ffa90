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
    assert main(["swe", "mini-fixture", str(tmp_path / "mini")]) == 0
    return tmp_path / "mini"


def test_mini_fixture_refuses_a_non_empty_dir(mini: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (mini / "instances.jsonl").is_file() and (mini / "repos" / "crf-prime__mini-stats" / ".git").is_dir()
    assert main(["swe", "mini-fixture", str(mini)]) == 2
    assert "is not empty" in capsys.readouterr().out


def test_grade_resolved_and_forged(mini: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = str(mini / "instances.jsonl")
    good = tmp_path / "good.log"
    good.write_text(
        f"{START}\nPASSED tests/test_stats.py::test_median_even\nPASSED tests/test_stats.py::test_mean\n"
        "PASSED tests/test_stats.py::test_median_odd[xs0-2]\nPASSED tests/test_stats.py::test_median_odd[xs1-5]\n"
        f"{END}\n>>>>> Test Exit Code: 0\n"
    )
    assert main(["swe", "grade", str(good), "--instance", INSTANCE_ID, "--dataset", dataset, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["resolution"] == "RESOLVED_FULL" and report["found"] is True
    forged = tmp_path / "forged.log"
    forged.write_text(FORGED_LOG)
    assert main(["swe", "grade", str(forged), "--instance", INSTANCE_ID, "--dataset", dataset]) == 1
    assert "forged" in capsys.readouterr().out


def test_test_cmd_prints_the_eval_script(mini: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["swe", "test-cmd", "--instance", INSTANCE_ID, "--dataset", str(mini / "instances.jsonl")]
    assert main([*args, "--repo-dir", "/work/repo"]) == 0
    out = capsys.readouterr().out
    assert "cd /work/repo\n" in out
    assert "\nexec python -m pytest -rA -p no:cacheprovider tests/test_stats.py\n" in out
