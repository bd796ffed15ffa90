"""The sandbox API around the box: probe and its error text, explicit opt-out, async + concurrency, cancellation."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from pydantic import ValidationError

from crf_prime.sandbox import BWRAP_ENV, Sandbox, SandboxConfig, SandboxLimits, SandboxUnavailable, bwrap, probe

LIMITS = SandboxLimits(wall_seconds=10, memory_mb=256, pids=64, output_bytes=10_000, tmp_size_mb=16)


def test_missing_bwrap_is_a_clear_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-bwrap")
    status = probe(missing)
    assert not status.available
    assert "bubblewrap not found" in status.reason
    assert "apt-get install bubblewrap" in status.reason
    assert "unsandboxed=True" in status.reason
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        Sandbox(SandboxConfig(bwrap=missing))


def test_missing_bwrap_via_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BWRAP_ENV, str(tmp_path / "gone" / "bwrap"))
    with pytest.raises(SandboxUnavailable, match=r"looked for '.*gone/bwrap'"):
        Sandbox()


def test_broken_namespaces_error_names_the_sysctl(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then echo "bubblewrap 0.8.0"; exit 0; fi\n'
        "echo 'bwrap: Creating new namespace failed: nesting depth or /proc/sys/user/max_*_namespaces "
        "exceeded (ENOSPC)' >&2\nexit 1\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    status = probe(str(fake))
    assert not status.available
    assert "Creating new namespace failed" in status.reason
    assert "max_user_namespaces" in status.reason
    with pytest.raises(SandboxUnavailable, match="Creating new namespace failed"):
        Sandbox(SandboxConfig(bwrap=str(fake)))


def test_unsandboxed_is_explicit_and_reported(tmp_path: Path) -> None:
    r = Sandbox(SandboxConfig(limits=LIMITS, unsandboxed=True)).run(["sh", "-c", "pwd; echo $HOME"], workdir=tmp_path)
    assert r.exit_code == 0
    assert r.stdout == f"{tmp_path.resolve()}\n{tmp_path.resolve()}\n"
    assert "isolation:bwrap" not in r.enforced
    assert "wall" in r.enforced


def test_unsandboxed_timeout_kills_process_group(tmp_path: Path) -> None:
    marker = f"7{uuid.uuid4().int % 10**8}"
    r = Sandbox(SandboxConfig(limits=LIMITS, unsandboxed=True)).run(
        ["sh", "-c", f"sleep {marker} & sleep {marker}"],
        workdir=tmp_path,
        limits=LIMITS.model_copy(update={"wall_seconds": 0.5}),
    )
    assert r.limit_hit == "wall"
    alive = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p).endswith(f"sleep\0{marker}\0")]
    assert alive == []


def test_a_deadline_stops_every_run_there_as_its_wall_limit(tmp_path: Path) -> None:
    box = Sandbox(SandboxConfig(limits=LIMITS, unsandboxed=True))
    late = box.with_deadline(time.monotonic() + 0.5)
    start = time.monotonic()
    r = late.run(["sleep", "30"], workdir=tmp_path)  # 10 s of wall limit, half a second to the deadline
    assert r.limit_hit == "wall" and time.monotonic() - start < 9.0
    assert late.with_limits(wall_seconds=20).deadline == late.deadline  # kept by a copy with other limits
    assert box.deadline is None and box.run(["true"], workdir=tmp_path).exit_code == 0  # the box itself: none
    start = time.monotonic()
    assert late.run(["sleep", "30"], workdir=tmp_path).limit_hit == "wall"  # started past it: stopped at once
    assert time.monotonic() - start < 9.0


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.bwrap
def test_probe_reports_enforced_limits() -> None:
    status = probe()
    assert status.available, status.reason
    assert "isolation:bwrap" in status.enforced
    assert any(e.startswith("memory:") for e in status.enforced)
    if status.cgroup is not None and "pids" in status.cgroup_controllers:
        assert f"pids:cgroup-{status.cgroup}" in status.enforced


@pytest.mark.bwrap
def test_workdir_is_writable_at_same_path_and_protected_is_not(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text("orig")
    r = Sandbox(SandboxConfig(limits=LIMITS)).run(
        ["sh", "-c", "pwd; echo hi > out.txt; echo x >> tests/t.py"], workdir=tmp_path, protected=[Path("tests")]
    )
    assert r.stdout == f"{tmp_path.resolve()}\n"
    assert (tmp_path / "out.txt").read_text() == "hi\n"
    assert (tmp_path / "tests" / "t.py").read_text() == "orig"
    assert "Read-only file system" in r.stderr


@pytest.mark.bwrap
def test_a_box_runs_after_the_temporary_directory_it_first_ran_under_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file bound over /etc's secrets lives in the temporary directory: when that changes (a corpus's own root, a
    test's), later boxes bind the file under the new one, never the one removed with the old directory."""
    box = Sandbox(SandboxConfig(limits=LIMITS))
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / name))
        if name == "first":
            bwrap.system_args.cache_clear()  # as in a process whose first box runs under this directory
        r = box.run(["sh", "-c", "echo ok"], workdir=tmp_path)
        assert (r.exit_code, r.stdout) == (0, "ok\n"), r.stderr
        shutil.rmtree(tmp_path / name)


@pytest.mark.bwrap
def test_writable_makes_the_rest_of_workdir_read_only(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "m.py").write_text("orig")
    (tmp_path / "out" / "keep").mkdir(parents=True)
    script = "echo a > out/r.txt; echo b > repo/new.py; echo c >> repo/m.py; echo d > top.txt; echo e > out/keep/x"
    r = Sandbox(SandboxConfig(limits=LIMITS)).run(
        ["sh", "-c", script], workdir=tmp_path, writable=[Path("out")], protected=[Path("out/keep")]
    )
    assert (tmp_path / "out" / "r.txt").read_text() == "a\n"
    assert not (tmp_path / "repo" / "new.py").exists() and not (tmp_path / "top.txt").exists()
    assert (tmp_path / "repo" / "m.py").read_text() == "orig" and not (tmp_path / "out" / "keep" / "x").exists()
    assert r.stderr.count("Read-only file system") == 4
    assert "read_only_workdir:bwrap" in r.enforced
    with pytest.raises(ValueError, match="writable"):
        Sandbox(SandboxConfig(limits=LIMITS)).run(["true"], workdir=tmp_path, writable=[Path("missing")])


@pytest.mark.bwrap
def test_with_writable_only_protected_paths_inside_it_are_bound(tmp_path: Path) -> None:
    """A read-only task dir needs no bind per protected file outside the writable paths (a grading run protects
    every test file: a thousand binds cost bubblewrap seconds); those files stay read-only all the same."""
    (tmp_path / "repo" / "tests").mkdir(parents=True)
    (tmp_path / "out" / "keep").mkdir(parents=True)
    files = [tmp_path / "repo" / "tests" / f"t{i}.py" for i in range(3)]
    for f in files:
        f.write_text("orig")
    argv = bwrap.build_argv(
        "bwrap",
        ["true"],
        workdir=tmp_path,
        ro_binds=[],
        protected=[*files, tmp_path / "out" / "keep"],
        env={},
        cwd=tmp_path,
        tmp_size_mb=16,
        writable=[tmp_path / "out"],
    )
    binds = [
        argv[i + 1]
        for i, a in enumerate(argv)
        if a in ("--ro-bind", "--bind") and argv[i + 1].startswith(str(tmp_path))
    ]
    assert binds == [str(tmp_path), str(tmp_path / "out"), str(tmp_path / "out" / "keep")]
    r = Sandbox(SandboxConfig(limits=LIMITS)).run(
        ["sh", "-c", "echo x >> repo/tests/t0.py; echo y > out/keep/z"],
        workdir=tmp_path,
        writable=[Path("out")],
        protected=[Path("repo/tests/t0.py"), Path("out/keep")],
    )
    assert files[0].read_text() == "orig" and not (tmp_path / "out" / "keep" / "z").exists()
    assert r.stderr.count("Read-only file system") == 2


@pytest.mark.bwrap
def test_ro_bind_is_visible_read_only(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "tool").write_text("#!/bin/sh\necho from-venv\n")
    (venv / "bin" / "tool").chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    box = Sandbox(SandboxConfig(limits=LIMITS))
    r = box.run([str(venv / "bin" / "tool")], workdir=work, ro_binds=[venv])
    assert r.stdout == "from-venv\n"
    r = box.run(["sh", "-c", f"echo x > {venv}/bin/tool"], workdir=work, ro_binds=[venv])
    assert r.exit_code != 0
    r = box.run(["sh", "-c", f"ls {venv}"], workdir=work)  # not bound -> not visible
    assert "No such file or directory" in r.stderr


@pytest.mark.bwrap
def test_stdin_is_passed(tmp_path: Path) -> None:
    r = Sandbox(SandboxConfig(limits=LIMITS)).run(["cat"], workdir=tmp_path, stdin=b"hello box")
    assert r.stdout == "hello box"


@pytest.mark.bwrap
def test_bad_arguments_raise(tmp_path: Path) -> None:
    box = Sandbox(SandboxConfig(limits=LIMITS))
    with pytest.raises(ValueError, match="is not a directory"):
        box.run(["true"], workdir=tmp_path / "missing")
    with pytest.raises(ValueError, match="not inside workdir"):
        box.run(["true"], workdir=tmp_path, protected=[Path("/etc")])
    with pytest.raises(ValueError, match="ro_binds"):
        box.run(["true"], workdir=tmp_path, ro_binds=[tmp_path / "nope"])
    with pytest.raises(ValueError, match="whole host"):
        box.run(["true"], workdir=tmp_path, ro_binds=[Path("/")])
    for unsafe in ("/", "/usr", "/etc"):
        with pytest.raises(ValueError, match="would expose system directories"):
            box.run(["true"], workdir=Path(unsafe))


@pytest.mark.bwrap
async def test_concurrent_boxes_are_independent(tmp_path: Path) -> None:
    box = Sandbox(SandboxConfig(limits=LIMITS))
    dirs = []
    for i in range(8):
        d = tmp_path / f"t{i}"
        d.mkdir()
        dirs.append(d)
    results = await asyncio.gather(
        *(box.arun(["sh", "-c", f"echo {i} > mine; sleep 0.2; cat mine; ls .."], workdir=d) for i, d in enumerate(dirs))
    )
    for i, (d, r) in enumerate(zip(dirs, results, strict=True)):
        assert r.exit_code == 0, r.stderr
        assert r.stdout.splitlines() == [str(i), d.name]  # sees only its own task dir
        assert (d / "mine").read_text() == f"{i}\n"


@pytest.mark.bwrap
async def test_sync_run_inside_event_loop(tmp_path: Path) -> None:
    r = Sandbox(SandboxConfig(limits=LIMITS)).run(["echo", "ok"], workdir=tmp_path)  # falls back to a worker thread
    assert r.stdout == "ok\n"


@pytest.mark.bwrap
async def test_cancelling_arun_kills_the_box(tmp_path: Path) -> None:
    marker = f"6{uuid.uuid4().int % 10**8}"
    task = asyncio.create_task(
        Sandbox(SandboxConfig(limits=LIMITS)).arun(["sh", "-c", f"sleep {marker} & sleep {marker}"], workdir=tmp_path)
    )
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.2)
    alive = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p).endswith(f"sleep\0{marker}\0")]
    assert alive == []


def test_cli_probe_reports_missing_bwrap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from crf_prime.cli import main

    assert main(["sandbox", "probe", "--format", "json", "--bwrap", str(tmp_path / "nope")]) == 1
    status = json.loads(capsys.readouterr().out)
    assert status["available"] is False
    assert "apt-get install bubblewrap" in status["reason"]


@pytest.mark.bwrap
def test_cli_probe_and_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from crf_prime.cli import main

    assert main(["sandbox", "probe"]) == 0
    out = capsys.readouterr().out
    assert "available" in out and "isolation:bwrap" in out
    assert main(["sandbox", "run", "--workdir", str(tmp_path), "--", "sh", "-c", "echo hi; exit 3"]) == 3
    assert capsys.readouterr().out == "hi\n"
    assert (
        main(["sandbox", "run", "--workdir", str(tmp_path), "--limits.wall-seconds", "0.5", "--", "sleep", "5"]) == 124
    )
    assert "limit hit: wall" in capsys.readouterr().err


@pytest.mark.bwrap
def test_rlimit_fallback_without_cgroups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from crf_prime.sandbox import box as box_module
    from crf_prime.sandbox.cgroups import CgroupLayout

    monkeypatch.setattr(box_module, "detect_layout", lambda: CgroupLayout(None, {}, why_not="test"))
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n"
    r = Sandbox(SandboxConfig(limits=LIMITS)).run(
        ["/usr/bin/python3", "-c", code], workdir=tmp_path, limits=LIMITS.model_copy(update={"memory_mb": 128})
    )
    assert "memory:rlimit-as" in r.enforced
    assert not any(e.startswith("pids:") for e in r.enforced)  # not enforceable without a pids cgroup
    assert r.limit_hit == "memory"
    assert r.exit_code == 1
    assert "MemoryError" in r.stderr


def test_with_limits_changes_the_limits_of_a_copy_only() -> None:
    box = Sandbox(SandboxConfig(limits=LIMITS, unsandboxed=True))
    short = box.with_limits(wall_seconds=0.5)
    assert short.limits == LIMITS.model_copy(update={"wall_seconds": 0.5})
    assert box.limits == LIMITS and short.unsandboxed and short is not box
    with pytest.raises(ValidationError, match="wall_seconds"):
        box.with_limits(wall_seconds=0)  # validated like a config's limits


@pytest.mark.bwrap
def test_sync_runs_from_many_threads(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    box = Sandbox(SandboxConfig(limits=LIMITS))
    dirs = [tmp_path / f"w{i}" for i in range(6)]
    for d in dirs:
        d.mkdir()
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda d: box.run(["sh", "-c", "pwd; ls .."], workdir=d), dirs))
    assert [r.stdout for r in results] == [f"{d.resolve()}\n{d.name}\n" for d in dirs]


def test_cgroup_join_targets_per_version(tmp_path: Path) -> None:
    from crf_prime.sandbox.box import _launcher
    from crf_prime.sandbox.cgroups import CgroupLayout, RunCgroup

    v1 = RunCgroup(CgroupLayout("v1", {}), 64, 8, dirs={"memory": tmp_path / "m", "pids": tmp_path / "p"})
    assert v1.join_targets() == [(str(tmp_path / "m" / "tasks"), "0"), (str(tmp_path / "p" / "tasks"), "0")]
    v2 = RunCgroup(CgroupLayout("v2", {}), 64, 8, dirs={"memory": tmp_path / "u", "pids": tmp_path / "u"})
    assert v2.join_targets() == [(str(tmp_path / "u" / "cgroup.procs"), "$$")]
    argv = _launcher(v1.join_targets(), SandboxLimits(cpu_seconds=3, file_size_mb=1), rlimit_as_mb=64)
    assert argv[:2] == ["/bin/sh", "-c"] and argv[3] == "crf-sandbox"
    script = argv[2]
    for step in ("ulimit -c 0", "ulimit -S -t 3", "ulimit -H -t 4", "ulimit -f 2048", "ulimit -v 65536"):
        assert step in script
    assert f"echo 0 > {tmp_path / 'm' / 'tasks'}" in script
    assert script.endswith('exec "$@"')


@pytest.mark.bwrap
def test_a_spawned_box_serves_until_closed_laid_out_as_a_run(tmp_path: Path) -> None:
    """``spawn``: the layout of ``run`` (a read-only workdir but its writable paths, the venv-like read-only bind, a
    fresh environment), the process left running with its stdin and stdout piped; ``close`` kills it and its
    cgroup goes."""
    (tmp_path / "box" / "out").mkdir(parents=True)
    (tmp_path / "box" / "here.txt").write_text("x")
    (tmp_path / "ro").mkdir()
    (tmp_path / "hidden.txt").write_text("secret")
    (tmp_path / "box" / "out" / "w").write_text("")
    server = (
        'while read p; do if [ "$p" = env ]; then echo "$CRF_ASK:$HOME"; '
        'elif [ ! -e "$p" ]; then echo "absent $p"; '
        'elif echo w > "$p" 2>/dev/null; then echo "wrote $p"; else echo "read-only $p"; fi; done'
    )
    box = Sandbox(SandboxConfig(limits=LIMITS)).spawn(
        ["sh", "-c", server],
        workdir=tmp_path / "box",
        ro_binds=[tmp_path / "ro"],
        env={"CRF_ASK": "asked"},
        writable=[Path("out")],
    )
    assert box.proc.stdin is not None and box.proc.stdout is not None
    answers = []
    for ask in (
        "env",
        tmp_path / "box" / "out" / "w",
        tmp_path / "box" / "here.txt",
        tmp_path / "ro",
        tmp_path / "hidden.txt",
    ):
        box.proc.stdin.write(f"{ask}\n".encode())
        box.proc.stdin.flush()
        answers.append(box.proc.stdout.readline().decode().strip())
    cgroups = list(box.cgroup.created if box.cgroup else [])
    box.close()
    box_dir = (tmp_path / "box").resolve()
    assert answers == [
        f"asked:{box_dir}",
        f"wrote {tmp_path / 'box' / 'out' / 'w'}",
        f"read-only {tmp_path / 'box' / 'here.txt'}",
        f"read-only {tmp_path / 'ro'}",
        f"absent {tmp_path / 'hidden.txt'}",
    ]
    assert (tmp_path / "box" / "here.txt").read_text() == "x" and (tmp_path / "box" / "out" / "w").read_text() == "w\n"
    assert (tmp_path / "hidden.txt").read_text() == "secret"
    assert box.proc.returncode is not None
    assert not any(p.exists() for p in cgroups)
    assert box.counters() == (0, 0)
