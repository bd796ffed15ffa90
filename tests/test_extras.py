"""crf_prime.extras.require: optional hosts import lazily, and a missing one names the extra that provides it."""

from __future__ import annotations

import json

import pytest

from crf_prime.extras import MissingExtraError, require


def test_require_returns_the_module() -> None:
    assert require("json", "none") is json


def test_missing_module_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(MissingExtraError) as info:
        require("crf_prime_no_such_host_module", "ray")
    msg = str(info.value)
    assert "'crf_prime_no_such_host_module' is not installed" in msg
    assert "pip install 'crf-prime[ray]'" in msg
    assert isinstance(info.value, ImportError)  # callers that catch ImportError keep working
    assert isinstance(info.value.__cause__, ModuleNotFoundError)


def test_cli_help_lists_every_installed_command(capsys: pytest.CaptureFixture[str]) -> None:
    from crf_prime.cli import main

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("featdel", "sandbox", "swe", "ingest", "replay", "pairs", "hints", "report", "relay"):
        assert command in out
    assert "crf-prime's own addition" in out
