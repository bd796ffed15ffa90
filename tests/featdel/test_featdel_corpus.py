"""``crf-prime featdel corpus`` end to end on tiny local projects: Ray tasks, failures with reasons, resume,
duplicate removal, the split by project, the dataset card, the taskset loading a split, the DatasetDict export."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from corpus_support import GAMMA, GAMMA_TESTS, project, renamed, write

from crf_prime.cli import main
from crf_prime.featdel.corpus import read_sources, scratch_parent
from crf_prime.featdel.corpus_build import export_hf, load_split, split_projects
from crf_prime.featdel.corpus_meta import TaskMeta
from crf_prime.featdel.generate import load_tasks
from crf_prime.featdel.models import FeatdelTask

SUITE_SLEEPING = "suite-sleeping"
"""Marker the force-cancel tests' conftest leaves in its tree before sleeping through the time limit."""


def _holds(tree: Path, name: str) -> bool:
    """Whether a file ``name`` is somewhere under ``tree`` (a tree removed while it is read holds nothing)."""
    try:
        return next(tree.rglob(name), None) is not None
    except OSError:
        return False


def _sources(tmp_path: Path) -> Path:
    project(tmp_path / "src" / "alpha", "alpha")
    beta = project(
        tmp_path / "src" / "beta", "beta", lib=renamed((tmp_path / "src/alpha/alpha/__init__.py").read_text())
    )
    (beta / "tests/test_beta.py").write_text(renamed((beta / "tests/test_beta.py").read_text()))
    project(tmp_path / "src" / "gamma", "gamma", lib=GAMMA, tests=GAMMA_TESTS, license="Apache-2.0")
    write(
        tmp_path / "src" / "empty", {"empty/__init__.py": "def f():\n    return 1\n", "tests/test_none.py": "X = 1\n"}
    )
    sources = tmp_path / "sources.txt"
    sources.write_text("# tiny projects\nsrc/alpha\nsrc/gamma  # numbers\n\nsrc/beta\nsrc/empty\n")
    return sources


@pytest.mark.ray
@pytest.mark.bwrap
def test_a_package_whose_turn_ended_continues_once_every_package_has_started(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One CPU, two packages, turns that end at once: alpha's turn ends before its first mutation score (gamma
    waits), gamma runs to its end (nobody waits), then alpha continues and runs to its end; the corpus holds the same
    tasks as a run where each package runs in one go."""
    pytest.importorskip("ray")
    project(tmp_path / "src" / "alpha", "alpha")
    project(tmp_path / "src" / "gamma", "gamma", lib=GAMMA, tests=GAMMA_TESTS)
    (tmp_path / "sources.txt").write_text("src/alpha\nsrc/gamma\n")
    args = ["featdel", "corpus", "--sources", str(tmp_path / "sources.txt"), "--num-cpus", "1"]
    args += ["--max-tasks", "20", "--granularities", "block", "--eval-fraction", "0"]
    assert main([*args, "--out", str(tmp_path / "turns"), "--turn-s", "1e-9"]) == 0
    err = capsys.readouterr().err
    lines = [x.split("] ", 1)[1] for x in err.splitlines() if x.startswith("featdel corpus: [")]
    assert [x.split("-", 1)[0] for x in lines] == ["alpha", "gamma", "alpha"]
    assert "0 tasks in " in lines[0] and "its turn is over (others wait)" in lines[0]
    rows = json.loads((tmp_path / "turns" / "summary.json").read_text())["packages"]
    assert [(r["status"], r["turns"]) for r in rows.values()] == [("done", 2), ("done", 1)]
    assert main([*args, "--out", str(tmp_path / "one-go"), "--turn-s", "0"]) == 0
    one_go = json.loads((tmp_path / "one-go" / "summary.json").read_text())["packages"]
    assert [(r["status"], r["turns"]) for r in one_go.values()] == [("done", 1), ("done", 1)]
    assert [t.task_id for t in load_tasks(tmp_path / "turns")] == [t.task_id for t in load_tasks(tmp_path / "one-go")]
    assert [r["tasks"] for r in rows.values()] == [3, 1]  # as in test_corpus_end_to_end


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.bwrap
def test_corpus_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("ray")
    sources = _sources(tmp_path)
    out = tmp_path / "corpus"
    args = ["featdel", "corpus", "--sources", str(sources), "--out", str(out), "--num-cpus", "1"]
    args += ["--max-tasks", "20", "--granularities", "block", "--eval-fraction", "0.3"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "[4/4 packages" in err and "empty-" in err and "FAILED" in err

    summary = json.loads((out / "summary.json").read_text())
    rows = {Path(r["spec"]).name: r for r in summary["packages"].values()}
    assert rows["empty"]["status"] == "failed"
    assert "pytest exit 5: no tests collected" in rows["empty"]["reason"]
    assert (rows["alpha"]["license"], rows["gamma"]["license"]) == ("MIT", "Apache-2.0")
    # beta is alpha under other names: every one of its tasks is an exact or near duplicate of one of alpha's
    assert rows["beta"]["tasks"] == rows["alpha"]["tasks"] > 0 and rows["beta"]["kept"] == 0
    dups = [json.loads(x) for x in (out / "duplicates.jsonl").read_text().splitlines()]
    assert len(dups) == rows["beta"]["tasks"]
    assert {d["kind"] for d in dups} == {"exact", "near"}
    assert all(d["task_id"].startswith("beta-") and d["duplicate_of"].startswith("alpha-") for d in dups)

    tasks = load_tasks(out)
    metas = [TaskMeta.model_validate_json(x) for x in (out / "index.jsonl").read_text().splitlines()]
    assert [m.task_id for m in metas] == [t.task_id for t in tasks]
    assert summary["tasks"] == len(tasks) == rows["alpha"]["kept"] + rows["gamma"]["kept"]
    assert {m.granularity for m in metas} == {"block"}
    assert (rows["alpha"]["tasks"], rows["gamma"]["tasks"]) == (3, 1)  # clamp's two ifs, tally's loop; digits' loop
    splits = {m.project: m.split for m in metas}
    assert sorted(splits.values()) == ["eval", "train"]  # two projects, one on each side, none on both
    assert summary["splits"] == {s: sum(m.split == s for m in metas) for s in ("train", "eval")}
    for m in metas:
        assert m.deleted_lines >= 2 and m.deleted_statements >= 2 and m.target_tests >= 1 and m.cyclomatic >= 1
    digits = next(m for m in metas if m.project == "gamma")
    assert digits.task_id == "gamma-local__block__gamma.digits.L7"
    assert (digits.deleted_lines, digits.deleted_statements, digits.cyclomatic, digits.target_tests) == (2, 2, 1, 1)
    assert digits.callers == 0
    for t in tasks:
        assert (out / t.base_archive).is_file()
        if t.replay:
            assert (out / t.replay.calls_file).is_file()
    card = (out / "README.md").read_text()
    assert "| package | licence | split | tasks |" in card and "| MIT |" in card and "Apache-2.0" in card
    assert "failed: " in card
    # the grader's mutation rate: in every row, per granularity and per package in the summary and the card
    assert all(m.mutation is not None and m.mutation.rate is not None and m.mutation.rate >= 0.95 for m in metas)
    assert set(summary["mutation_by_granularity"]) == {"block"} and summary["mutation"]["tasks"] == len(metas)
    assert {summary["packages"][k]["spec"] for k in summary["mutation_by_package"]} == {
        rows["alpha"]["spec"],
        rows["gamma"]["spec"],
    }
    assert "## The grader's strength (mutation rate)" in card and "| block | 4 | 100% | 100% |" in card

    eval_rows = load_split(out, "eval")
    assert {t.source.name for t in eval_rows} == {p for p, s in splits.items() if s == "eval"}

    # the feature-deletion taskset loads a corpus directory and one split
    from feature_deletion.taskset import FeatureDeletionConfig, FeatureDeletionTaskset

    for split in ("train", "eval"):
        taskset = FeatureDeletionTaskset(FeatureDeletionConfig(id="feature-deletion", tasks=out, corpus_split=split))
        assert [t.key for t in taskset.load()] == [t.task_id for t in load_split(out, split)]
    assert len(FeatureDeletionTaskset(FeatureDeletionConfig(id="feature-deletion", tasks=out)).load()) == len(tasks)

    if importlib.util.find_spec("datasets") is not None:  # the hf extra
        dd = export_hf(out)
        assert {k: len(v) for k, v in dd.items()} == summary["splits"]
        row = dd["eval"][0]
        assert FeatdelTask.model_validate_json(row["task"]).task_id == row["task_id"] == eval_rows[0].task_id
        assert (out / "hf" / "dataset_dict.json").is_file()

    # resumed: nothing is redone (no Ray either), the failure keeps its reason, the corpus is the same
    before = {p: (p / "status.json").stat().st_mtime_ns for p in (out / "packages").iterdir()}
    assert main(args) == 0
    err = capsys.readouterr().err
    assert err.count("(resumed)") == 4
    assert {p: (p / "status.json").stat().st_mtime_ns for p in (out / "packages").iterdir()} == before
    assert [t.task_id for t in load_tasks(out)] == [t.task_id for t in tasks]


def test_split_projects_is_by_project_and_stable() -> None:
    counts = {"a": 10, "b": 30, "c": 5, "d": 55}
    split = split_projects(counts, 0.2)
    assert split == split_projects(dict(reversed(counts.items())), 0.2)
    held = sum(n for p, n in counts.items() if split[p] == "eval")
    assert held >= 20 and "train" in split.values()
    assert split_projects({"only": 9}, 0.5) == {"only": "train"}
    assert set(split_projects(counts, 0.0).values()) == {"train"}


def test_bad_sources_lines_name_the_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sources = tmp_path / "sources.txt"
    (tmp_path / "pkg").mkdir()
    cases = {
        "pkg\npypi:toolz\n": "sources.txt:2: source 'pypi:toolz': expected 'pypi:NAME==VERSION'",
        "pkg\n\nnowhere\n": "sources.txt:3: 'nowhere' is neither 'pypi:NAME==VERSION' nor a directory",
        "pypi:toolz==1.2.0\npkg\npypi:toolz==1.2.0\n": "sources.txt:3: 'pypi:toolz==1.2.0' repeats line 1",
        "# nothing\n": "sources.txt:1: no source listed",
        "pkg --skip x\n": "sources.txt:1: '--skip': a line is SOURCE [--deselect NODEID] [--extra-requirement REQ]",
        "pkg\npkg2 --deselect\n": "sources.txt:2: '--deselect': a line is SOURCE",
        "pkg 'unclosed\n": "sources.txt:1: No closing quotation",
    }
    for text, message in cases.items():
        sources.write_text(text)
        assert main(["featdel", "corpus", "--sources", str(sources), "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("crf-prime featdel corpus: error: ") and message in err, err
    assert not (tmp_path / "o").exists()
    sources.write_text("pkg\n")
    for out in (sources, tmp_path):  # a file; a directory that holds other things
        assert main(["featdel", "corpus", "--sources", str(sources), "--out", str(out)]) == 2
        assert "error: out: " in capsys.readouterr().err
    assert main(["featdel", "corpus", "--sources", str(sources), "--out", "o", "--max-tasks", "0"]) == 2
    assert "--max-tasks: Input should be greater than or equal to 1" in capsys.readouterr().err
    sources.write_text("pkg --deselect 'tests/t.py::test_a[x y]' --extra-requirement hypothesis  # why\n")
    (line,) = read_sources(sources)
    assert (line.spec, line.line) == (str((tmp_path / "pkg").resolve()), 1)
    assert (line.deselect, line.extra_requirements) == (("tests/t.py::test_a[x y]",), ("hypothesis",))


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.bwrap
@pytest.mark.parametrize(
    ("setup_flag", "stage", "reason"),
    [
        ("--auto-setup", "setup", "still setting up at the time limit"),
        ("--no-auto-setup", "gen", "still setting up at the time limit"),
        ("--no-auto-setup", "grade", "still running 120 s after the time limit"),
    ],
)
def test_a_force_cancelled_package_leaves_no_temporary_tree(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, setup_flag: str, stage: str, reason: str
) -> None:
    """A package still in its setup loop or its coverage run at the time limit is force-cancelled then (it has no
    task to keep), one already validating when the grace after it is over too (its worker killed, so its own
    ``finally`` never runs); the corpus's temporary root, where its trees were, is removed by the driver. A package
    queued behind it (one CPU) is cancelled at the limit as not started.

    The time limit is reached by an event, not by the clock: the driver's ``ray.wait`` returns nothing ready once the
    package's suite has started sleeping in the stage's tree (its conftest leaves a marker), as it would at the
    limit and after the grace; the limit itself only bounds a test that never gets there."""
    ray = pytest.importorskip("ray")
    tmpdir = Path(tempfile.mkdtemp(prefix="crf-t-", dir="/tmp"))  # short: Ray puts its sockets under $TMPDIR too
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    monkeypatch.setattr(tempfile, "tempdir", None)
    slow = project(tmp_path / "src" / "slow", "slow")
    conftest = (
        "import contextlib, pathlib, time\n\nif STAGE in __file__:\n    with contextlib.suppress(OSError):\n"
        "        pathlib.Path(__file__).with_name(MARK).touch()\n    time.sleep(300)\n"
    )
    only = "" if stage != "grade" else "crf-featdel-grade-"  # the grading trees of validation only (read-only)
    conftest = conftest.replace("MARK", repr(SUITE_SLEEPING)).replace("STAGE", repr(only))
    write(slow, {"tests/conftest.py": conftest})  # outlives any time limit
    # a second package queued behind it (one CPU): never started, and said so
    project(tmp_path / "src" / "queued", "queued")
    (tmp_path / "sources.txt").write_text("src/slow\nsrc/queued\n")
    seen: set[str] = set()
    stop, sleeping = threading.Event(), threading.Event()

    def watch() -> None:  # the package's trees really were made under the corpus's root while it ran
        while not stop.is_set():
            made = [*tmpdir.glob("crf-featdel-*"), *tmpdir.glob("crf-corpus-tmp-*/crf-featdel-*")]
            seen.update(p.name.split("-", 3)[2] for p in made)
            if any(_holds(p, SUITE_SLEEPING) for p in made if p.name.split("-", 3)[2] == stage):
                sleeping.set()
            if stage == "grade" and stage in seen:  # a grading tree: its suite sleeps where it cannot leave a mark
                sleeping.set()
            stop.wait(0.2)

    real_wait = ray.wait

    def wait_until_the_suite_sleeps(refs: list, *, num_returns: int = 1, timeout: float | None = None) -> tuple:
        sleeping.wait(timeout)
        return real_wait(refs, num_returns=num_returns, timeout=0)

    monkeypatch.setattr(ray, "wait", wait_until_the_suite_sleeps)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        args = ["featdel", "corpus", "--sources", str(tmp_path / "sources.txt"), "--out", str(tmp_path / "corpus")]
        code = main([*args, "--num-cpus", "1", "--time-limit-s", "300", setup_flag])
    finally:
        stop.set()
        watcher.join()
        leftovers = sorted(p.name for p in tmpdir.iterdir() if p.name.startswith(("crf-featdel-", "crf-corpus-")))
        shutil.rmtree(tmpdir, ignore_errors=True)
    assert sleeping.is_set(), f"the {stage} stage's suite never started under the corpus's root (seen: {seen})"
    assert code == 5 and stage in seen  # nothing produced; the stage's workspace was under the root
    summary = json.loads((tmp_path / "corpus" / "summary.json").read_text())
    assert [(r["status"], r["reason"]) for r in summary["packages"].values()] == [
        ("cancelled", reason),
        ("cancelled", "not started before the time limit"),
    ]
    assert leftovers == []


def test_the_trees_go_to_a_ram_file_system_with_room(tmp_path: Path) -> None:
    """The run's temporary trees go to the RAM file system when it is there with room and ``TMPDIR`` names no other
    place; else to the system's temporary directory (None)."""
    ram = tmp_path / "shm"
    ram.mkdir()
    stat = os.statvfs(ram)
    free = stat.f_bavail * stat.f_frsize
    assert scratch_parent(ram, min_free=1, environ={}) == str(ram)
    assert scratch_parent(ram, min_free=free + (1 << 40), environ={}) is None  # no room
    assert scratch_parent(ram, min_free=1, environ={"TMPDIR": str(tmp_path)}) is None  # the user's choice
    assert scratch_parent(tmp_path / "absent", min_free=1, environ={}) is None
    ram.chmod(0o500)
    try:
        assert scratch_parent(ram, min_free=1, environ={}) is (None if os.geteuid() else str(ram))  # root writes
    finally:
        ram.chmod(0o700)
