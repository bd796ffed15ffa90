"""A time limit stops validation, not the work already done: ``featdel generate --time-limit-s`` writes the tasks
validated before it, and a corpus package stopped by the corpus's limit keeps them (status ``partial``) and runs
again when the corpus is resumed.

The limit is reached by an event, not by the clock: generate's clock jumps past the limit when the first candidate
has been through a stage, as it would if that stage had taken the whole limit; batches are one candidate each."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from corpus_support import project

from crf_prime.cli import main
from crf_prime.featdel import generate as generate_module
from crf_prime.featdel.corpus import (
    STARTED,
    CorpusConfig,
    Queue,
    _Progress,
    build_package,
    next_package,
    package_settings,
    read_sources,
    resumable,
    turn_rate,
    write_board,
)
from crf_prime.featdel.corpus_build import assemble
from crf_prime.featdel.generate import TURN_BATCH, GenerateConfig, batch_len, finish_pays, generate, load_tasks
from crf_prime.featdel.models import GenerateSummary, PackageStatus, SourceInfo, SourceLine

pytestmark = pytest.mark.bwrap


def _limit_reached_after_the_first(monkeypatch: pytest.MonkeyPatch, stage: str, limit: float) -> list[str]:
    """Batches of one candidate; generate's clock moves ``limit`` seconds on once the first candidate has been through
    ``stage``: "record" or "grade" (the batch's recording or grading runs took the whole limit) or "verify" (its
    mutation score ended just before the limit: the clock moves after the one reading that follows). Returns the
    stages' calls."""
    calls: list[str] = []
    offset = [0.0]
    armed = [False]

    def at_the_limit_after(name: str, real):
        def wrapped(*args, **kwargs):
            try:
                return real(*args, **kwargs)
            finally:
                calls.append(name)
                if name == stage and stage in ("record", "grade"):  # the runs took the whole limit
                    offset[0] = limit
                elif name == stage:  # verified just before the limit: it passes once the result is in
                    armed[0] = True

        return wrapped

    def clock() -> float:
        now = time.perf_counter() + offset[0]
        if armed[0]:
            armed[0], offset[0] = False, limit
        return now

    for name, attr in (("grade", "validate_batch"), ("record", "_with_replay"), ("verify", "check_mutants")):
        monkeypatch.setattr(generate_module, attr, at_the_limit_after(name, getattr(generate_module, attr)))
    monkeypatch.setattr(generate_module, "SHARED_BATCH", 1)
    fake = SimpleNamespace(perf_counter=clock, monotonic=time.monotonic)
    monkeypatch.setattr(generate_module, "time", fake)  # the sandbox's own deadline stays on the real clock
    return calls


def test_generate_writes_the_tasks_validated_before_its_time_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    src = project(tmp_path / "src" / "alpha", "alpha")
    calls = _limit_reached_after_the_first(monkeypatch, "verify", limit=1000.0)
    out = tmp_path / "out"
    args = ["featdel", "generate", "--source", str(src), "--out", str(out), "--workers", "1", "--max-tasks", "10"]
    assert main([*args, "--time-limit-s", "1000"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert calls == ["record", "grade", "verify"] and summary["checked"] == 1  # no candidate after the limit
    assert summary["candidates"] > 1 and summary["time_limit_reached"] is True
    assert summary["valid"] == len(load_tasks(out)) == 1  # the first candidate (alpha's are all valid) is kept
    assert f"wrote 1 tasks to {out / 'tasks.jsonl'} (stopped at --time-limit-s 1000 with candidates left)" in (
        capsys.readouterr().out
    )
    # the limit reached while a batch is recorded or graded: its grading runs (after a recording) and mutation
    # scores are not started, its candidates not checked
    for stage, ran in (("record", ["record"]), ("grade", ["record", "grade"])):
        monkeypatch.undo()
        calls = _limit_reached_after_the_first(monkeypatch, stage, limit=1000.0)
        assert main([*args, "--time-limit-s", "1000"]) == 5
        assert calls == ran
        assert "no valid task among 0 checked candidates of " in (err := capsys.readouterr().err)
        assert err.rstrip().endswith("(stopped at --time-limit-s 1000)")
    # without a limit the same run checks every candidate
    monkeypatch.undo()
    assert main([*args, "--seed", "0"]) == 0
    assert json.loads((out / "summary.json").read_text())["time_limit_reached"] is False


def test_a_package_stopped_by_the_corpus_time_limit_keeps_its_tasks_and_runs_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project(tmp_path / "src" / "alpha", "alpha")
    (tmp_path / "sources.txt").write_text("src/alpha\n")
    line = read_sources(tmp_path / "sources.txt")[0]
    config = CorpusConfig(sources=tmp_path / "sources.txt", out=tmp_path / "corpus", max_tasks=10, time_limit_s=1000)
    settings = package_settings(config, line)
    pkg = config.out / "packages" / line.slug

    # queued past the limit: nothing starts, nothing is written
    late = PackageStatus.model_validate(build_package(line.spec, str(pkg), settings, 1, stop_at=time.time() - 1))
    assert (late.status, late.tasks) == ("cancelled", 0) and not (pkg / "status.json").exists()

    calls = _limit_reached_after_the_first(monkeypatch, "verify", limit=2000.0)
    st = PackageStatus.model_validate(build_package(line.spec, str(pkg), settings, 1, stop_at=time.time() + 1000))
    assert calls == ["record", "grade", "verify"] and (st.status, st.tasks) == ("partial", 1)
    assert PackageStatus.model_validate_json((pkg / "status.json").read_text()) == st
    summary = assemble(config.out, [line], {line.slug: st}, eval_fraction=0.0)
    assert (summary.tasks, summary.packages_partial, summary.packages_done) == (1, 1, 0)
    assert [t.task_id for t in load_tasks(config.out)] == [t.task_id for t in load_tasks(pkg / "tasks")]
    assert "| partial (time limit) |" in (config.out / "README.md").read_text()
    # a resumed corpus runs it again, like a package that never finished; a finished or failed one is kept
    key = st.settings
    assert not resumable(st, line.spec, key, retry_failed=False)
    assert resumable(st.model_copy(update={"status": "done"}), line.spec, key, retry_failed=False)
    failed = st.model_copy(update={"status": "failed"})
    assert resumable(failed, line.spec, key, retry_failed=False)
    assert not resumable(failed, line.spec, key, retry_failed=True)
    assert not resumable(st.model_copy(update={"status": "done"}), line.spec, "other settings", retry_failed=False)
    assert not resumable(None, line.spec, key, retry_failed=False)


def test_a_run_in_flight_at_the_limit_is_stopped_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every grading run of validation sleeps (its conftest, only in grading trees): the limit stops the one in
    flight, the batch is left unchecked, and generate ends minutes before the run would have."""
    src = project(tmp_path / "src" / "alpha", "alpha")
    sleep = "import time\n\nif 'crf-featdel-grade-' in __file__:\n    time.sleep(300)\n"
    (src / "tests" / "conftest.py").write_text(sleep)
    out = tmp_path / "out"
    args = ["featdel", "generate", "--source", str(src), "--out", str(out), "--workers", "1"]
    start = time.monotonic()
    assert main([*args, "--time-limit-s", "20"]) == 5  # no task: the only grading run never ended by itself
    assert time.monotonic() - start < 120
    err = capsys.readouterr().err
    assert "no valid task among 0 checked candidates of " in err and "(stopped at --time-limit-s 20)" in err


def test_a_turn_ends_only_while_others_wait(tmp_path: Path) -> None:
    """``turn_s``: a package with a task stops after its turn while a peer has not started, one without a task after
    three turns; with every peer started it goes on."""
    me, peer = tmp_path / "me", tmp_path / "peer"
    me.mkdir()
    queue = Queue(run="run-1", peers=(str(me), str(peer)), turn_s=60.0)
    (me / STARTED).write_text("run-1")
    judge = queue.keep_going
    assert queue.waiting() == 1
    assert judge(1, 59.9) is True and judge(1, 60.0) is False  # a task: one turn
    assert judge(0, 179.9) is True and judge(0, 180.0) is False  # no task yet: three
    peer.mkdir()
    (peer / STARTED).write_text("run-0")  # an earlier run's marker: still waiting in this one
    assert judge(1, 60.0) is False
    assert queue.left_s(1, 20.0) == 40.0 and queue.left_s(0, 20.0) == 160.0 and queue.left_s(1, 70.0) == -10.0
    (peer / STARTED).write_text("run-1")
    assert queue.waiting() == 0 and judge(1, 600.0) is True and judge(0, 600.0) is True  # nobody waits
    assert queue.left_s(1, 20.0) is None
    # every package started: a package queued for a continuation that made tasks faster than this turn waits too
    board = tmp_path / "queue.json"
    queue = queue.model_copy(update={"board": str(board)})
    judge = queue.keep_going
    assert queue.queued_rate() is None and queue.left_s(1, 20.0) is None  # no board yet
    again = [SourceLine(spec="pypi:a==1", slug="a", line=1), SourceLine(spec="pypi:b==1", slug="b", line=2)]
    write_board(board, "run-1", again, {"a": 0.1, "b": 0.05})
    assert queue.queued_rate() == 0.1
    assert queue.left_s(1, 20.0) == 40.0 and judge(1, 60.0) is False  # 0.05 tasks/s < 0.1
    assert queue.left_s(0, 20.0) == 160.0
    assert queue.left_s(3, 20.0) is None and judge(3, 20.0) is True  # 0.15 >= 0.1: nobody faster waits
    assert judge(3, 600.0) is False  # 0.005 < 0.1 past the turn
    write_board(board, "run-1", [], {})
    assert queue.queued_rate() is None and queue.left_s(0, 600.0) is None
    write_board(board, "run-0", again, {"a": 0.1, "b": 0.05})  # an earlier run's board
    assert queue.queued_rate() is None


def test_a_batch_fits_what_is_left_of_the_turn() -> None:
    """The first batch of a turn with an end is ``TURN_BATCH``; later ones as many candidates as fit in the time left
    at the recording, grading and verification seconds per candidate measured so far; never fewer than the workers
    (none when not one fits: the turn ends), never more than the default."""
    assert TURN_BATCH == 4
    assert batch_len(16, 1, None, 0.0, 0) == 16  # no end in sight
    assert batch_len(16, 1, 50.0, 0.0, 0) == 4  # nothing measured yet
    assert batch_len(3, 1, 50.0, 0.0, 0) == 3
    assert batch_len(16, 1, 50.0, 40.0, 4) == 5  # 10 s per candidate
    assert batch_len(16, 2, 50.0, 10.0, 4) == 16  # 20 fit
    assert batch_len(16, 2, 12.0, 40.0, 4) == 2  # one fits: one per worker
    assert batch_len(16, 2, 9.0, 40.0, 4) == 0  # not one fits


def _first_batch_then(left_after: float, queued: float | None = None) -> SimpleNamespace:
    """A turn with no end before the first task, then one ``left_after`` seconds from its end (negative: past it);
    ``queued``: the fastest queued package's tasks per second."""
    return SimpleNamespace(
        keep_going=lambda tasks, seconds: tasks == 0 or left_after > 0,
        left_s=lambda tasks, seconds: 1e9 if tasks == 0 else left_after,
        queued_rate=lambda: queued,
    )


def test_a_batch_is_verified_past_its_turn_s_end_for_as_long_as_it_took_to_grade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn ends (1 ms ago) once the first task of the first batch is verified. The batch's other candidates are
    graded and recorded: they are verified too (a finishing window of ``FINISH_SHARE`` times the batch's recording
    and grading seconds is more than 1 ms; set here to a million times, which no score outlasts even on a loaded
    machine), and no batch follows. With ``FINISH_SHARE`` 0 (the old way) they are left unchecked and that work is
    lost."""
    src = project(tmp_path / "src" / "alpha", "alpha")
    cfg = GenerateConfig(source=str(src), out=tmp_path / "finish", max_tasks=20, workers=1)
    monkeypatch.setattr(generate_module, "FINISH_SHARE", 1e6)  # a window no score outlasts on a loaded machine
    tasks, summary = generate(cfg, turn=_first_batch_then(-1e-3))
    assert len(tasks) == summary.checked == TURN_BATCH and summary.stopped_early
    monkeypatch.setattr(generate_module, "FINISH_SHARE", 0.0)
    tasks, summary = generate(cfg.model_copy(update={"out": tmp_path / "stop"}), turn=_first_batch_then(-1e-3))
    assert len(tasks) == summary.checked == 1 and summary.stopped_early


def test_finishing_a_batch_past_the_turn_pays_only_at_the_queued_pace() -> None:
    """``finish_pays``: always without a task, or with nobody queued; else the batch's verification, counting the
    next candidate as a task, must keep the fastest queued package's pace (tasks per second)."""
    assert finish_pays(0, 0, 500.0, 1.0)  # no task yet: its first is what the corpus needs most
    assert finish_pays(3, 1, 500.0, None)  # nobody queued
    assert finish_pays(3, 1, 12.0, 1 / 6) and finish_pays(3, 0, 6.0, 1 / 6)  # 2 in 12 s, 1 in 6 s: the pace
    assert not finish_pays(3, 1, 12.1, 1 / 6) and not finish_pays(3, 0, 6.1, 1 / 6)
    assert not finish_pays(1, 1, 24.0, 10 / 60)  # croniter's 24 s a verified task against a queue at 10/min


def test_a_batch_past_its_turn_s_end_is_left_where_a_queued_package_makes_tasks_faster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn ends (1 ms ago) once the first task is verified, and a queued package made a task per microsecond:
    the batch's other candidates are left unchecked (the queue makes more with that time). A queue slower than the
    batch's verification (a task an hour) lets it finish (in a finishing window no score outlasts)."""
    monkeypatch.setattr(generate_module, "FINISH_SHARE", 1e6)
    src = project(tmp_path / "src" / "alpha", "alpha")
    cfg = GenerateConfig(source=str(src), out=tmp_path / "fast", max_tasks=20, workers=1)
    tasks, summary = generate(cfg, turn=_first_batch_then(-1e-3, queued=1e6))
    assert len(tasks) == summary.checked == 1 and summary.stopped_early
    slow = cfg.model_copy(update={"out": tmp_path / "slow"})
    tasks, summary = generate(slow, turn=_first_batch_then(-1e-3, queued=1 / 3600))
    assert len(tasks) == summary.checked == TURN_BATCH and summary.stopped_early


def test_a_mutation_score_is_stopped_at_the_end_of_its_turn_s_finishing_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the package's first task a mutation score has no end but the time limit; once it has one, each is
    given as its sandbox's deadline the turn's end plus twice ``FINISH_SHARE`` of the batch's recording and grading
    seconds (the finishing window, and as much again), and one still running there (here: it outlasts that deadline)
    is left unchecked, neither kept nor rejected, and the run says its turn stopped it. Without a turn nothing is
    cut."""
    src = project(tmp_path / "src" / "alpha", "alpha")
    real = generate_module.check_mutants
    deadlines: list[tuple[float | None, float]] = []

    def outlasting(task, task_dir, cfg, *, sandbox, env, warm=None):
        deadlines.append((sandbox.deadline, time.monotonic()))
        got = real(task, task_dir, cfg, sandbox=sandbox, env=env, warm=warm)
        while sandbox.deadline is not None and time.monotonic() < sandbox.deadline:  # work that lasts past it
            time.sleep(0.01)
        return got

    monkeypatch.setattr(generate_module, "check_mutants", outlasting)
    monkeypatch.setattr(generate_module, "FINISH_SHARE", 0.0)  # no window: the turn's end, 0.2 s after each start
    cfg = GenerateConfig(source=str(src), out=tmp_path / "cut", max_tasks=20, workers=1)
    tasks, summary = generate(cfg, turn=_first_batch_then(0.2))
    assert deadlines[0][0] is None  # the first task's score: no deadline (no time limit either)
    assert (
        len(deadlines) == TURN_BATCH
        and all(  # no second batch fits in 0.2 s
            d is not None and began + 0.15 <= d <= began + 0.25 for d, began in deadlines[1:]
        )
    )
    assert len(tasks) == summary.checked == 1 and not summary.rejected
    assert summary.stopped_early and not summary.time_limit_reached
    deadlines.clear()
    tasks, summary = generate(cfg.model_copy(update={"out": tmp_path / "whole"}), turn=None)
    assert [d for d, _ in deadlines] == [None] * summary.candidates and len(tasks) == summary.candidates


def test_a_turn_ends_before_a_batch_that_does_not_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """1 µs of the turn is left after the first batch: not one candidate fits, so no batch begins (its recording
    would be cut at the turn's end and lost); the turn ends with the first batch's tasks."""
    src = project(tmp_path / "src" / "alpha", "alpha")
    built: list[str] = []
    real = generate_module.build_task

    def counted(baseline, cand, *args, **kwargs):
        built.append(cand.key)
        return real(baseline, cand, *args, **kwargs)

    monkeypatch.setattr(generate_module, "build_task", counted)
    cfg = GenerateConfig(source=str(src), out=tmp_path / "fit", max_tasks=20, workers=1, mutants_per_task=0)
    tasks, summary = generate(cfg, turn=_first_batch_then(1e-6))
    assert summary.candidates > TURN_BATCH and len(built) == summary.checked == TURN_BATCH
    assert len(tasks) == TURN_BATCH and summary.stopped_early


def test_a_turn_with_others_waiting_validates_in_small_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the real ``generate`` (six candidates, ``TURN_BATCH`` set to 1): with a turn that has time left, the
    first batch is ``TURN_BATCH`` candidates and the next fits the measured rate into what is left (all five here);
    without a turn, one batch of all six."""
    src = project(tmp_path / "src" / "alpha", "alpha")
    sizes: list[int] = []
    real = generate_module.validate_batch

    def counted(tasks, *args, **kwargs):
        sizes.append(len(tasks))
        return real(tasks, *args, **kwargs)

    monkeypatch.setattr(generate_module, "validate_batch", counted)
    monkeypatch.setattr(generate_module, "TURN_BATCH", 1)
    cfg = GenerateConfig(source=str(src), out=tmp_path / "turn", max_tasks=20, workers=1, mutants_per_task=0)
    left = SimpleNamespace(
        keep_going=lambda tasks, seconds: True, left_s=lambda tasks, seconds: 1e9, queued_rate=lambda: None
    )
    _, summary = generate(cfg, turn=left)
    assert summary.candidates == 6 and sizes == [1, 5]
    sizes.clear()
    generate(cfg.model_copy(update={"out": tmp_path / "none"}), turn=None)
    assert sizes == [6]


def test_a_batch_still_grading_at_the_turns_end_is_stopped_there_and_left_unchecked(tmp_path: Path) -> None:
    """A batch's grading and recording runs stop at its turn's end (they cannot be stopped halfway otherwise): the
    batch is left unchecked, nothing is rejected for runs the turn cut short, the run says it stopped early, and a
    continuation without a turn makes the tasks a run in one go makes."""
    src = project(tmp_path / "src" / "alpha", "alpha")
    cfg = GenerateConfig(source=str(src), out=tmp_path / "cut", max_tasks=20, workers=1)
    ends = SimpleNamespace(
        keep_going=lambda tasks, seconds: True, left_s=lambda tasks, seconds: 1e-3, queued_rate=lambda: None
    )
    start = time.monotonic()
    tasks, summary = generate(cfg, turn=ends)
    assert tasks == [] and summary.checked == 0 and summary.rejections == ()
    assert summary.stopped_early is True and summary.time_limit_reached is False
    assert time.monotonic() - start < 60
    continued, after = generate(cfg, resume=True)
    one_go, _ = generate(cfg.model_copy(update={"out": tmp_path / "one-go"}))
    assert after.stopped_early is False and [t.task_id for t in continued] == [t.task_id for t in one_go]
    assert continued and after.checked == len(continued) + len(after.rejections)


def test_the_next_package_is_an_unstarted_one_then_the_fastest_turn(tmp_path: Path) -> None:
    """Every package gets a turn before any gets a second; then tasks per second of the turn's validation, the
    earliest queued of equals."""
    line = {n: SourceLine(spec=f"pypi:{n}==1", slug=n, line=i) for i, n in enumerate("abcde", 1)}
    rates = {"a": 0.1, "b": 0.15, "c": 0.0, "d": 0.15}
    unstarted, again = [line["e"]], [line["a"], line["b"], line["c"], line["d"]]
    order = [next_package(unstarted, again, rates).slug for _ in range(5)]
    assert order == ["e", "b", "d", "a", "c"] and not unstarted and not again
    # the rate of a turn: its tasks over generate's seconds of validation, not the setup's
    summary = GenerateSummary(
        source=SourceInfo(spec="pypi:a==1", name="a", version="1", sha256="0" * 64),
        suite_tests=3,
        functions=3,
        candidates=9,
        checked=4,
        valid=3,
        seconds={"venv": 40.0, "validate": 60.0, "total": 100.0},
    )
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "summary.json").write_text(summary.model_dump_json())
    st = PackageStatus(spec="pypi:a==1", status="partial", settings="k", tasks=3, seconds=130.0)
    assert turn_rate(tmp_path, st) == 3 / 60.0
    assert turn_rate(tmp_path / "absent", st) == 0.0


def test_a_package_whose_turn_ends_keeps_its_tasks_and_continues_where_it_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through ``build_package``: its turn ends once it has a task (a peer waits), inside its first batch of four:
    the other three candidates are graded and recorded but not verified (unchecked); it keeps the task it validated,
    its status is ``partial`` with the reason, and the corpus README says so. With nobody waiting, the next call
    continues it: the first task kept as it was, no candidate checked twice, and the same tasks as one run in one go."""
    project(tmp_path / "src" / "alpha", "alpha")
    (tmp_path / "sources.txt").write_text("src/alpha\n")
    line = read_sources(tmp_path / "sources.txt")[0]
    config = CorpusConfig(sources=tmp_path / "sources.txt", out=tmp_path / "corpus", max_tasks=10)
    settings = package_settings(config, line)
    pkg = config.out / "packages" / line.slug
    monkeypatch.setattr(generate_module, "SHARED_BATCH", 4)
    queue = Queue(run="r", peers=(str(pkg), str(tmp_path / "waiting")), turn_s=1e-9, no_task_turns=1e18)
    st = PackageStatus.model_validate(build_package(line.spec, str(pkg), settings, 1, queue=queue))
    assert (st.status, st.tasks) == ("partial", 1)
    assert st.reason.startswith("stopped early to make room for waiting packages: 1 tasks in ")
    assert (pkg / STARTED).read_text() == "r"
    progress = _Progress(1, 10)
    progress.package(line.slug, st, resumed=False)
    progress.close()
    err = capsys.readouterr().err
    assert "its turn ended while others waited, not continued at the time limit (it continues next time)" in err
    generated = json.loads((pkg / "tasks" / "summary.json").read_text())
    assert generated["stopped_early"] is True and generated["time_limit_reached"] is False
    assert generated["checked"] == 1 < generated["candidates"]
    summary = assemble(config.out, [line], {line.slug: st}, eval_fraction=0.0)
    assert "| partial (its turn ended while others waited) |" in (config.out / "README.md").read_text()
    assert summary.packages_partial == 1
    first = load_tasks(pkg / "tasks")
    # nobody waiting: the same package continues where it stopped and runs to the end
    done = PackageStatus.model_validate(
        build_package(line.spec, str(pkg), settings, 1, queue=queue.model_copy(update={"peers": (str(pkg),)}))
    )
    assert (done.status, done.reason, done.turns) == ("done", "", 2) and done.tasks > 1
    assert done.seconds > st.seconds  # both turns
    tasks = load_tasks(pkg / "tasks")
    assert tasks[0].model_dump() == first[0].model_dump()  # kept, not made again
    continued = json.loads((pkg / "tasks" / "summary.json").read_text())
    assert continued["continued"] == 1 and continued["stopped_early"] is False
    assert continued["candidates"] == generated["candidates"]
    assert continued["checked"] == len(tasks) + len(continued["rejections"])  # no candidate checked twice
    assert len({r["candidate"] for r in continued["rejections"]} | {t.task_id for t in tasks}) == continued["checked"]
    for t in tasks:  # every task's replay files are there
        assert t.replay is not None
        assert (pkg / "tasks" / t.replay.calls_file).is_file() and (pkg / "tasks" / t.replay.expected_file).is_file()
    one_go = PackageStatus.model_validate(build_package(line.spec, str(tmp_path / "one-go"), settings, 1))
    assert (one_go.status, one_go.turns) == ("done", 1)
    assert [t.task_id for t in load_tasks(tmp_path / "one-go" / "tasks")] == [t.task_id for t in tasks]


def test_a_task_whose_mutants_take_too_long_to_grade_is_rejected_as_such(tmp_path: Path) -> None:
    """``mutation_wall_s``: a mutation score past it is stopped there (its runs end at the budget) and the task is
    rejected as ``slow-mutants``, not kept with a score its stopped runs made up; within it the same task is kept."""
    src = project(tmp_path / "src" / "alpha", "alpha")
    cfg = GenerateConfig(source=str(src), out=tmp_path / "slow", max_tasks=1, workers=1, mutation_wall_s=1e-3)
    start = time.monotonic()
    tasks, summary = generate(cfg)
    assert tasks == [] and summary.checked >= 1 and time.monotonic() - start < 120
    slow = [r for r in summary.rejections if r.reason == "slow-mutants"]
    assert slow and {r.detail for r in slow} == {"grading gold's mutants took over 0.001 s (--mutation-wall-s)"}
    kept, _ = generate(cfg.model_copy(update={"out": tmp_path / "kept", "mutation_wall_s": 90.0}))
    assert [t.task_id for t in kept] == [slow[0].candidate]
    assert kept[0].mutation is not None and kept[0].mutation.rate == 1.0
