"""Every command's ``--help`` at 80 columns: each field with the default the command really runs with, and its range."""

from __future__ import annotations

from pathlib import Path

import pytest

from crf_prime import cli, clihelp
from crf_prime.placement import GRADING_LIMITS

TEACHERS_TOML = '[[teachers]]\nname = "t"\nmodel = "m"\nbase_url = "http://127.0.0.1:1/v1"\n'

# The required fields of each command, so the rest parse to their defaults.
REQUIRED: dict[str, list[str]] = {
    "featdel validate": ["--task-dir", "t"],
    "featdel corpus": ["--sources", "s.txt", "--out", "o"],
    "swe grade": ["--instance", "i", "--log", "l"],
    "swe mini-fixture": ["--out", "o"],
    "swe test-cmd": ["--instance", "i"],
    "hints": ["--traces", "t"],
    "traces ingest": ["--paths", '["p"]', "--out", "o"],
    "teachers replay": ["@", "{teachers}", "--states", "s", "--out", "o"],
    "pairs": ["--journal", "j", "--states", "s", "--out", "o"],
    "report": ["--runs", '["a"]', "--out", "o"],
    "relay serve": ["--broadcast-dir", "b", "--data-dir", "d"],
    "relay pull": ["--server", '["http://127.0.0.1:1"]', "--broadcast-dir", "b"],
}

MODEL_COMMANDS = [n for n, t in cli.COMMANDS.items() if cli.config_type(cli.load(t)) != list[str]]


def help_text(name: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main([*name.split(), "--help"]) == 0
    return capsys.readouterr().out


def value_at(config: object, path: tuple[str, ...]) -> object:
    """The parsed value at ``path``; ``None`` under an optional table that is off (its rows show the table's own
    defaults, what turning it on gives)."""
    for part in path:
        if config is None:
            return clihelp.NO_DEFAULT
        config = getattr(config, part)
    return config


@pytest.mark.parametrize("name", [*cli.COMMANDS, ""])
def test_help_fits_80_columns(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = help_text(name, capsys) if name else (cli.main(["--help"]), capsys.readouterr().out)[1]
    wide = [line for line in out.splitlines() if len(line) > 80]
    assert not wide, f"{name or 'crf-prime'} --help has lines over 80 columns: {wide[:3]}"


@pytest.mark.parametrize("name", MODEL_COMMANDS)
def test_help_shows_the_default_the_command_runs_with(
    name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = help_text(name, capsys)
    teachers = tmp_path / "teachers.toml"  # only the required [[teachers]] table: every other key at its default
    teachers.write_text(TEACHERS_TOML)
    config = cli.parse(name, [arg.format(teachers=teachers) for arg in REQUIRED.get(name, [])])
    cls = cli.config_type(cli.load(cli.COMMANDS[name]))
    for row in clihelp.rows(cls):
        assert f"  {row.flag} " in out or f"  {row.flag}\n" in out, f"{name}: {row.flag} missing from --help"
        if row.default is clihelp.NO_DEFAULT:
            continue
        shown = clihelp.show_default(row.default)
        parsed = value_at(config, row.path)
        if parsed is not clihelp.NO_DEFAULT:
            assert shown == clihelp.show_default(parsed), f"{name} {row.flag}"
        assert f"default: {shown}" in out, f"{name} {row.flag}: default {shown} not shown"


def test_grading_limits_are_the_shown_defaults_of_featdel(capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("featdel generate", "featdel validate"):
        out = help_text(name, capsys)
        block = out.split("--limits.wall-seconds", 1)[1].split("\n\n", 1)[0]
        assert f"default: {GRADING_LIMITS.wall_seconds!r}; range: > 0" in block
        for flag, value in (("memory-mb", GRADING_LIMITS.memory_mb), ("pids", GRADING_LIMITS.pids)):
            block = out.split(f"--limits.{flag}", 1)[1].split("\n\n", 1)[0]
            assert f"default: {value}; range: >= 1" in block, (name, flag)


def test_a_none_default_with_a_meaning_is_one_default_line(capsys: pytest.CaptureFixture[str]) -> None:
    block = help_text("report", capsys).split("--baseline", 1)[1].split("\n\n", 1)[0]
    assert block.count("default") == 1 and "default: None (the first)" in block
