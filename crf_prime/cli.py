"""The ``crf-prime`` command line: the config is the CLI.

Every command is a library function of one pydantic config, ``def run(config: SomeConfig) -> int | None``, parsed
the way ``uv run rl`` and vf-eval parse theirs (prime-pydantic-config: ``@ file.toml``, ``--group.field value``,
``--no-flag``), so a flag, a TOML key and a taskset field share one name and one default. Commands are named
``<package> <verb>`` after the package that holds them. Errors derive from :class:`crf_prime.errors.CrfError` and are
handled here, once: one line on stderr and the error's exit code.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import signal
import sys
import textwrap
import threading
import typing
from collections.abc import Callable, Iterator, Sequence

from crf_prime import __version__

if typing.TYPE_CHECKING:
    from pydantic import BaseModel

from crf_prime.errors import CrfError, ExitCode

# command → "module:function"; the function's one parameter is annotated with its config class (or ``list[str]``
# for a command that takes another program's arguments verbatim, like ``check``). Listed in --help order.
COMMANDS: dict[str, str] = {
    "featdel generate": "crf_prime.featdel.cli:generate",
    "featdel validate": "crf_prime.featdel.cli:validate",
    "featdel corpus": "crf_prime.featdel.cli:corpus",
    "sandbox probe": "crf_prime.sandbox.cli:probe",
    "sandbox run": "crf_prime.sandbox.cli:run",
    "swe grade": "crf_prime.swe.cli:grade",
    "swe mini-fixture": "crf_prime.swe.cli:mini_fixture",
    "swe test-cmd": "crf_prime.swe.cli:test_cmd",
    "hints": "crf_prime.hints.cli:run",
    "traces ingest": "crf_prime.traces.cli:run",
    "teachers replay": "crf_prime.teachers.cli:run",
    "pairs": "crf_prime.pairs.cli:run",
    "report": "crf_prime.report.cli:run",
    "check": "crf_prime.check.cli:run",
    "relay serve": "crf_prime.relay.cli:serve",
    "relay pull": "crf_prime.relay.cli:pull",
    "loopback serve": "crf_prime.loopback.cli:serve",
}

PROG = "crf-prime"
DESCRIPTION = (
    "Cursor's Composer 2.5 post-training recipe for prime-rl + verifiers. Channels 1-2 (RLVR, hint "
    "self-distillation) follow Cursor's recipe; channel 3 (trace replay) is crf-prime's own addition."
)


def load(target: str) -> Callable[..., int | None]:
    """Import ``module:function`` of a command."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def config_type(func: Callable[..., object]) -> type[BaseModel]:
    """The config class a command function takes: the annotation of its one parameter."""
    (param,) = inspect.signature(func).parameters.values()
    return typing.get_type_hints(func)[param.name]


def summary(func: Callable[..., object]) -> str:
    """First line of a command's docstring: its one-line help."""
    return (inspect.getdoc(func) or "").split("\n", 1)[0]


def split_command(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """The longest command name that prefixes ``argv`` and the arguments after it."""
    for n in (2, 1):
        name = " ".join(argv[:n])
        if len(argv) >= n and name in COMMANDS:
            return name, list(argv[n:])
    return None, list(argv)


def parse(name: str, args: list[str]) -> object:
    """Parse a command's arguments into its config (``list[str]`` commands get them verbatim)."""
    # start-up: `import crf_prime.cli` loads only the errors; each command pays for its own
    from pydantic_config import ConfigFileError, cli

    func = load(COMMANDS[name])
    cls = config_type(func)
    if cls == list[str]:
        return args
    own = args[: args.index("--")] if "--" in args else args
    if "-h" in own or "--help" in own:  # our renderer: 80 columns, effective defaults and ranges
        # start-up: `import crf_prime.cli` loads only the errors; each command pays for its own
        from crf_prime.clihelp import render

        sys.stdout.write(render(cls, f"{PROG} {name}", inspect.getdoc(func) or ""))
        raise SystemExit(0)
    argv: list[str] | None = None
    if "--" in args:  # ``-- CMD ARGS``: a program's own argv, for a config with an ``argv`` field
        i = args.index("--")
        args, argv = args[:i], args[i + 1 :]
        if "argv" not in cls.model_fields:
            raise ConfigFileError(f"`--` passes a program's arguments; {PROG} {name} runs no program")
    config = cli(cls, args=args, prog=f"{PROG} {name}", description=inspect.getdoc(func))
    return config if argv is None else config.model_copy(update={"argv": argv})


def config_files(args: Sequence[str]) -> list[str]:
    """The files an argument list loads (``@ a.toml``, ``@a.toml``, ``--pool @ pool.toml``): named in a config error,
    since a field's value may come from any of them."""
    files = []
    for i, arg in enumerate(args):
        if arg == "@" and i + 1 < len(args):
            files.append(args[i + 1])
        elif arg.startswith("@") and len(arg) > 1:
            files.append(arg[1:])
    return files


def run(name: str, args: list[str]) -> int:
    """Parse and run one command; every user-facing error becomes one stderr line and its exit code."""
    # start-up: `import crf_prime.cli` loads only the errors; each command pays for its own
    from pydantic_config import ConfigFileError

    try:
        config = parse(name, args)
        with signals_interrupt():
            return int(load(COMMANDS[name])(config) or 0)
    except ConfigFileError as e:
        files = config_files(args)
        return fail(name, e.message + (f" (config: {', '.join(files)})" if files else ""), ExitCode.BAD_INPUT)
    except CrfError as e:
        return fail(name, str(e), e.exit_code)
    except KeyboardInterrupt:
        return fail(name, "interrupted", ExitCode.INTERRUPTED)


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGINT raise KeyboardInterrupt: every ``finally`` runs (temp outputs, staging trees and boxes are
    removed) and the command exits 130."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    # SIGINT too: a process started in the background inherits SIGINT ignored, and Ctrl-C / kill -INT must still stop it
    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def fail(name: str, message: str, code: int) -> int:
    """One stderr line: prime-pydantic-config's multi-line validation report is folded onto it."""
    print(f"{PROG} {name}: error: {one_line(message)}", file=sys.stderr)
    return int(code)


def one_line(message: str) -> str:
    """``--n-boot\n  Input should be …`` → ``--n-boot: Input should be …``, errors joined with ``; ``."""
    head, *rest = message.strip().splitlines() or [""]
    items: list[str] = []
    for line in rest:
        if line.startswith(" ") and items:
            items[-1] += (": " if items[-1].startswith("--") and ": " not in items[-1] else " ") + line.strip()
        else:
            items.append(line.strip())
    return "; ".join([head.rstrip(":"), *items]) if items else head


def print_help(group: str | None = None) -> None:
    """The command list at 80 columns, each summary wrapped under its command name; ``group``: only its commands
    (``crf-prime featdel --help``)."""

    if group is None:
        lines = [f"usage: {PROG} COMMAND [@ config.toml] [--field value ...]", "", *textwrap.wrap(DESCRIPTION, 80), ""]
    else:
        lines = [f"usage: {PROG} {group} COMMAND [@ config.toml] [--field value ...]", ""]
    lines.append("commands:")
    for name, target in COMMANDS.items():
        if group is None or name.startswith(f"{group} "):
            lines += textwrap.wrap(
                summary(load(target)), 80, initial_indent=f"  {name:<18} ", subsequent_indent=" " * 21
            )
    lines += ["", f"`{PROG} COMMAND --help` shows a command's fields, defaults and ranges;", "exit codes: docs/cli.md"]
    print("\n".join(lines))


def group_commands(group: str) -> list[str]:
    """The commands under ``group`` (``featdel`` -> generate, validate, corpus); empty for a single command."""
    return [n.split(" ", 1)[1] for n in COMMANDS if n.startswith(f"{group} ")]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print_help()
        return 0 if argv else int(ExitCode.BAD_INPUT)
    if argv[0] == "--version":
        print(f"{PROG} {__version__}")
        return 0
    name, args = split_command(argv)
    if name is None and (subs := group_commands(argv[0])):
        if argv[1:2] in ([], ["-h"], ["--help"]):  # the group alone, as the top level: its list (exit 2 bare)
            print_help(argv[0])
            return 0 if argv[1:] else int(ExitCode.BAD_INPUT)
        return fail(" ".join(argv[:2]), f"unknown command; the {argv[0]} commands are {', '.join(subs)} (--help)", 2)
    if name is None:
        known = sorted({n.split()[0] for n in COMMANDS})
        return fail(" ".join(argv[:2]), f"unknown command; the commands are {', '.join(known)} (--help)", 2)
    try:
        return run(name, args)
    except SystemExit as e:  # --help
        return int(e.code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
