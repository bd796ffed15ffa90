"""crf-prime report on synthetic vf-eval / prime-rl outputs written as real verifiers Episode records."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import verifiers.v1 as vf
from verifiers.v1.configs.agent import AgentConfig
from verifiers.v1.episode import EnvInfo, Episode
from verifiers.v1.trace import AgentInfo, TraceTask

from crf_prime.cli import main
from crf_prime.report import (
    ReportInputError,
    Sample,
    bootstrap_mean,
    build_report,
    load_arm,
    markdown,
    paired_difference,
    pass_at_1,
    per_task_pass,
)


def episode(task: str, reward: float | None, env: str = "feature-deletion") -> dict:
    trace = vf.Trace(
        task=TraceTask(type="T", data=vf.TaskData(prompt=task), key=task), agent=AgentInfo(config=AgentConfig())
    )
    if reward is not None:
        trace.record_reward("tests", reward)
    ep = Episode(env=EnvInfo(id=env), task=trace.task, traces=[trace], ok=reward is not None)
    return ep.to_record()


def write(path: Path, rows: list[tuple[str, float | None]], env: str = "feature-deletion") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.writelines(json.dumps(episode(t, r, env)) + "\n" for t, r in rows)
    return path


def arm_rows(n_tasks: int, passing: int, samples: int = 1) -> list[tuple[str, float]]:
    return [(f"t{i}", 1.0 if i < passing else 0.0) for i in range(n_tasks) for _ in range(samples)]


def test_per_task_pass_is_fraction_of_samples_at_threshold():
    s = [Sample(task="a", reward=r) for r in (1.0, 0.5, 1.0, 0.0)] + [Sample(task="b", reward=0.99)]
    assert per_task_pass(s, threshold=1.0) == {"a": 0.5, "b": 0.0}
    assert per_task_pass(s, threshold=0.5) == {"a": 0.75, "b": 1.0}


def test_constant_values_give_a_zero_width_interval():
    e = bootstrap_mean([1.0] * 7 + [1.0])
    assert (e.value, e.low, e.high, e.n) == (1.0, 1.0, 1.0, 8)


def test_bootstrap_interval_coverage_is_close_to_nominal():
    rng = np.random.default_rng(123)
    true_p, covered, reps = 0.3, 0, 200
    for rep in range(reps):
        values = (rng.random(150) < true_p).astype(float)
        e = bootstrap_mean(values, n_boot=400, confidence=0.9, seed=rep)
        covered += e.low <= true_p <= e.high
    # percentile bootstrap of a mean at n=150: coverage within a few points of 90%
    assert 0.84 <= covered / reps <= 0.96


def test_paired_difference_is_exact_and_tighter_than_unpaired():
    base = [Sample(task=t, reward=r) for t, r in arm_rows(100, 50)]
    arm = [Sample(task=t, reward=r) for t, r in arm_rows(100, 60)]
    d = paired_difference(arm, base, n_boot=2000)
    assert d.value == pytest.approx(0.10) and d.n == 100
    assert d.low > 0.0  # every task moved the same way: the paired CI excludes 0 ...
    pa, pb = pass_at_1(arm), pass_at_1(base)
    assert (pa.value, pb.value) == (0.6, 0.5)
    assert pa.low < pb.high  # ... while the two arms' own intervals overlap


def test_paired_difference_uses_shared_tasks_only_and_needs_one():
    base = [Sample(task="a", reward=1.0), Sample(task="b", reward=0.0)]
    arm = [Sample(task="b", reward=1.0), Sample(task="c", reward=1.0)]
    d = paired_difference(arm, base)
    assert (d.value, d.n) == (1.0, 1)
    with pytest.raises(ValueError, match="share no task"):
        paired_difference([Sample(task="z", reward=1.0)], base)


def test_load_vf_eval_dir_counts_unscored_episodes(tmp_path):
    write(tmp_path / "a0" / "traces.jsonl", [("t0", 1.0), ("t1", 0.0), ("t2", None)])
    arm = load_arm("A0", tmp_path / "a0")
    assert [(s.task, s.reward) for s in arm.samples] == [("t0", 1.0), ("t1", 0.0)]
    assert arm.unscored == 1 and arm.curve == []


def test_load_prime_rl_run_dir_picks_last_eval_step_and_builds_train_curve(tmp_path):
    run = tmp_path / "outputs" / "a1-dr-grpo"
    write(run / "rollouts" / "step_5" / "eval" / "all" / "traces.jsonl", arm_rows(4, 1))
    write(run / "rollouts" / "step_10" / "eval" / "all" / "traces.jsonl", arm_rows(4, 3))
    write(run / "rollouts" / "step_1" / "train" / "all" / "traces.jsonl", [("t0", 0.0), ("t1", 1.0)])
    write(run / "rollouts" / "step_2" / "train" / "all" / "traces.jsonl", [("t0", 1.0), ("t1", 1.0)])
    # another training source of the run (A3's trace replay) stays out of the evaluated environment's curve
    write(run / "rollouts" / "step_2" / "train" / "all" / "traces.jsonl", [("s0", 0.0)] * 3, env="trace-replay")
    arm = load_arm("A1", run)
    assert arm.source.endswith("step_10/eval/all/traces.jsonl")
    assert pass_at_1(arm.samples).value == 0.75
    assert arm.curve == [(1, 0.5), (2, 1.0)]
    assert pass_at_1(load_arm("A1", run, step=5).samples).value == 0.25
    with pytest.raises(ReportInputError, match="no eval rollouts at step 7"):
        load_arm("A1", run, step=7)


def test_env_filter_keeps_one_environment(tmp_path):
    path = write(tmp_path / "mixed" / "traces.jsonl", [("t0", 1.0), ("t1", 0.0)])
    write(path, [("i0", 0.0), ("i1", 0.0), ("i2", 0.0)], env="swebench-lite")
    assert pass_at_1(load_arm("m", path).samples).value == 0.2
    assert pass_at_1(load_arm("m", path, env="feature-deletion").samples).value == 0.5
    with pytest.raises(ReportInputError, match="no scored episodes of environment 'trace-replay'"):
        load_arm("m", path, env="trace-replay")


def test_bad_line_names_file_and_line(tmp_path):
    path = write(tmp_path / "x" / "traces.jsonl", [("t0", 1.0)])
    with path.open("a") as f:
        f.write('{"not": "an episode"}\n')
    with pytest.raises(ReportInputError, match=rf"{path}:2: not a verifiers episode record"):
        load_arm("x", path)


def test_cli_writes_markdown_json_and_png(tmp_path):
    write(tmp_path / "a0" / "traces.jsonl", arm_rows(20, 10, samples=2))
    run = tmp_path / "a2"
    write(run / "rollouts" / "step_3" / "eval" / "all" / "traces.jsonl", arm_rows(20, 15, samples=2))
    write(run / "rollouts" / "step_3" / "train" / "all" / "traces.jsonl", [("t0", 0.25)])
    out = tmp_path / "report"
    assert main(["report", "--runs", str(tmp_path / "a0"), f"A2={run}", "--out", str(out), "--n-boot", "500"]) == 0
    md = (out / "report.md").read_text().splitlines()
    assert md[0].startswith("| arm | tasks | samples | unscored | pass@1 (%) | 95% CI | Δ vs a0 (pp)")
    assert md[2].startswith("| a0 | 20 | 40 | 0 | 50.0 | [")
    assert md[2].endswith("| — | — | — |")
    assert md[3].startswith("| A2 | 20 | 40 | 0 | 75.0 | [") and "| +25.0 | [" in md[3] and md[3].endswith("| 20 |")
    data = json.loads((out / "report.json").read_text())
    assert data["baseline"] == "a0" and data["arms"][1]["diff"]["value"] == pytest.approx(0.25)
    assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in out.iterdir()) == ["report.json", "report.md", "report.png"]


def test_cli_reports_unreadable_input_without_writing(tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["report", "--runs", str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert "neither a traces.jsonl" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        (["--n-boot", "-5"], "--n-boot"),
        (["--n-boot", "0"], "--n-boot"),
        (["--confidence", "1.5"], "--confidence"),
        (["--step", "-1"], "--step"),
    ],
)
def test_cli_rejects_out_of_range_numbers_before_reading(tmp_path, capsys, flags, field):
    out = tmp_path / "report"
    assert main(["report", "--runs", str(tmp_path / "missing"), "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert field in err and "neither a traces.jsonl" not in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("specs", "extra", "message"),
    [
        (["a0", "a0"], [], "arm names must be unique"),
        (["a0", "b0"], ["--baseline", "zz"], "baseline: 'zz' is not one of the arms"),
        (["a0", "c0"], [], "arm 'c0' shares no task with the baseline 'a0'"),
    ],
)
def test_cli_names_bad_arms_in_one_line(tmp_path, capsys, specs, extra, message):
    write(tmp_path / "a0" / "traces.jsonl", arm_rows(4, 2))
    write(tmp_path / "b0" / "traces.jsonl", arm_rows(4, 1))
    write(tmp_path / "c0" / "traces.jsonl", [("other", 1.0)])
    runs = [str(tmp_path / s) for s in specs]
    out = tmp_path / "report"
    assert main(["report", "--runs", *runs, "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_cli_out_pointing_at_a_file_is_bad_input(tmp_path, capsys):
    write(tmp_path / "a0" / "traces.jsonl", arm_rows(4, 2))
    out = tmp_path / "report.md"
    out.write_text("keep me")
    assert main(["report", "--runs", str(tmp_path / "a0"), "--out", str(out)]) == 2
    assert "out: " in capsys.readouterr().err and out.read_text() == "keep me"


def test_markdown_baseline_choice(tmp_path):
    arms = [load_arm(n, write(tmp_path / n / "traces.jsonl", arm_rows(10, k))) for n, k in (("A", 2), ("B", 4))]
    report = build_report(arms, baseline="B", n_boot=200)
    text = markdown(report)
    assert "Δ vs B (pp)" in text and "| A | 10 | 10 | 0 | 20.0 |" in text and "| -20.0 |" in text
    with pytest.raises(ValueError, match="baseline: 'C'"):
        build_report(arms, baseline="C")
