"""``crf-prime sandbox probe`` (can this host isolate, which limits are enforced) and ``crf-prime sandbox run``."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sandbox",
        help="probe the bubblewrap sandbox or run a command in it (crf-prime addition)",
        description="The bubblewrap sandbox every crf-prime environment runs model-written commands in.",
    )
    sub = parser.add_subparsers(dest="sandbox_command", metavar="SUBCOMMAND", required=True)
    probe = sub.add_parser("probe", help="check isolation on this host and print the limits it can enforce")
    probe.add_argument("--bwrap", default=None, help="bubblewrap binary (default: $CRF_SANDBOX_BWRAP or bwrap)")
    probe.add_argument("--json", action="store_true", help="print the status as JSON")
    probe.set_defaults(func=probe_command)

    run = sub.add_parser("run", help="run a command in a box: crf-prime sandbox run [OPTIONS] -- CMD [ARGS...]")
    run.add_argument("--workdir", default=".", help="task directory, bound writable at its own path (default: .)")
    run.add_argument("--ro-bind", action="append", default=[], metavar="PATH", help="extra read-only bind")
    run.add_argument("--protect", action="append", default=[], metavar="PATH", help="read-only path inside workdir")
    run.add_argument("--wall", type=float, default=60.0, help="wall-clock limit in seconds (default 60)")
    run.add_argument("--memory-mb", type=int, default=2048, help="memory limit in MiB (default 2048)")
    run.add_argument("--pids", type=int, default=256, help="process limit (default 256)")
    run.add_argument("--cpu", type=int, default=None, help="CPU seconds per process (default unlimited)")
    run.add_argument("--unsandboxed", action="store_true", help="run WITHOUT isolation (explicit opt-out)")
    run.add_argument("--bwrap", default=None, help="bubblewrap binary")
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    run.set_defaults(func=run_command)


def probe_command(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from crf_prime.sandbox.probe import probe

    status = probe(args.bwrap)
    console = Console()
    if args.json:
        console.print_json(status.model_dump_json())
        return 0 if status.available else 1
    table = Table(title="crf-prime sandbox", show_header=False)
    table.add_row("status", "[green]available[/]" if status.available else "[red]UNAVAILABLE[/]")
    table.add_row("reason", status.reason)
    table.add_row("bubblewrap", f"{status.bwrap or '-'} ({status.bwrap_version or '-'})")
    table.add_row("cgroup", f"{status.cgroup or 'none'} {', '.join(status.cgroup_controllers)}")
    table.add_row("enforced", "\n".join(status.enforced))
    table.add_row("not enforced", "\n".join(status.not_enforced) or "-")
    table.add_row("probe time", f"{status.probe_s * 1000:.0f} ms")
    console.print(table)
    return 0 if status.available else 1


def run_command(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from crf_prime.sandbox import Sandbox, SandboxLimits, SandboxUnavailable

    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        print(
            "crf-prime sandbox run: no command given (usage: crf-prime sandbox run [OPTIONS] -- CMD)", file=sys.stderr
        )
        return 2
    limits = SandboxLimits(wall_seconds=args.wall, memory_mb=args.memory_mb, pids=args.pids, cpu_seconds=args.cpu)
    try:
        box = Sandbox(limits, unsandboxed=args.unsandboxed, bwrap=args.bwrap)
    except SandboxUnavailable as e:
        print(f"crf-prime sandbox: {e}", file=sys.stderr)
        return 1
    result = box.run(
        cmd,
        workdir=Path(args.workdir),
        ro_binds=[Path(p) for p in args.ro_bind],
        protected=[Path(p) for p in args.protect],
    )
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    if result.limit_hit:
        print(f"crf-prime sandbox: limit hit: {result.limit_hit}", file=sys.stderr)
    return result.exit_code if result.exit_code is not None else 124
