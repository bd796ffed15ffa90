"""The channel-3 commands (``traces ingest``, ``teachers replay``, ``pairs``) and ``hints`` on the config CLI: numbers
checked before any work, outputs of the kind they say, and no success reported for a run that produced nothing."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from records_support import state

from crf_prime.cli import main
from crf_prime.records import Action, JournalRecord

FIX = Path(__file__).resolve().parents[1] / "traces" / "fixtures"


def closed_port() -> int:
    """A loopback port with nothing listening: bound, then released."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    states = tmp_path / "in" / "states.jsonl"
    states.parent.mkdir()
    states.write_text("".join(state(i).model_dump_json() + "\n" for i in range(2)))
    teachers = tmp_path / "in" / "teachers.toml"
    teachers.write_text(
        "".join(
            f'[[teachers]]\nname = "{n}"\nmodel = "model-{n}"\nbase_url = "http://127.0.0.1:{closed_port()}/v1"\n'
            f'api_key_var = ""\nmax_attempts = 1\ntimeout_s = 5.0\n'
            for n in "ab"
        )
    )
    journal = tmp_path / "in" / "journal.jsonl"
    traces = tmp_path / "in" / "traces.jsonl"
    traces.write_text("")
    return {"states": states, "teachers": teachers, "journal": journal, "traces": traces, "tmp": tmp_path}


def replay(inputs: dict[str, Path], *args: str) -> list[str]:
    return ["teachers", "replay", "@", str(inputs["teachers"]), "--states", str(inputs["states"]), *args]


def pairs(inputs: dict[str, Path], *args: str) -> list[str]:
    return ["pairs", "--journal", str(inputs["journal"]), "--states", str(inputs["states"]), *args]


def ingest(inputs: dict[str, Path], *args: str) -> list[str]:
    return ["traces", "ingest", "--paths", str(FIX / "swe_gym.jsonl"), *args]


def out(inputs: dict[str, Path]) -> str:
    return str(inputs["tmp"] / "out")


def one_error_line(capsys: pytest.CaptureFixture[str], command: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) >= 1 and err[0].startswith(f"crf-prime {command}: error: "), err
    return "\n".join(err)


@pytest.mark.parametrize(
    ("build", "flag", "value"),
    [
        (replay, "--budget.job-usd", "-1"),
        (replay, "--budget.per-trace-usd", "-1"),
        (replay, "--pool.window", "-1"),
        (replay, "--pool.window", "0"),
        (replay, "--pool.votes.text-similarity", "1.5"),
        (pairs, "--votes.threshold", "-1"),
        (pairs, "--votes.min-support", "0"),
        (pairs, "--votes.min-teachers", "0"),
        (pairs, "--filters.max-prompt-chars", "0"),
        (ingest, "--max-observation-chars", "-5"),
        (ingest, "--max-context-chars", "-1"),
        (ingest, "--progress-every", "0"),
    ],
)
def test_numbers_are_checked_before_any_work(inputs, capsys, build, flag: str, value: str) -> None:
    argv = build(inputs, "--out", out(inputs), flag, value)
    command = " ".join(argv[:2]) if argv[0] != "pairs" else "pairs"
    assert main(argv) == 2
    err = one_error_line(capsys, command)
    assert flag.split(".")[-1] in err and value in err
    assert not (inputs["tmp"] / "out").exists()


def test_replay_with_the_teacher_server_down_is_an_infrastructure_failure(inputs, capsys) -> None:
    assert main(replay(inputs, "--out", out(inputs))) == 4
    err = one_error_line(capsys, "teachers replay")
    assert "all 4 teacher calls failed (connection: 4)" in err and "is the teacher server up?" in err


def test_empty_inputs_produce_nothing_and_say_so(inputs, capsys) -> None:
    inputs["states"].write_text("")
    assert main(replay(inputs, "--out", out(inputs))) == 5
    assert f"states: {inputs['states']} has no states" in one_error_line(capsys, "teachers replay")
    empty = inputs["tmp"] / "empty"
    empty.mkdir()
    assert main(["traces", "ingest", "--paths", str(empty), "--out", str(inputs["tmp"] / "s.jsonl")]) == 5
    assert "no *.jsonl / *.json file" in one_error_line(capsys, "traces ingest")
    assert not (inputs["tmp"] / "s.jsonl").exists() and not (inputs["tmp"] / "out").exists()


def test_a_forced_wrong_format_gives_no_states_and_exit_5(inputs, capsys) -> None:
    target = inputs["tmp"] / "s.jsonl"
    argv = ["traces", "ingest", "--paths", str(FIX / "claude_code_session.jsonl"), "--format", "swe-gym"]
    assert main([*argv, "--out", str(target)]) == 5
    assert "0 states from 1 file(s) read as swe-gym: 1" in one_error_line(capsys, "traces ingest")
    assert not target.exists()


def test_a_journal_of_other_states_gives_no_pairs_and_exit_5(inputs, capsys) -> None:
    inputs["journal"].write_text(
        JournalRecord(
            state_id="elsewhere", teacher="a", model="m", model_family="", ok=True, action=Action(text="hi"),
            input_tokens=1, output_tokens=1, cost_usd=0.0, latency_s=0.1, attempt=1, ts=0.0,
        ).model_dump_json() + "\n"
    )  # fmt: skip
    target = inputs["tmp"] / "pairs.jsonl"
    assert main(pairs(inputs, "--out", str(target))) == 5
    assert "no state of" in one_error_line(capsys, "pairs") and not target.exists()


def test_hints_given_a_directory_is_one_line_of_bad_input(inputs, capsys) -> None:
    assert main(["hints", "--traces", str(inputs["tmp"])]) == 2
    assert one_error_line(capsys, "hints") == (
        f"crf-prime hints: error: traces: {inputs['tmp']} is a directory; give its traces.jsonl"
    )


@pytest.mark.parametrize(
    ("build", "out_kind"),
    [(replay, "directory"), (pairs, "file"), (ingest, "file")],
)
def test_out_is_a_file_or_a_directory_as_each_command_says(inputs, capsys, build, out_kind: str) -> None:
    wrong = inputs["tmp"] / "wrong"
    if out_kind == "directory":
        wrong.write_text("keep me")
    else:
        wrong.mkdir()
    inputs["journal"].write_text("")
    argv = build(inputs, "--out", str(wrong))
    assert main(argv) == 2
    command = " ".join(argv[:2]) if argv[0] != "pairs" else "pairs"
    assert one_error_line(capsys, command).endswith(
        f"out: {wrong} is {'a file' if out_kind == 'directory' else 'a directory'}; this output is a {out_kind}"
    )
    assert (wrong.read_text() == "keep me") if out_kind == "directory" else not list(wrong.iterdir())


def test_hints_out_must_be_a_file(inputs, capsys) -> None:
    assert main(["hints", "--traces", str(inputs["traces"]), "--out", str(inputs["tmp"])]) == 2
    assert one_error_line(capsys, "hints").endswith(f"out: {inputs['tmp']} is a directory; this output is a file")


def test_replay_stopped_by_the_job_budget_exits_3_and_keeps_what_it_paid_for(inputs, capsys) -> None:
    from crf_prime.loopback import LoopbackOpenAI, Reply
    from crf_prime.records import read_journal

    inputs["states"].write_text("".join(state(i).model_dump_json() + "\n" for i in range(5)))
    with LoopbackOpenAI(lambda body: Reply(content="ls", cost=0.01)) as server:
        inputs["teachers"].write_text(
            f'[[teachers]]\nname = "a"\nmodel = "m"\nbase_url = "{server.base_url}"\napi_key_var = ""\n'
            "max_concurrency = 1\nprice_out_per_mtok = 100.0\n[teachers.sampling]\nmax_tokens = 100\n"
        )  # every call reserves exactly $0.01
        argv = replay(inputs, "--out", out(inputs), "--budget.job-usd", "0.025", "--pool.window", "1")
        assert main(argv) == 3
    err = one_error_line(capsys, "teachers replay")
    assert "spend cap reached: job budget reached: spent $0.0200 of $0.0250" in err
    assert len(server.requests) == 2 and len(list(read_journal(inputs["tmp"] / "out" / "journal.jsonl"))) == 2
