"""``crf-prime check @ a.toml @ b.toml [--key value …] [--check.base-dir DIR] [--check.prime-rl auto|require|skip]``.

Every argument but ``--check.*`` is the run's own, as ``uv run rl`` takes it (argparse sees them as plain words; the
check's settings are a pydantic model parsed by prime-pydantic-config, like every prime-rl and verifiers CLI).
"""

from __future__ import annotations

import argparse
import sys

USAGE = """usage: crf-prime check @ a.toml [@ b.toml …] [--key value …] [--check.base-dir DIR] [--check.prime-rl MODE]

Validate a prime-rl run config before launch, composed exactly as `uv run rl` composes the same arguments:
prime-rl's RLConfig (when importable: installed, or CRF_PRIME_RL_SRC), crf-prime's loss kwargs
(trainer.loss.kwargs.*), every source's taskset and harness config, that task directories, states, journals and
teachers files exist; then print the channel mix per step. Exit 0 when ready, 1 with every problem named by its key.

  --check.base-dir DIR      launch directory of `uv run rl` (default: here); relative paths resolve against it
  --check.prime-rl MODE     auto (default) | require | skip: validate with prime-rl's own RLConfig
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "check",
        help="validate a prime-rl run config (@ a.toml @ b.toml --key value) before launch; print the channel mix",
        description=USAGE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        prefix_chars="+",  # the run's --flags are arguments of the check, not options of this parser
        add_help=False,
    )
    p.add_argument("args", nargs="*", metavar="ARG", help="`uv run rl` arguments")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pydantic_config import ConfigFileError, cli

    from crf_prime.check.compose import ArgsError, split_own_args
    from crf_prime.check.models import CheckConfig
    from crf_prime.check.report import print_report
    from crf_prime.check.run import check

    if not args.args or args.args[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0 if args.args else 2
    try:
        own, rl_args = split_own_args(args.args)
        config = cli(CheckConfig, args=[token for name, value in own.items() for token in (f"--{name}", value)])
    except (ArgsError, ConfigFileError) as e:
        message = str(e).replace("\n--", "\n--check.")  # name the flags as the user typed them
        print(f"crf-prime check: {message}", file=sys.stderr)
        return 2
    report = check(rl_args, config)
    print_report(report)
    return 0 if report.ok else 1
