"""The command line's one contract: config parsed from flags and ``@ file.toml``, one error base, one exit table."""

from __future__ import annotations

import pytest
from pydantic_config import BaseConfig, ConfigFileError

from crf_prime import cli
from crf_prime.errors import (
    BudgetExhausted,
    CrfError,
    ExitCode,
    InfraError,
    InputError,
    NegativeResult,
    NothingProduced,
)
from crf_prime.extras import MissingExtraError


def test_every_command_takes_one_config_and_has_a_summary() -> None:
    for name, target in cli.COMMANDS.items():
        func = cli.load(target)
        cls = cli.config_type(func)
        assert cls == list[str] or hasattr(cls, "model_fields"), name
        assert cli.summary(func), f"{name} needs a docstring: it is the command's help"
        assert name.split()[0] == target.split(".")[1], f"{name} must live in the package it is named after ({target})"


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in cli.COMMANDS:
        assert f"  {name} " in out


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (InputError.field("pool.tiered", "must be true"), 2),
        (InputError.at("a.toml", 3, "bad"), 2),
        (NegativeResult("not resolved"), 1),
        (BudgetExhausted("cap reached"), 3),
        (InfraError("sandbox gone"), 4),
        (NothingProduced("0 states"), 5),
        (MissingExtraError("x"), 6),
    ],
)
def test_errors_exit_with_their_code_and_one_line(monkeypatch, capsys, error: CrfError, code: int) -> None:
    def boom(config: list[str]) -> int:
        """a command that fails"""
        raise error

    monkeypatch.setitem(cli.COMMANDS, "boom", "tests.test_cli:BOOM")
    monkeypatch.setattr(cli, "load", lambda target: boom)
    assert cli.main(["boom"]) == code == int(error.exit_code)
    err = capsys.readouterr().err
    assert err.startswith("crf-prime boom: error: ") and len(err.strip().splitlines()) == 1


def test_input_error_names_the_place() -> None:
    assert str(InputError.at("sources.txt", 4, "not a pypi: spec")) == "sources.txt:4: not a pypi: spec"
    assert str(InputError.field("pool.tiered", "must be true")) == "pool.tiered: must be true"
    assert ExitCode.INTERRUPTED == 130


def test_bad_flag_and_bad_toml_are_bad_input(tmp_path, capsys) -> None:
    assert cli.main(["report", "--runs", "x", "--out", str(tmp_path), "--no-such-flag", "1"]) == 2
    assert "no-such-flag" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text("runs = [\n")
    assert cli.main(["report", "@", str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err
    good = tmp_path / "good.toml"
    good.write_text('runs = ["a"]\nout = "o"\nn_boot = -1\n')
    assert cli.main(["report", "@", str(good)]) == 2
    err = capsys.readouterr().err
    assert "--n-boot: Input should be greater than or equal to 100" in err and f"(config: {good})" in err


def test_toml_and_flags_share_names(tmp_path) -> None:
    from crf_prime.report.cli import ReportConfig

    cfg = tmp_path / "r.toml"
    cfg.write_text('runs = ["a", "b"]\nout = "o"\nn_boot = 300\n')
    config = cli.parse("report", ["@", str(cfg), "--n-boot", "400"])
    assert isinstance(config, ReportConfig)
    assert config.runs == ["a", "b"] and config.n_boot == 400 and str(config.out) == "o"


def test_unknown_command_is_bad_input(capsys) -> None:
    assert cli.main(["no-such-command"]) == 2
    assert "unknown command; the commands are" in capsys.readouterr().err
    assert cli.main(["featdel", "no-such-verb"]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == "crf-prime featdel no-such-verb: error: unknown command; the featdel commands are generate, validate, corpus (--help)\n"
    )


@pytest.mark.parametrize("group", ["featdel", "swe", "sandbox", "teachers", "traces", "loopback", "relay"])
def test_a_command_group_lists_its_commands(group: str, capsys) -> None:
    """``crf-prime featdel --help`` lists featdel's commands (it said "unknown command" and listed featdel itself)."""
    subs = cli.group_commands(group)
    assert subs
    assert cli.main([group, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: crf-prime {group} COMMAND")
    listed = [line.split()[1] for line in out.splitlines() if line.startswith(f"  {group} ")]
    assert listed == subs and max(len(line) for line in out.splitlines()) <= 80
    assert cli.main([group]) == 2 and capsys.readouterr().out.startswith(f"usage: crf-prime {group} COMMAND")
    assert cli.group_commands("check") == []  # a single command is not a group


class RunConfig(BaseConfig):
    wall: float = 60.0
    argv: list[str] = []


def run_it(config: RunConfig) -> int:
    """run a program"""
    return 0


def test_double_dash_passes_a_programs_argv(monkeypatch) -> None:
    monkeypatch.setitem(cli.COMMANDS, "box run", "x:y")
    monkeypatch.setattr(cli, "load", lambda target: run_it)
    config = cli.parse("box run", ["--wall", "5", "--", "python", "--version", "--", "x"])
    assert config.wall == 5.0 and config.argv == ["python", "--version", "--", "x"]
    monkeypatch.setitem(cli.COMMANDS, "report", "x:y")
    monkeypatch.setattr(cli, "load", lambda target: __import__("crf_prime.report.cli").report.cli.run)
    with pytest.raises(ConfigFileError, match="runs no program"):
        cli.parse("report", ["--runs", "a", "--out", "o", "--", "ls"])


def test_validation_errors_fold_onto_one_line(tmp_path, capsys) -> None:
    out = tmp_path / "o"
    assert cli.main(["report", "--runs", "x", "--out", str(out), "--n-boot", "-5", "--confidence", "3"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "--n-boot: Input should be greater than or equal to 100" in err and "--confidence: Input should be" in err
