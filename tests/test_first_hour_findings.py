"""What a new user hit in the first hour (issue 28, items 3, 7 and 8), each pinned by the command's own output."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from crf_prime.cli import main

sys.path.insert(0, str(Path(__file__).parent / "configs"))
sys.path.insert(0, str(Path(__file__).parent / "swe"))
from ladder_arms import LADDER, rl_args
from swe_log_samples import END, START

REPO = Path(__file__).resolve().parents[1]


def episode(trace_id: str, hint: str, failing: list[str]) -> dict:
    """A vf-eval episode record whose trace carries the hint the environment wrote (no tool errors in the messages:
    the failing tests are the only error sites, as after a clean agent run that got the code wrong)."""
    sites = [{"kind": "failing_test", "index": -1, "tool": name, "arguments": "", "count": 1} for name in failing]
    trace = {
        "id": trace_id,
        "messages": [{"role": "user", "content": "fix it"}, {"role": "assistant", "content": "done"}],
        "info": {"hint": hint, "hint_source": "template", "hint_sites": sites},
    }
    return {"id": f"ep-{trace_id}", "task": {"key": trace_id}, "traces": [trace]}


def test_hints_uses_the_failing_tests_the_environment_recorded(tmp_path: Path, capsys) -> None:
    traces = tmp_path / "traces.jsonl"
    rows = [episode(f"t{i}", "- 1 test fails", [f"tests/test_a.py::test_b[x{i}]"]) for i in range(4)]
    traces.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "hints.jsonl"
    assert main(["hints", "--traces", str(traces), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "4 of 4 traces get a non-empty hint" in printed
    assert "tests/test_a.py::test_b[x0]" in printed  # markup does not eat the test parameters
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(r["hint"] and [s["kind"] for s in r["sites"]] == ["failing_test"] for r in written)


@pytest.fixture
def launch(tmp_path: Path) -> Path:
    for rel in ("tasks/featdel-train/tasks.jsonl", "tasks/featdel-eval/tasks.jsonl", "replay/states.jsonl"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    return tmp_path


@pytest.mark.parametrize("content", [None, "[t]\nk = \n"], ids=["missing", "malformed"])
def test_check_unreadable_config_is_exit_2_on_stderr(tmp_path: Path, capsys, content: str | None) -> None:
    path = tmp_path / "arm.toml"
    if content is not None:
        path.write_text(content)
    assert main(["check", "@", str(path), "--check.prime-rl", "skip"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"crf-prime check: error: {path}: ") and len(captured.err.splitlines()) == 1


def test_check_misspelled_hint_target_is_one_error_and_no_note(launch: Path, capsys) -> None:
    overlay = launch / "a2_typo.toml"
    overlay.write_text(
        (LADDER / "a2_hints.toml").read_text().replace('hint_target = "error_turns"', 'hint_target = "error_turn"')
    )
    args = [*rl_args("A2")[:-2], "@", str(overlay), "--check.base-dir", str(launch), "--check.prime-rl", "skip"]
    assert main(["check", *args]) == 1
    lines = [line for line in capsys.readouterr().out.splitlines() if "hint_target" in line]
    assert lines == [
        "error: orchestrator.train.source[1].env.taskset.task.hint_target: Input should be 'episode' or "
        "'error_turns' (got 'error_turn')"
    ]


def test_swe_grade_table_keeps_test_parameters(tmp_path: Path, capsys) -> None:
    from crf_prime.swe.fixture import INSTANCE_ID

    assert main(["swe", "mini-fixture", "--out", str(tmp_path / "mini")]) == 0
    log = tmp_path / "half.log"
    log.write_text(
        f"{START}\nPASSED tests/test_stats.py::test_median_even\nPASSED tests/test_stats.py::test_mean\n"
        "FAILED tests/test_stats.py::test_median_odd[xs0-2]\nPASSED tests/test_stats.py::test_median_odd[xs1-5]\n"
        f"{END}\n>>>>> Test Exit Code: 1\n"
    )
    capsys.readouterr()
    dataset = str(tmp_path / "mini" / "instances.jsonl")
    assert main(["swe", "grade", "--log", str(log), "--instance", INSTANCE_ID, "--dataset", dataset]) == 1
    assert "test_median_odd[xs0-2]" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("row", "why"),
    [
        ({"traces": []}, "no `task` object"),
        ([1, 2], "a list, not an object"),
        ({"task": {"key": "a"}, "traces": [{"rewards": {"r": {"weight": 1}}}]}, "traces[0].rewards must map"),
    ],
)
def test_report_names_a_row_that_is_not_an_episode(tmp_path: Path, capsys, row: object, why: str) -> None:
    traces = tmp_path / "traces.jsonl"
    traces.write_text(json.dumps(row) + "\n")
    assert main(["report", "--runs", f'["{traces}"]', "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"crf-prime report: error: {traces}:1: ") and why in err
    assert "KeyError" not in err and "('task')" not in err and "'score'" not in err


def test_report_files_are_readable_by_all(tmp_path: Path, capsys) -> None:
    traces = tmp_path / "traces.jsonl"
    rows = [{"task": {"key": f"k{i}"}, "traces": [{"rewards": {"r": {"score": i % 2, "weight": 1}}}]} for i in range(4)]
    traces.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    assert main(["report", "--runs", f'["{traces}"]', "--out", str(out), "--n-boot", "100"]) == 0
    for name in ("report.md", "report.json", "report.png"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o644, name


def test_gitignore_covers_the_outputs_of_the_documented_commands() -> None:
    ignored = (REPO / ".gitignore").read_text().splitlines()
    for path in ("outputs/", "out/", ".venv/"):
        assert path in ignored or path.rstrip("/") in ignored, path


def test_running_md_starts_with_a_runnable_step() -> None:
    text = (REPO / "docs" / "running.md").read_text()
    first_block = text.index("```bash")
    assert len(text[:first_block].splitlines()) <= 40, "docs/running.md: theory before the first runnable step"


@pytest.mark.parametrize(
    "argv",
    [["featdel", "generate", "--source", "{tmp}/nowhere"], ["featdel", "validate", "--task-dir", "{tmp}"]],
    ids=["generate", "validate"],
)
def test_featdel_without_cloudpickle_refuses_with_the_install_command(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    monkeypatch.setitem(sys.modules, "cloudpickle", None)  # import cloudpickle → ImportError
    out = tmp_path / "out"
    args = [a.format(tmp=tmp_path) for a in argv] + (["--out", str(out)] if argv[1] == "generate" else [])
    assert main(args) == 6
    assert "pip install 'crf-prime[featdel]'" in capsys.readouterr().err
    assert not out.exists()


def test_featdel_library_generate_refuses_without_cloudpickle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from crf_prime.extras import MissingExtraError
    from crf_prime.featdel.generate import GenerateConfig, generate

    monkeypatch.setitem(sys.modules, "cloudpickle", None)
    with pytest.raises(MissingExtraError, match="cloudpickle"):
        generate(GenerateConfig(source=str(tmp_path / "nowhere"), out=tmp_path / "out"))


def test_the_feature_deletion_environment_requires_what_its_replay_needs() -> None:
    import tomllib

    project = tomllib.loads((REPO / "environments" / "feature_deletion" / "pyproject.toml").read_text())["project"]
    assert "crf-prime[featdel]" in [d.split("#")[0].strip() for d in project["dependencies"]]


def test_featdel_generate_ends_with_what_it_wrote_and_the_next_commands(capsys) -> None:
    from crf_prime.clihelp import print_next
    from crf_prime.featdel.cli import generated, next_after_generate
    from crf_prime.featdel.generate import GenerateConfig

    config = GenerateConfig(out=Path("out/featdel"))
    assert generated(8, config) == "wrote 8 tasks to out/featdel/tasks.jsonl (stopped at --max-tasks 8, the default)"
    assert generated(3, config).endswith("(every candidate checked)")
    print_next(generated(8, config), next_after_generate(config.out))
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:4] == [
        "next:",
        "  crf-prime featdel validate --task-dir out/featdel",
        "      re-check every task in the sandbox",
    ]
    assert '  [orchestrator.train.source.env.taskset] id = "feature-deletion", tasks = "out/featdel"' in lines
    assert any("tasks/featdel-train and tasks/featdel-eval" in line for line in lines)
