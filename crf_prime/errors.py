"""The one error base: every error a user can meet derives from :class:`CrfError` and carries its exit code.

``crf_prime.cli.main`` handles it once: one line on stderr, the class's exit code. The codes are the same across
commands (docs/cli.md has the table): a caller of ``crf-prime`` can tell bad input from a budget stop from a broken
host without reading the message.
"""

from __future__ import annotations

from enum import IntEnum
from pathlib import Path
from typing import ClassVar


class ExitCode(IntEnum):
    """Exit codes of every ``crf-prime`` command."""

    OK = 0
    NEGATIVE = 1
    """The command's negative result, where it has one: not resolved, gold fails, the config check found problems."""
    BAD_INPUT = 2
    """A config field, flag or input file is wrong; the message names it (file:line or the field)."""
    BUDGET = 3
    """A budget cap stopped the work before it finished; nothing paid for was lost."""
    INFRA = 4
    """A host failed: sandbox, runtime, network, teacher server, port in use."""
    NOTHING = 5
    """The command produced nothing it was asked to produce, or every unit of work failed."""
    MISSING_EXTRA = 6
    """An optional host package is not installed; the message names the extra."""
    INTERRUPTED = 130
    """SIGINT / SIGTERM; temporary files were removed."""


class CrfError(Exception):
    """Base of every crf-prime error a user can meet; ``exit_code`` says which kind it is."""

    exit_code: ClassVar[ExitCode] = ExitCode.INFRA


class InputError(CrfError, ValueError):
    """Bad input: a config field, a flag or a file. The message names the field or ``file:line``."""

    exit_code = ExitCode.BAD_INPUT

    @classmethod
    def at(cls, path: str | Path, line: int | None, message: str) -> InputError:
        """An error located in a file (``line`` is 1-based; None when the file as a whole is wrong)."""
        where = f"{path}:{line}" if line is not None else str(path)
        return cls(f"{where}: {message}")

    @classmethod
    def field(cls, name: str, message: str) -> InputError:
        """An error in one config field, named as the user writes it (``pool.tiered``)."""
        return cls(f"{name}: {message}")


class NegativeResult(CrfError):
    """The command ran and its answer is no (not resolved, gold fails): not an error of the tool."""

    exit_code = ExitCode.NEGATIVE


class BudgetExhausted(CrfError):
    """A budget cap stopped the work; what was paid for is kept."""

    exit_code = ExitCode.BUDGET


class InfraError(CrfError, RuntimeError):
    """A host the command depends on failed; never scored as a wrong answer."""

    exit_code = ExitCode.INFRA


class NothingProduced(CrfError):
    """The command was asked for output and produced none, or every unit of work failed."""

    exit_code = ExitCode.NOTHING
