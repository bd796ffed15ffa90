"""Feature Deletion generation needs pytest + coverage (the ``featdel`` extra): a missing one names the extra."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from crf_prime.cli import main
from crf_prime.extras import MissingExtraError
from crf_prime.featdel.testenv import default_spec


@pytest.mark.parametrize("module", ["pytest", "coverage"])
def test_default_spec_names_the_featdel_extra(module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # the import now fails as if the package were not installed
    with pytest.raises(MissingExtraError) as info:
        default_spec(())
    assert str(info.value) == (
        f"{module!r} is not installed; it comes with the crf-prime extra 'featdel': pip install 'crf-prime[featdel]'"
    )


def test_generate_cli_reports_the_missing_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "lib"
    (src / "lib").mkdir(parents=True)
    (src / "lib" / "__init__.py").write_text("def f():\n    return 1\n")
    (src / "tests").mkdir()
    (src / "tests" / "test_lib.py").write_text("from lib import f\n\n\ndef test_f():\n    assert f() == 1\n")
    monkeypatch.setitem(sys.modules, "coverage", None)
    rc = main(["featdel", "generate", "--source", str(src), "--out", str(tmp_path / "out"), "--unsandboxed"])
    assert rc == 6  # MissingExtraError's code (docs/cli.md)
    err = " ".join(capsys.readouterr().err.split())
    assert "pip install 'crf-prime[featdel]'" in err
    assert not (tmp_path / "out").exists()
