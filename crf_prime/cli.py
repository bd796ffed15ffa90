"""The ``crf-prime`` command line: the config is the CLI.

Every command is a library function of one pydantic config, ``def run(config: SomeConfig) -> int | None``, parsed
the way ``uv run rl`` and vf-eval parse theirs (prime-pydantic-config: ``@ file.toml``, ``--group.field value``,
``--no-flag``), so a flag, a TOML key and a taskset field share one name and one default. Commands are named
``<package> <verb>`` after the package that holds them. Errors derive from :class:`crf_prime.errors.CrfError` and are
handled here, once: one line on stderr and the error's exit code.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import typing
from collections.abc import Callable, Sequence

from crf_prime.errors import CrfError, ExitCode

# command → "module:function"; the function's one parameter is annotated with its config class (or ``list[str]``
# for a command that takes another program's arguments verbatim, like ``check``). Listed in --help order.
COMMANDS: dict[str, str] = {
    "report": "crf_prime.report.cli:run",
    "featdel corpus": "crf_prime.featdel.corpus:corpus",
}

# commands not yet moved onto the config CLI: modules with ``register(subparsers)`` (argparse)
LEGACY_MODULES: tuple[str, ...] = (
    "crf_prime.featdel.cli",
    "crf_prime.sandbox.cli",
    "crf_prime.swe.cli",
    "crf_prime.traces.cli",
    "crf_prime.teachers.cli",
    "crf_prime.pairs.cli",
    "crf_prime.hints.cli",
    "crf_prime.relay.cli",
    "crf_prime.check.cli",
)

PROG = "crf-prime"
DESCRIPTION = (
    "Cursor's Composer 2.5 post-training recipe for prime-rl + verifiers. Channels 1-2 (RLVR, hint "
    "self-distillation) follow Cursor's recipe; channel 3 (trace replay) is crf-prime's own addition."
)


def load(target: str) -> Callable[..., int | None]:
    """Import ``module:function`` of a command."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def config_type(func: Callable[..., object]) -> type:
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
    from pydantic_config import ConfigFileError, cli

    func = load(COMMANDS[name])
    cls = config_type(func)
    if cls == list[str]:
        return args
    argv: list[str] | None = None
    if "--" in args:  # ``-- CMD ARGS``: a program's own argv, for a config with an ``argv`` field
        i = args.index("--")
        args, argv = args[:i], args[i + 1 :]
        if "argv" not in cls.model_fields:
            raise ConfigFileError(f"`--` passes a program's arguments; {PROG} {name} runs no program")
    config = cli(cls, args=args, prog=f"{PROG} {name}", description=inspect.getdoc(func))
    return config if argv is None else config.model_copy(update={"argv": argv})


def run(name: str, args: list[str]) -> int:
    """Parse and run one command; every user-facing error becomes one stderr line and its exit code."""
    from pydantic_config import ConfigFileError

    try:
        config = parse(name, args)
        return int(load(COMMANDS[name])(config) or 0)
    except ConfigFileError as e:
        return fail(name, e.message, ExitCode.BAD_INPUT)
    except CrfError as e:
        return fail(name, str(e), e.exit_code)
    except KeyboardInterrupt:
        return fail(name, "interrupted", ExitCode.INTERRUPTED)


def fail(name: str, message: str, code: int) -> int:
    print(f"{PROG} {name}: error: {message}", file=sys.stderr)
    return int(code)


def print_help() -> None:
    lines = [f"usage: {PROG} COMMAND [@ config.toml] [--field value ...]", "", DESCRIPTION, "", "commands:"]
    for name, target in COMMANDS.items():
        lines.append(f"  {name:<20} {summary(load(target))}")
    parser = legacy_parser()
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        for choice in action._choices_actions:
            lines.append(f"  {choice.dest:<20} {choice.help or ''}")
    lines += ["", f"`{PROG} COMMAND --help` shows a command's fields; exit codes: docs/cli.md"]
    print("\n".join(lines))


def legacy_parser():
    import argparse

    parser = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in LEGACY_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name is None or not (name == e.name or name.startswith(e.name + ".")):
                raise
            continue
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print_help()
        return 0 if argv else int(ExitCode.BAD_INPUT)
    if argv[0] == "--version":
        from crf_prime import __version__

        print(f"{PROG} {__version__}")
        return 0
    name, args = split_command(argv)
    if name is not None:
        try:
            return run(name, args)
        except SystemExit as e:  # --help
            return int(e.code or 0)
    parser = legacy_parser()
    parsed = parser.parse_args(argv)
    func = getattr(parsed, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(parsed) or 0)
    except CrfError as e:
        return fail(parsed.command, str(e), e.exit_code)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
