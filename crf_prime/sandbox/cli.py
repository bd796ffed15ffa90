"""``crf-prime sandbox probe`` (can this host isolate, which limits are enforced) and ``crf-prime sandbox run``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

from pydantic_config import BaseConfig

from crf_prime.errors import InputError
from crf_prime.sandbox.box import Sandbox
from crf_prime.sandbox.models import SandboxConfig


class ProbeConfig(BaseConfig):
    bwrap: str | None = None
    """bubblewrap binary (default: $CRF_SANDBOX_BWRAP, else ``bwrap`` on PATH)."""
    format: Literal["table", "json"] = "table"
    """Print the status as a table or as JSON."""


class RunConfig(SandboxConfig, BaseConfig):
    workdir: Path = Path(".")
    """Task directory (must exist), bound writable at its own path."""
    ro_binds: list[Path] = []
    """Extra host paths visible read-only in the box."""
    protected: list[Path] = []
    """Paths inside ``workdir`` (relative to it) re-bound read-only."""
    argv: list[str] = []
    """The command and its arguments, after a literal ``--``."""


def probe(config: ProbeConfig) -> int:
    """Check isolation on this host and print the limits it can enforce (exit 1: it cannot isolate)."""
    from rich.console import Console  # start-up: +341 ms on every command
    from rich.table import Table  # start-up: +55 ms on every command

    from crf_prime.sandbox.probe import probe  # name clash with this module's own definition

    status = probe(config.bwrap)
    console = Console()
    if config.format == "json":
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


def run(config: RunConfig) -> int:
    """Run a command in a box: crf-prime sandbox run [--field value ...] -- CMD [ARGS...] (exit: the command's)."""
    if not config.argv:
        raise InputError.field("argv", "no command given (crf-prime sandbox run [--field value ...] -- CMD [ARGS])")
    if not config.workdir.is_dir():
        raise InputError.field("workdir", f"{config.workdir} is not an existing directory")
    box = Sandbox(config)
    try:
        result = box.run(config.argv, workdir=config.workdir, ro_binds=config.ro_binds, protected=config.protected)
    except ValueError as e:  # the box refuses a bind or workdir before running anything; the message names the field
        raise InputError(str(e)) from None
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    if result.limit_hit:
        print(f"crf-prime sandbox run: limit hit: {result.limit_hit}", file=sys.stderr)
    return result.exit_code if result.exit_code is not None else 124
