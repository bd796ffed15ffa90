"""``crf-prime featdel corpus``: Feature Deletion tasks from many packages at once, one Ray task per package.

Each package runs ``featdel generate`` into ``OUT/packages/<name>-<version>/tasks`` as a Ray task that declares
its CPU need; a package whose status file says it finished with the same settings is not redone, a failed one is
recorded with its reason and never stops the others. After the packages, the corpus is assembled from every finished
package (crf_prime/featdel/corpus_build.py): duplicates removed, train/eval split by project, ``tasks.jsonl`` +
``index.jsonl`` + ``bases/`` + ``replay/``, ``summary.json`` and a dataset card.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shlex
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, Field
from pydantic_config import BaseConfig

from crf_prime.errors import InfraError, InputError
from crf_prime.extras import MissingExtraError, require
from crf_prime.featdel.generate import GenerateConfig, generate, load_tasks
from crf_prime.featdel.granularity import GRANULARITIES
from crf_prime.featdel.models import (
    GenerateSummary,
    Granularity,
    PackageStatus,
    SetupConfig,
    SourceLine,
    SuiteSetup,
    VerifyConfig,
)
from crf_prime.featdel.source import (
    SourceError,
    _parse_pypi_spec,
    download_sdist,
    extract_archive,
    is_git_spec,
    license_of,
    parse_git_spec,
)
from crf_prime.featdel.suite_setup import set_up
from crf_prime.placement import GradingSandbox
from crf_prime.rayinit import init_ray


class CorpusConfig(SetupConfig, VerifyConfig, GradingSandbox, BaseConfig):
    """A corpus run. The sandbox settings (``limits`` of one validation run, ``unsandboxed``, ``bwrap``) are
    :class:`crf_prime.placement.GradingSandbox`'s, as in ``featdel generate``."""

    sources: Path
    """Text file, one source per line: ``pypi:NAME==VERSION``, ``git:PATH@REV``, ``git+URL@REV`` or a local
    directory (paths relative to the file); ``#`` starts a comment."""
    out: Path
    """Corpus directory (created; an existing one is resumed)."""
    ray_address: str | None = None
    """Ray cluster to run on (``auto``, ``ray://HOST:PORT``); default: a local Ray started for this run."""
    num_cpus: Annotated[int, Field(ge=1)] | None = None
    """CPUs of the local Ray (default: all cores); ignored with ``ray_address``."""
    cpus_per_package: Annotated[float, Field(gt=0)] = 1.0
    """CPUs each package's Ray task declares (its validations run ``ceil`` of this many in parallel)."""
    max_tasks: Annotated[int, Field(ge=1)] = 60
    """Validated tasks to keep per package."""
    granularities: Annotated[list[Granularity], Field(min_length=1)] = list(GRANULARITIES)
    """What tasks may delete (see docs/feature_deletion.md)."""
    seed: int = 0
    """Seed of the candidate sampling (per package) and of nothing else: the split is by project name."""
    eval_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.1
    """Share of tasks (rounded up to whole projects) that goes to the ``eval`` split."""
    replay_search: Annotated[float, Field(ge=1)] = 1.0
    """Per package, validate up to this many times ``max_tasks`` candidates preferring tasks the call replay covers
    (``featdel generate`` hunts with 2.0; a corpus spends that time on more packages)."""
    time_limit_s: Annotated[float, Field(gt=0)] | None = None
    """Stop after this many seconds: a package still validating starts no new candidate, finishes the grading runs
    in flight and keeps the tasks it validated (status ``partial``); one not started yet does not start. The corpus is
    assembled from what finished; partial and unstarted packages run again when it is resumed. None = run every
    package to the end."""
    grace_s: Annotated[float, Field(ge=0)] = 120.0
    """After ``time_limit_s``, how long validating packages get to stop the runs in flight and write their tasks;
    what still runs then is cancelled (its work is lost). A package still setting up is cancelled at the limit."""
    retry_failed: bool = False
    """Retry packages that failed in an earlier run (finished ones are never redone)."""
    export_hf: bool = False
    """Also write ``OUT/hf`` as a ``datasets.DatasetDict`` (``train``/``eval``; needs the ``hf`` extra)."""
    smallest_first: bool = True
    """Start the packages in order of their sdist's size, smallest first (local and git sources first, in listed
    order): under a time limit the packages left unstarted are then the large, slow ones, not whichever the list
    happens to name last. False: the listed order."""
    turn_s: Annotated[float, Field(ge=0)] = 60.0
    """A package's turn while others wait: after this many seconds of validation with a task (three times as long
    without one) it stops before its next batch or mutation score (a batch's grading and recording runs stop at the
    turn's end; its verification goes on past it for as long as they took: ``generate.FINISH_SHARE``), keeps its
    tasks and queues again. Others wait while a package has not started, and once all have,
    while a queued one made tasks faster than the running turn does; the queued ones continue where they stopped
    (``generate(resume=True)``), fastest first (tasks per second of their turns). Under a time limit every listed
    package gets a turn before any takes a second, and the time left goes to the packages that make tasks fastest.
    0: each package runs to its end in one go."""


def read_sources(path: Path) -> list[SourceLine]:
    """Parse the sources file; a bad line raises :class:`InputError` naming the file and line."""

    if not path.is_file():
        raise InputError.field("sources", f"{path}: no such file")
    out: list[SourceLine] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(path.read_text().splitlines(), 1):
        try:
            tokens = shlex.split(raw, comments=True)
        except ValueError as e:
            raise InputError.at(path, i, str(e)) from None
        if not tokens:
            continue
        text, options = tokens[0], _line_options(path, i, tokens[1:])
        if text.startswith("pypi:"):
            try:
                name, version = _parse_pypi_spec(text)
            except SourceError as e:
                raise InputError.at(path, i, str(e)) from None
            spec, slug = text, f"{name.lower()}-{version}"
        elif is_git_spec(text):
            spec, slug = _git_line(path, i, text)
        else:
            d = (path.parent / text).resolve()
            if not d.is_dir():
                raise InputError.at(path, i, f"{text!r} is neither 'pypi:NAME==VERSION' nor a directory")
            spec, slug = str(d), f"{d.name}-{hashlib.sha256(str(d).encode()).hexdigest()[:8]}"
        if slug in seen:
            raise InputError.at(path, i, f"{text!r} repeats line {seen[slug]}")
        seen[slug] = i
        out.append(SourceLine(spec=spec, slug=slug, line=i, **options))
    if not out:
        raise InputError.at(path, 1, "no source listed")
    return out


def _git_line(path: Path, line: int, text: str) -> tuple[str, str]:
    """(spec, slug) of a ``git:PATH@REV`` (PATH relative to the sources file) or ``git+URL@REV`` line."""
    if text.startswith("git:"):
        where, _, rev = text[4:].rpartition("@")
        text = f"git:{(path.parent / where).resolve()}@{rev}" if where else text
    try:
        url, rev = parse_git_spec(text)
    except SourceError as e:
        raise InputError.at(path, line, str(e)) from None
    name = url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git") or "repo"
    return text, f"{name}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


_LINE_OPTIONS = {"--deselect": "deselect", "--extra-requirement": "extra_requirements"}


def _line_options(path: Path, line: int, tokens: list[str]) -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for flag, value in zip(tokens[::2], [*tokens[1::2], None][: len(tokens[::2])], strict=True):
        if flag not in _LINE_OPTIONS or value is None:
            raise InputError.at(
                path, line, f"{flag!r}: a line is SOURCE [--deselect NODEID] [--extra-requirement REQ] ..."
            )
        out.setdefault(_LINE_OPTIONS[flag], []).append(value)
    return {k: tuple(v) for k, v in out.items()}


def sdist_size(line: SourceLine) -> float:
    """Bytes of a ``pypi:`` line's sdist (downloaded into the cache, where its package's run finds it), 0 for
    other sources, infinity when it cannot be fetched (its package then reports why)."""
    if not line.spec.startswith("pypi:"):
        return 0
    try:
        return download_sdist(*_parse_pypi_spec(line.spec)).stat().st_size
    except SourceError:
        return math.inf


def smallest_first(lines: list[SourceLine]) -> list[SourceLine]:
    """``lines`` by :func:`sdist_size` (fetched eight at a time), the listed order among equals."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        sizes = dict(zip([s.slug for s in lines], pool.map(sdist_size, lines), strict=True))
    return sorted(lines, key=lambda s: sizes[s.slug])


def package_settings(config: CorpusConfig, line: SourceLine | None = None) -> dict:
    """What a package's result depends on (a change redoes it)."""
    return {
        "deselect": list(line.deselect) if line else [],
        "extra_requirements": list(line.extra_requirements) if line else [],
        "max_tasks": config.max_tasks,
        "granularities": sorted(config.granularities),
        "seed": config.seed,
        "replay_search": config.replay_search,
        **{k: getattr(config, k) for k in VerifyConfig.model_fields},
        "unsandboxed": config.unsandboxed,
        "limits": config.limits.model_dump(),
        "auto_setup": config.auto_setup,
    }


def settings_key(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


NO_TASK_TURNS = 3
"""A package without a task yet keeps its first turn this many times longer: a package's first task is what the
corpus needs most from it."""


class Queue(BaseModel):
    """How a package learns whether others wait for a worker: each package of the run writes ``run`` to its
    directory's :data:`STARTED` file when it starts (a peer without it has not started), and the driver keeps the
    best turn rate among the packages queued for a continuation in ``board`` (:func:`write_board`)."""

    run: str
    peers: tuple[str, ...]
    """Package directories of this run."""
    turn_s: float
    no_task_turns: float = NO_TASK_TURNS
    board: str = ""
    """The driver's board file ("": none)."""

    def waiting(self) -> int:
        return sum(1 for d in self.peers if _read(Path(d) / STARTED) != self.run)

    def queued_rate(self) -> float | None:
        """Tasks per second of the fastest package queued for a continuation; None when none is queued."""
        try:
            data = json.loads(_read(Path(self.board)) or "null") if self.board else None
        except ValueError:
            return None
        if not isinstance(data, dict) or data.get("run") != self.run or data.get("rate") is None:
            return None
        return float(data["rate"])

    def left_s(self, tasks: int, seconds: float) -> float | None:
        """Seconds left of this turn after ``seconds`` of validation with ``tasks`` validated (the setup is not
        counted: it is paid once, and the waiting package has its own still to pay); None while nobody waits: no
        package waits to start and none queued made tasks faster than this turn does."""
        if not self.turn_s:
            return None
        if not self.waiting():
            best = self.queued_rate()
            if best is None or tasks / max(seconds, 1e-9) >= best:
                return None
        return self.turn_s * (1 if tasks else self.no_task_turns) - seconds

    def keep_going(self, tasks: int, seconds: float) -> bool:
        """``generate``'s turn: whether it has time left."""
        left = self.left_s(tasks, seconds)
        return left is None or left > 0


def write_board(path: Path, run: str, again: list[SourceLine], rates: Mapping[str, float]) -> None:
    """The driver's board for :class:`Queue`: the best rate among the packages queued for a continuation."""
    best = max((rates[s.slug] for s in again), default=None)
    _write_atomic(path, json.dumps({"run": run, "rate": best}))


STARTED = "started"
"""Written in a package's directory when it starts: the run's token (:class:`Queue`)."""
BOARD = "queue.json"
"""In the packages directory while a run lasts: the run's token and the best rate queued (:func:`write_board`)."""


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def build_package(
    spec: str,
    pkg_dir: str,
    settings: dict,
    workers: int,
    tmp_root: str | None = None,
    stop_at: float | None = None,
    queue: Queue | None = None,
) -> dict:
    """One package: generate into ``pkg_dir/tasks``, write ``meta.jsonl`` and ``status.json``; never raises for
    a package that cannot be used (its status says why). Runs in a Ray worker. ``tmp_root``: where its temporary
    trees go (the driver removes it, so a force-cancelled task leaves nothing in the system's temp directory).
    ``stop_at``: the corpus's time limit (``time.time()``): validation stops there and keeps what it has.
    ``queue``: the run's packages, to end the package's turn while others wait (``turn_s``). A package whose status
    says an earlier turn or run of the same line and settings stopped it early (``partial``) continues it."""
    if tmp_root is None:
        return _build_package(spec, pkg_dir, settings, workers, stop_at, queue)
    os.makedirs(tmp_root, exist_ok=True)
    previous, tempfile.tempdir = tempfile.tempdir, tmp_root
    try:
        return _build_package(spec, pkg_dir, settings, workers, stop_at, queue)
    finally:
        tempfile.tempdir = previous


RAM_SCRATCH = Path("/dev/shm")
"""The RAM file system the packages' temporary trees go to when it has room (:func:`scratch_parent`)."""
RAM_SCRATCH_MIN_FREE = 4 << 30
"""Free bytes :data:`RAM_SCRATCH` must have (a container's default /dev/shm has 64 MiB: the trees go to disk)."""


def scratch_parent(
    ram: Path = RAM_SCRATCH, min_free: int = RAM_SCRATCH_MIN_FREE, environ: Mapping[str, str] = os.environ
) -> str | None:
    """Where the run's temporary trees go: ``ram`` when it is a writable directory with ``min_free`` bytes free and
    ``TMPDIR`` does not say otherwise, else the system's temporary directory (None). Validation makes and removes
    tens of thousands of small files (a grading tree per run, a copy per mutant); on ext4 they cost several times
    what they cost in RAM (round 24: 3,000 directories with a file and a link each, 1.6 s against 0.2 s)."""
    if environ.get("TMPDIR"):
        return None
    try:
        free = os.statvfs(ram)
    except OSError:
        return None
    if not ram.is_dir() or not os.access(ram, os.W_OK | os.X_OK) or free.f_bavail * free.f_frsize < min_free:
        return None
    return str(ram)


VALIDATING = "validating"
"""Written in a package's directory when its validation starts: at the time limit, a package without it (setting up
its suite, venv or coverage) is cancelled at once, since it has no task to keep; the others get ``grace_s``."""


def _left(stop_at: float | None) -> float | None:
    """Seconds until ``stop_at`` (None: no limit); 0 when it has passed."""
    return None if stop_at is None else max(0.0, stop_at - time.time())


def _build_package(
    spec: str, pkg_dir: str, settings: dict, workers: int, stop_at: float | None, queue: Queue | None
) -> dict:
    from crf_prime.featdel.corpus_meta import task_meta  # start-up: +9 ms on every command

    key = settings_key(settings)
    cancelled = PackageStatus(spec=spec, status="cancelled", settings=key, reason="time limit reached")
    if _left(stop_at) == 0:  # queued past the time limit: nothing started, nothing written
        return cancelled.model_dump()
    root = Path(pkg_dir)
    root.mkdir(parents=True, exist_ok=True)
    earlier = read_status(root)
    resume = earlier is not None and (earlier.status, earlier.spec, earlier.settings) == ("partial", spec, key)
    (root / VALIDATING).unlink(missing_ok=True)
    if queue is not None:
        _write_atomic(root / STARTED, queue.run)
    t0 = time.perf_counter()
    setup: SuiteSetup | None = None
    try:
        cfg = GenerateConfig(
            source=spec,
            out=root / "tasks",
            max_tasks=settings["max_tasks"],
            seed=settings["seed"],
            workers=workers,
            unsandboxed=settings["unsandboxed"],
            limits=settings["limits"],
            granularities=settings["granularities"],
            replay_search=settings["replay_search"],
            **{k: settings[k] for k in VerifyConfig.model_fields},
            deselect=settings["deselect"],
            extra_requirements=settings["extra_requirements"],
            auto_setup=settings.get("auto_setup", False),
        )
        cfg, setup = set_up(cfg)
        left = _left(stop_at)
        if left == 0:  # the setup ran past the time limit: no validation starts
            return cancelled.model_dump()

        def progress(phase: str, _done: int, _total: int) -> None:
            if phase == "validate" and not (root / VALIDATING).exists():
                (root / VALIDATING).touch()

        turn = None if queue is None or not queue.turn_s else queue
        tasks, summary = generate(cfg.model_copy(update={"time_limit_s": left}), progress, turn=turn, resume=resume)
        license = _license(root / "tasks")
        with tempfile.TemporaryDirectory(prefix="crf-corpus-base-") as tmp:
            metas = []
            bases: dict[str, Path] = {}
            for t in tasks:
                if t.base_archive not in bases:
                    bases[t.base_archive] = Path(tmp) / str(len(bases))
                    extract_archive(root / "tasks" / t.base_archive, bases[t.base_archive], t.base_sha256)
                metas.append(task_meta(t, bases[t.base_archive], license=license))
        _write_atomic(root / "meta.jsonl", "".join(m.model_dump_json() + "\n" for m in metas))
        status = PackageStatus(
            spec=spec,
            status="partial" if summary.time_limit_reached or summary.stopped_early else "done",
            reason=_stopped_early(summary, len(tasks), time.perf_counter() - t0) if summary.stopped_early else "",
            settings=key,
            tasks=len(tasks),
            license=license,
            seconds=round(time.perf_counter() - t0 + (earlier.seconds if resume and earlier else 0.0), 1),
            turns=1 + (earlier.turns if resume and earlier else 0),
            setup=setup,
        )
    except (InfraError, MissingExtraError):
        raise  # the host, not the package: every other package would fail the same way
    except Exception as e:  # a package that cannot be used is a corpus fact, reported with its reason
        status = PackageStatus(
            spec=spec,
            status="failed",
            settings=key,
            reason=str(e)[:4000],
            error=type(e).__name__,
            seconds=round(time.perf_counter() - t0, 1),
            setup=setup,
        )
    _write_atomic(root / "status.json", status.model_dump_json(indent=2) + "\n")
    return status.model_dump()


def _license(task_dir: Path) -> str:
    """The licence the package's metadata declares (read back from its base archive's PKG-INFO / pyproject)."""

    tasks = load_tasks(task_dir)
    if not tasks:
        return ""
    with tempfile.TemporaryDirectory(prefix="crf-corpus-lic-") as tmp:
        extract_archive(task_dir / tasks[0].base_archive, Path(tmp), tasks[0].base_sha256)
        return license_of(Path(tmp))


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def read_status(pkg_dir: Path) -> PackageStatus | None:
    path = pkg_dir / "status.json"
    if not path.is_file():
        return None
    try:
        return PackageStatus.model_validate_json(path.read_text())
    except ValueError:
        return None  # a torn or foreign file: the package is redone


class _Progress:
    """Packages and tasks done: a rich bar on a terminal, one plain line per finished package otherwise."""

    def __init__(self, packages: int, tasks_hint: int) -> None:
        self.tty = sys.stderr.isatty()
        self.done = self.tasks = self.failed = self.built = 0
        """``built``: tasks made in this run (resumed packages' tasks do not count towards the rate)."""
        self.total = packages
        self.turns: dict[str, int] = {}
        """Tasks of packages whose turn ended, counted in ``built`` already."""
        self.t0 = time.perf_counter()
        if self.tty:
            # start-up: +199 ms on every command
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                transient=False,
            )
            self.pkgs = self.bar.add_task("packages", total=packages)
            self.tk = self.bar.add_task("tasks", total=tasks_hint)
            self.bar.start()

    def package(self, slug: str, status: PackageStatus, resumed: bool) -> None:
        self.done += 1
        self.tasks += status.tasks
        self.built += 0 if resumed else status.tasks - self.turns.pop(slug, 0)
        self.failed += status.status == "failed"
        rate = self.built / max((time.perf_counter() - self.t0) / 60, 1e-9)
        if status.status == "done":
            what = f"{status.tasks} tasks in {status.seconds:.0f}s"
        elif status.status == "partial":
            why = "its turn ended while others waited, not continued" if status.reason else "stopped"
            what = f"{status.tasks} tasks in {status.seconds:.0f}s, {why} at the time limit (it continues next time)"
        elif status.status == "cancelled":
            what = "cancelled (time limit; it runs again next time)"
        else:
            what = f"FAILED: {status.reason.splitlines()[0][:300]}"
        line = (
            f"featdel corpus: [{self.done}/{self.total} packages, {self.tasks} tasks, {rate:.1f} tasks/min] "
            f"{slug}{' (resumed)' if resumed else ''}: {what}"
        )
        if self.tty:
            self.bar.update(self.pkgs, completed=self.done)
            self.bar.update(self.tk, completed=self.tasks)
            self.bar.console.print(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def turn(self, slug: str, status: PackageStatus) -> None:
        """A package's turn ended while others waited: it continues once every package has started."""
        self.built += status.tasks - self.turns.get(slug, 0)
        self.turns[slug] = status.tasks
        line = (
            f"featdel corpus: [{self.done}/{self.total} packages] {slug}: {status.tasks} tasks in "
            f"{status.seconds:.0f}s, its turn is over (others wait); it continues once every package has started and "
            "none queued is faster"
        )
        if self.tty:
            self.bar.console.print(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.tty:
            self.bar.stop()


def resumable(st: PackageStatus | None, spec: str, key: str, retry_failed: bool) -> bool:
    """Whether an earlier run's status stands: same line, same settings, and the package finished (or failed and
    failures are not retried). A package the time limit stopped (partial) runs again."""
    if st is None or st.settings != key or st.spec != spec:
        return False
    return st.status == "done" or (st.status == "failed" and not retry_failed)


def _stopped_early(summary: GenerateSummary, tasks: int, seconds: float) -> str:
    left = summary.candidates - summary.checked
    return (
        f"stopped early to make room for waiting packages: {tasks} tasks in {seconds:.0f} s "
        f"({60 * tasks / seconds:.1f}/min), {left} candidates unchecked"
    )


def next_package(unstarted: list[SourceLine], again: list[SourceLine], rates: Mapping[str, float]) -> SourceLine:
    """Taken off its list: the first package not started yet; once all have started, the one whose turn made tasks
    fastest (``rates``: tasks per second of validation; the earliest queued of equals)."""
    if unstarted:
        return unstarted.pop(0)
    return again.pop(max(range(len(again)), key=lambda i: (rates[again[i].slug], -i)))


def turn_rate(pkg_dir: Path, status: PackageStatus) -> float:
    """Tasks per second of validation of a package's turn (its setup is paid: what counts is what it makes next)."""
    try:
        seconds = GenerateSummary.model_validate_json((pkg_dir / "tasks" / "summary.json").read_text()).seconds
    except (OSError, ValueError):
        return 0.0
    return status.tasks / max(seconds.get("validate", 0.0), 1e-9)


def run_packages(config: CorpusConfig, lines: list[SourceLine]) -> dict[str, PackageStatus]:
    """Every listed package built or resumed (Ray tasks), by slug; failures included with their reasons."""

    settings = {s.slug: package_settings(config, s) for s in lines}
    keys = {slug: settings_key(v) for slug, v in settings.items()}
    root = config.out.resolve() / "packages"  # Ray workers do not share the driver's working directory
    root.mkdir(parents=True, exist_ok=True)
    results: dict[str, PackageStatus] = {}
    todo: list[SourceLine] = []
    for s in lines:
        st = read_status(root / s.slug)
        if st is not None and resumable(st, s.spec, keys[s.slug], config.retry_failed):
            results[s.slug] = st
        else:
            todo.append(s)
    progress = _Progress(len(lines), config.max_tasks * len(lines))
    for slug, st in results.items():
        progress.package(slug, st, resumed=True)
    try:
        if todo:
            ray = require("ray", "ray")
            started = not ray.is_initialized()
            if config.ray_address:
                init_ray(address=config.ray_address, log_to_driver=False)
            else:
                init_ray(
                    num_cpus=config.num_cpus or os.cpu_count() or 1,
                    include_dashboard=False,
                    log_to_driver=False,
                    object_store_memory=100 * 1024 * 1024,
                )
            if config.smallest_first:
                todo = smallest_first(todo)
            tmp_root = tempfile.mkdtemp(prefix="crf-corpus-tmp-", dir=scratch_parent())
            try:
                workers = max(1, int(-(-config.cpus_per_package // 1)))
                remote = ray.remote(num_cpus=config.cpus_per_package, max_retries=0)(build_package)
                cpus = config.num_cpus or os.cpu_count() or 1
                if config.ray_address:
                    cpus = int(ray.cluster_resources().get("CPU", 1))
                slots = max(1, int(cpus // config.cpus_per_package))
                limit = config.time_limit_s
                stop_at = None if limit is None else time.time() + limit  # wall clock: the workers' processes
                queue = Queue(
                    run=uuid.uuid4().hex,
                    peers=tuple(str(root / s.slug) for s in todo),
                    turn_s=config.turn_s,
                    board=str(root / BOARD),
                )
                unstarted = list(todo)
                again: list[SourceLine] = []  # turn over, to continue once every package has started
                rates: dict[str, float] = {}
                write_board(root / BOARD, queue.run, again, rates)
                pending: dict = {}
                at_limit = None if limit is None else time.monotonic() + limit
                deadline = None if at_limit is None else at_limit + config.grace_s

                def submit() -> None:  # the driver queues: Ray would start its tasks in no set order
                    while len(pending) < slots and (unstarted or again) and (limit is None or at_limit is not None):
                        s = next_package(unstarted, again, rates)
                        write_board(root / BOARD, queue.run, again, rates)
                        ref = remote.remote(
                            s.spec, str(root / s.slug), settings[s.slug], workers, tmp_root, stop_at, queue
                        )
                        pending[ref] = s

                def cancel(refs: list, reason: str) -> None:  # left for the next run
                    for ref in refs:
                        s = pending.pop(ref)
                        ray.cancel(ref, force=True)
                        results.setdefault(  # a continuation cancelled: its first turn's tasks stand
                            s.slug,
                            PackageStatus(spec=s.spec, status="cancelled", settings=keys[s.slug], reason=reason),
                        )
                        progress.package(s.slug, results[s.slug], resumed=False)

                submit()
                while pending:
                    until = at_limit if at_limit is not None else deadline
                    left = None if until is None else max(0.0, until - time.monotonic())
                    ready, _ = ray.wait(list(pending), num_returns=1, timeout=left)
                    if not ready and at_limit is not None:  # the limit: what has no task to keep stops now
                        at_limit = None
                        setting_up = [r for r, s in pending.items() if not (root / s.slug / VALIDATING).exists()]
                        queued = [r for r in setting_up if _read(root / pending[r].slug / STARTED) != queue.run]
                        cancel(queued, "not started before the time limit")
                        cancel([r for r in setting_up if r not in queued], "still setting up at the time limit")
                        continue
                    if not ready:  # the grace is over too: what still runs is cancelled
                        cancel(list(pending), f"still running {config.grace_s:g} s after the time limit")
                        break
                    s = pending.pop(ready[0])
                    try:
                        st = PackageStatus.model_validate(ray.get(ready[0]))
                    except Exception as e:  # the worker died (OOM kill, node lost): recorded like any failure
                        cause = getattr(e, "cause", None)  # ray.exceptions.RayTaskError wraps what the task raised
                        if isinstance(cause, InfraError | MissingExtraError):
                            raise cause from e
                        st = PackageStatus(
                            spec=s.spec,
                            status="failed",
                            settings=keys[s.slug],
                            reason=str(e)[:4000],
                            error=type(e).__name__,
                        )
                        _write_atomic(root / s.slug / "status.json", st.model_dump_json(indent=2) + "\n")
                    results[s.slug] = st
                    if st.status == "partial" and st.reason:  # its turn ended while others waited
                        again.append(s)
                        rates[s.slug] = turn_rate(root / s.slug, st)
                        write_board(root / BOARD, queue.run, again, rates)
                        progress.turn(s.slug, st)
                    else:
                        progress.package(s.slug, st, resumed=False)
                    submit()
                for s in [*unstarted, *again]:  # never started, or not continued, before the time limit
                    if s.slug not in results:
                        results[s.slug] = PackageStatus(
                            spec=s.spec,
                            status="cancelled",
                            settings=keys[s.slug],
                            reason="not started before the time limit",
                        )
                    progress.package(s.slug, results[s.slug], resumed=False)
            finally:
                if started:
                    ray.shutdown()
                shutil.rmtree(tmp_root, ignore_errors=True)  # what force-cancelled packages left
                (root / BOARD).unlink(missing_ok=True)
    finally:
        progress.close()
    return {s.slug: results[s.slug] for s in lines}


__all__ = ["CorpusConfig", "build_package", "read_sources", "resumable", "run_packages", "scratch_parent"]
