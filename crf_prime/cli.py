"""The ``crf-prime`` command line: a thin dispatcher over the library.

Each command lives next to its concern as ``crf_prime.<concern>.cli`` and exposes ``register(subparsers)``; that
module imports only argparse at import time so ``crf-prime --help`` stays fast. Every command handler is a plain
function of parsed arguments that tests call without a subprocess.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# command modules, in the order they appear in --help
COMMAND_MODULES: tuple[str, ...] = (
    "crf_prime.featdel.cli",
    "crf_prime.sandbox.cli",
    "crf_prime.swe.cli",
    "crf_prime.traces.cli",
    "crf_prime.teachers.cli",
    "crf_prime.pairs.cli",
    "crf_prime.hints.cli",
    "crf_prime.report.cli",
    "crf_prime.relay.cli",
    "crf_prime.check.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crf-prime",
        description=(
            "Cursor's Composer 2.5 post-training recipe for prime-rl + verifiers. Channels 1-2 (RLVR, hint "
            "self-distillation) follow Cursor's recipe; channel 3 (trace replay) is crf-prime's own addition."
        ),
    )
    from crf_prime import __version__

    parser.add_argument("--version", action="version", version=f"crf-prime {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            # skip a command whose module (or parent package) is absent; re-raise errors from inside one
            if e.name is None or not (name == e.name or name.startswith(e.name + ".")):
                raise
            continue
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    result = func(args)
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
