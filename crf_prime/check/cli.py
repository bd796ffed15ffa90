"""``crf-prime check @ a.toml @ b.toml [--key value …] [--check.base-dir DIR] [--check.prime-rl auto|require|skip]``.

Every argument but ``--check.*`` is the run's own, as ``uv run rl`` takes it, so the command receives them verbatim;
the check's settings are :class:`~crf_prime.check.models.CheckConfig`, parsed by prime-pydantic-config like every
other command's config.
"""

from __future__ import annotations

import sys

from pydantic_config import ConfigFileError, cli

from crf_prime.check.compose import split_own_args
from crf_prime.check.models import CheckConfig
from crf_prime.check.run import check
from crf_prime.clihelp import render
from crf_prime.errors import InputError

USAGE = "@ a.toml [@ b.toml ...] [--key value ...] [--check.FIELD VALUE ...]"

DESCRIPTION = """Validate a prime-rl run config before launch, composed exactly as `uv run rl` composes the same
arguments: prime-rl's RLConfig (when importable: installed, or CRF_PRIME_RL_SRC), crf-prime's loss kwargs
(trainer.loss.kwargs.*), every source's taskset and harness config, that task directories, states, journals and
teachers files exist; then print the channel mix per step.

Exit 0 when ready; 1 with every problem named by its key (stdout); 2 when the arguments cannot be read (a missing
or malformed @ file, a bad --check value: one line on stderr)."""


def run(args: list[str]) -> int:
    """Validate a prime-rl run config (@ a.toml @ b.toml --key value) before launch; print the channel mix."""

    from crf_prime.check.report import print_report  # start-up: +80 ms on every command

    if not args or "-h" in args or "--help" in args:
        sys.stdout.write(render(CheckConfig, "crf-prime check", DESCRIPTION, usage=USAGE, prefix="check"))
        return 0 if args else 2
    own, rl_args = split_own_args(args)
    try:
        config = cli(CheckConfig, args=[token for name, value in own.items() for token in (f"--{name}", value)])
    except ConfigFileError as e:
        raise InputError(e.message.replace("\n--", "\n--check.")) from e  # name the flags as the user typed them
    report = check(rl_args, config)
    print_report(report)
    return 0 if report.ok else 1
