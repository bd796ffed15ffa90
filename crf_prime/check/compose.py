"""``uv run rl``'s argument composition as a plain dict, for checking without prime-rl installed.

prime-pydantic-config (the CLI library of prime-rl and verifiers) composes ``@ a.toml @ b.toml`` left to right: tables
merge key by key, every other value — lists included — is replaced whole; ``--key @ file`` nests a file under a key;
``--a.b-c VALUE`` overrides one leaf (dashes become underscores). Without the target class the value's type is unknown,
so it stays the string the shell gave — exactly what reaches an untyped dict such as ``trainer.loss.kwargs`` when a
flag mixes with TOML values. When prime-rl is importable, its own ``cli(RLConfig)`` parses the same arguments too.
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crf_prime.errors import InputError

CONFIG_SIGN = "@"
OWN_PREFIX = "--check."


class ArgsError(InputError):
    """An argument list that ``uv run rl`` would not accept either (missing file, bad TOML, dangling ``@``)."""


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` onto ``base``: tables merge key by key, everything else (lists too) is replaced."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(out.get(key), dict) and isinstance(value, dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_toml(path: str | Path) -> dict[str, Any]:
    """A config file's table; errors name the file (and line, from tomllib)."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ArgsError(f"{path}: config file not found") from None
    except tomllib.TOMLDecodeError as e:
        raise ArgsError(f"{path}: invalid TOML: {e}") from None


def nest(dotted: str, value: Any) -> dict[str, Any]:
    """``"a.b-c", v`` → ``{"a": {"b_c": v}}``."""
    out: Any = value
    for part in reversed(dotted.replace("-", "_").split(".")):
        out = {part: out}
    return out


def split_own_args(args: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """``--check.<field> VALUE`` pairs (the check's own settings) apart from the run's arguments."""
    own: dict[str, str] = {}
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith(OWN_PREFIX):
            name, eq, value = arg[len(OWN_PREFIX) :].partition("=")
            if not eq:
                if i + 1 >= len(args):
                    raise ArgsError(f"{arg} needs a value")
                value, i = args[i + 1], i + 1
            own[name.replace("-", "_")] = value
        else:
            rest.append(arg)
        i += 1
    return own, rest


def _is_value(token: str) -> bool:
    return not token.startswith("--") and token != CONFIG_SIGN


def compose_args(args: Sequence[str], base_dir: Path = Path(".")) -> dict[str, Any]:
    """The config dict ``uv run rl <args>`` starts from: files in order, then the ``--key value`` overrides."""
    files: dict[str, Any] = {}
    overrides: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == CONFIG_SIGN:
            if i + 1 >= len(args):
                raise ArgsError("@ must be followed by a config file path")
            files = deep_merge(files, load_toml(base_dir / args[i + 1]))
            i += 2
            continue
        if not arg.startswith("--"):
            raise ArgsError(f"unexpected argument {arg!r} (expected '@ FILE' or '--key value')")
        key, eq, value = arg[2:].partition("=")
        if eq:
            overrides = deep_merge(overrides, nest(key, value))
            i += 1
            continue
        following = list(args[i + 1 :])
        if following[:1] == [CONFIG_SIGN] or (following and following[0].startswith(CONFIG_SIGN)):
            path = following[1] if following[0] == CONFIG_SIGN else following[0][1:]
            files = deep_merge(files, nest(key, load_toml(base_dir / path)))
            i += 3 if following[0] == CONFIG_SIGN else 2
            continue
        values = []
        while following and _is_value(following[0]):
            values.append(following.pop(0))
        if not values:  # a bare flag: --flag → True, --no-flag → False
            negated = key.startswith("no-")
            overrides = deep_merge(overrides, nest(key[3:] if negated else key, not negated))
        else:
            overrides = deep_merge(overrides, nest(key, values[0] if len(values) == 1 else values))
        i += 1 + len(values)
    return deep_merge(files, overrides)
