"""``crf-prime check``: composes a run's arguments like ``uv run rl`` and names the key of every problem it finds.

Runs without prime-rl (``--check.prime-rl skip``): the composition, our loss kwargs, verifiers' own taskset and harness
config classes (resolved by id from the installed environments) and the input files. The opt-in
test_configs_check_prime_rl.py repeats the arms against prime-rl's real ``RLConfig``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ladder_arms import ARMS, LADDER, rl_args

from crf_prime.check import CheckConfig, check, compose_args
from crf_prime.check.compose import ArgsError, split_own_args
from crf_prime.cli import main

REPO = Path(__file__).resolve().parents[2]
A1 = rl_args("A1")
TEACHERS = REPO / "configs" / "teachers.toml"


def run_check(launch: Path, *args: str):
    return check(list(args), CheckConfig(base_dir=launch, prime_rl="skip"))


def problems(report) -> list[str]:
    return [str(p) for p in report.problems]


@pytest.mark.parametrize("arm", sorted(a for a in ARMS if a.startswith("A")))
def test_every_ladder_arm_is_ready_to_launch(launch: Path, arm: str) -> None:
    report = run_check(launch, *rl_args(arm))
    assert problems(report) == []
    assert report.batch_size == 256 and report.eval == ["featdel-eval"]
    assert report.train and abs(sum(s.share for s in report.train) - 1.0) < 1e-12


def test_a2_mix_is_ratio_times_group_size_normalised(launch: Path) -> None:
    report = run_check(launch, *rl_args("A2"))
    mix = {s.name: (s.algo, s.ratio, s.group_size, s.share) for s in report.train}
    assert mix == {"featdel": ("grpo", 1.0, 8, 8 / 12), "featdel-hints": ("opsd", 4.0, 1, 4 / 12)}
    assert report.hint_share == 4 / 12  # the third a2_hints.toml promises


def test_a4_mix_counts_the_replay_source_at_the_orchestrator_group_size(launch: Path) -> None:
    report = run_check(launch, *rl_args("A4"))
    assert [(s.name, s.share) for s in report.train] == [
        ("featdel", 8 / 18),
        ("featdel-hints", 6 / 18),
        ("replay", 4 / 18),
    ]
    assert report.hint_share == 6 / 18  # the third a4_all.toml promises


def test_cli_string_kwarg_is_coerced_and_reported(launch: Path) -> None:
    report = run_check(launch, *A1, "--trainer.loss.kwargs.clip-high", "0.28")
    assert problems(report) == []
    assert "trainer.loss.kwargs.clip_high: the string '0.28' (a command-line value) is coerced to 0.28" in report.notes


def test_unknown_kwarg_names_the_key(launch: Path) -> None:
    report = run_check(launch, *A1, "--trainer.loss.kwargs.clip-hgih", "0.28")
    assert problems(report) == ["trainer.loss.kwargs.clip_hgih: unknown setting (allowed: clip_low, clip_high, scale)"]


def test_out_of_range_kwarg_names_the_key(launch: Path) -> None:
    report = run_check(launch, *A1, "--trainer.loss.kwargs.clip-low", "1.5")
    assert problems(report) == ["trainer.loss.kwargs.clip_low: Input should be less than 1 (got '1.5')"]


def test_unimportable_loss_names_import_path(launch: Path) -> None:
    report = run_check(launch, *A1, "--trainer.loss.import-path", "loss_fns.policy.grpo_typo")
    assert [p.key for p in report.problems] == ["trainer.loss.import_path"]


def test_missing_tasks_dir_names_the_source_key(launch: Path) -> None:
    report = run_check(launch, *A1, "--orchestrator.train.source", "x")  # replaced list: also named
    assert problems(report)[0].startswith("orchestrator.train.source: must be a list")
    (launch / "tasks/featdel-eval/tasks.jsonl").unlink()
    (launch / "tasks/featdel-eval").rmdir()
    report = run_check(launch, *A1)
    assert problems(report) == [
        f"orchestrator.eval.source[0].env.taskset.tasks: tasks/featdel-eval does not exist (from {launch.resolve()})"
    ]


def test_tasks_dir_without_tasks_jsonl(launch: Path) -> None:
    (launch / "tasks/featdel-train/tasks.jsonl").unlink()
    report = run_check(launch, *A1)
    assert problems(report) == [
        "orchestrator.train.source[0].env.taskset.tasks: tasks/featdel-train has no tasks.jsonl"
    ]


def test_bad_taskset_field_names_the_key(launch: Path, tmp_path: Path) -> None:
    overlay = tmp_path / "bad.toml"
    overlay.write_text(
        (LADDER / "a3_replay.toml").read_text()
        + '\n[orchestrator.train.source.env.taskset.task]\ntierr = "exact"\n'
        + "\n[orchestrator.train.source.env.taskset.task.votes]\nthreshold = 1.5\n"
    )
    report = run_check(launch, *A1, "@", str(overlay))
    assert sorted(problems(report)) == [
        "orchestrator.train.source[1].env.taskset.task.tierr: Extra inputs are not permitted (got 'exact')",
        "orchestrator.train.source[1].env.taskset.task.votes.threshold: Input should be less than or equal to 1 (got 1.5)",
    ]


def test_unknown_taskset_id_names_the_key(launch: Path, tmp_path: Path) -> None:
    overlay = tmp_path / "bad.toml"
    overlay.write_text((LADDER / "a3_replay.toml").read_text().replace('id = "trace-replay"', 'id = "trace-replya"'))
    report = run_check(launch, *A1, "@", str(overlay))
    assert [p.key for p in report.problems] == ["orchestrator.train.source[1].env.taskset.id"]
    assert "trace-replya" in report.problems[0].message


def test_missing_states_and_journal_of_trace_replay(launch: Path) -> None:
    (launch / "replay/states.jsonl").unlink()
    (launch / "replay/run/journal.jsonl").unlink()
    report = run_check(launch, *rl_args("A3"))
    assert [p.key for p in report.problems] == [
        "orchestrator.train.source[1].env.taskset.states",
        "orchestrator.train.source[1].env.taskset.journal",
    ]


@pytest.mark.parametrize(
    ("teachers", "name", "expected"),
    [
        ("missing.toml", "deepseek", "task.hint_writer.teachers: missing.toml does not exist"),
        (str(TEACHERS), "gpt-typo", "task.hint_writer.name: 'gpt-typo' is not a teacher of"),
        (str(TEACHERS), "deepseek", None),
    ],
)
def test_hint_writer_teachers_file_and_name(launch: Path, teachers: str, name: str, expected: str | None) -> None:
    overlay = launch / "writer.toml"
    overlay.write_text(
        (LADDER / "a2_hints.toml").read_text()
        + f'\n[orchestrator.train.source.env.taskset.task.hint_writer]\nteachers = "{teachers}"\nname = "{name}"\n'
    )
    report = run_check(launch, *A1, "@", str(overlay))
    if expected is None:
        assert problems(report) == []
    else:
        (problem,) = problems(report)
        assert problem.startswith(f"orchestrator.train.source[1].env.taskset.{expected}")


def test_compose_replaces_lists_and_merges_tables(tmp_path: Path) -> None:
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text('x = [1, 2]\n[t]\nk = 1\nm = "a"\n[[s]]\nname = "one"\n')
    b.write_text('x = [3]\n[t]\nk = 2\n[[s]]\nname = "two"\n')
    got = compose_args(["@", str(a), "@", str(b), "--t.new-key", "v", "--flag", "--no-other", "--u=w"])
    assert got == {
        "x": [3],
        "t": {"k": 2, "m": "a", "new_key": "v"},
        "s": [{"name": "two"}],
        "flag": True,
        "other": False,
        "u": "w",
    }
    assert compose_args(["--t", "@", str(b)]) == {"t": {"x": [3], "t": {"k": 2}, "s": [{"name": "two"}]}}


def test_bad_arguments_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[t]\nk = \n")
    with pytest.raises(ArgsError, match=rf"^{bad}: invalid TOML: .*line 2"):
        compose_args(["@", str(bad)])
    with pytest.raises(ArgsError, match="config file not found"):
        compose_args(["@", str(tmp_path / "none.toml")])
    assert split_own_args(["@", "a.toml", "--check.base-dir", "d", "--x", "1", "--check.prime-rl=skip"]) == (
        {"base_dir": "d", "prime_rl": "skip"},
        ["@", "a.toml", "--x", "1"],
    )


def test_cli_exit_codes_and_output(launch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["check", *A1, "--check.base-dir", str(launch), "--check.prime-rl", "skip"]
    assert main(base) == 0
    out = capsys.readouterr().out
    assert "featdel" in out and "100.0%" in out and "crf-prime check: ready to launch" in out
    assert main([*base, "--trainer.loss.kwargs.clip-hgih", "1"]) == 1
    assert "error: trainer.loss.kwargs.clip_hgih: unknown setting" in capsys.readouterr().out
    assert main(["check", *A1, "--check.prime-rl", "sometimes"]) == 2
    assert "--check.prime-rl: Input should be 'auto', 'require' or 'skip' (got 'sometimes')" in capsys.readouterr().err


def test_prime_rl_required_but_absent_is_a_problem(launch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import crf_prime.check.run as run_module

    def absent() -> type:
        raise ImportError("No module named 'prime_rl'")

    monkeypatch.setattr(run_module, "import_rl_config", absent)
    report = check(A1, CheckConfig(base_dir=launch, prime_rl="require"))
    assert [p.key for p in report.problems] == ["prime-rl"]
    report = check(A1, CheckConfig(base_dir=launch, prime_rl="auto"))
    assert report.ok and report.rl_config == "skipped"
    assert any(note.startswith("RLConfig not validated: prime-rl is not importable") for note in report.notes)


def test_check_prints_the_hint_share_and_the_distilled_share(launch: Path) -> None:
    from rich.console import Console

    from crf_prime.check.report import print_report

    console = Console(record=True, width=200)
    print_report(run_check(launch, *rl_args("A2")), console)
    text = console.export_text()
    assert "hint-distilled samples (algo opsd): 33.3% of each step's rollouts\n" in text
    assert "share of trainer samples for an error-site rate p: 33.3% at p = 1, 20.0% at p = 0.5\n" in text


def test_distilled_share_is_rho_p_over_rho_p_plus_the_rest_shipped() -> None:
    from crf_prime.check.mix import distilled_share

    assert distilled_share(1 / 3, 1.0) == pytest.approx(1 / 3)
    assert distilled_share(1 / 3, 0.5) == pytest.approx(0.2)
    assert distilled_share(0.5, 0.8, kept=0.5) == pytest.approx(0.4 / 0.65)
    assert distilled_share(0.0, 1.0) == 0.0


def test_hint_target_that_does_not_match_the_algorithm_is_noted(launch: Path) -> None:
    assert not [n for n in run_check(launch, *rl_args("A2")).notes if "hint_target" in n]
    field = "orchestrator.train.source[{}].env.taskset.task.hint_target"
    overlay = launch / "a2_episode.toml"
    overlay.write_text(
        (LADDER / "a2_hints.toml").read_text().replace('hint_target = "error_turns"', 'hint_target = "episode"')
    )
    episode = run_check(launch, *rl_args("A2")[:-2], "@", str(overlay))
    opsd_note = (
        f"{field.format(1)}: 'episode' on an opsd source distils every turn, and episodes without an error site under "
        "an empty hint; 'error_turns' distils the error turns only (docs/running.md)"
    )
    assert [n for n in episode.notes if "hint_target" in n] == [opsd_note]
