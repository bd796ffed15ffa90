"""Action normalisation: a canonical form of an agent action that different harnesses and models spell alike.

Tool names are mapped to a small vocabulary (Claude Code ``Bash``, OpenHands ``execute_bash`` and SWE-agent ``bash``
are all ``bash``; ``str_replace_editor`` is split by its ``command`` into read/write/edit), arguments are parsed
from their JSON string, cosmetic keys (``description``, ``timeout``, ``thought``, ``security_risk``...) dropped,
paths normalised (``os.path.normpath``, sandbox roots such as ``/testbed/`` and ``/workspace/<repo>/`` stripped),
strings whitespace-collapsed and keys sorted, i.e. the AST matching of calls of the Berkeley Function Calling
Leaderboard (BFCL).
SWE-agent ``xml``/``ticks`` trajectories keep the action as text; :func:`embedded_calls` parses it back into calls.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from crf_prime.records.models import Action

TOOL_ALIASES: dict[str, str] = {
    **dict.fromkeys(
        ["bash", "execute_bash", "run", "shell", "terminal", "run_command", "execute_command", "cmd", "run_shell"],
        "bash",
    ),
    **dict.fromkeys(["read", "view", "read_file", "open", "open_file", "cat", "view_file"], "read"),
    **dict.fromkeys(["write", "create", "create_file", "write_file", "write_to_file"], "write"),
    **dict.fromkeys(
        ["edit", "multiedit", "edit_file", "str_replace", "apply_patch", "insert", "replace_in_file"], "edit"
    ),
    **dict.fromkeys(
        ["grep", "glob", "search", "search_dir", "search_file", "find_file", "ls", "list_files", "list_dir"], "search"
    ),
    **dict.fromkeys(["finish", "submit", "attempt_completion", "task_complete", "done"], "finish"),
    **dict.fromkeys(["think", "todowrite"], "think"),
    **dict.fromkeys(["execute_ipython_cell", "python", "ipython"], "python"),
}
"""Lower-cased recorded tool name -> canonical tool."""

_EDITOR_COMMANDS = {"view": "read", "create": "write", "str_replace": "edit", "insert": "edit", "undo_edit": "edit"}

COSMETIC_KEYS = frozenset(
    {
        "description",
        "timeout",
        "security_risk",
        "thought",
        "is_input",
        "impl_source",
        "blocking",
        "hidden",
        "confirmation_state",
        "run_in_background",
    }
)
"""Argument keys that do not change what the step does."""

PATH_KEYS = frozenset({"path", "file_path", "filepath", "filename", "file", "dir", "directory", "notebook_path"})

_SANDBOX_ROOT = re.compile(r"^/(?:testbed|workspace/[^/]+|repo|app)(?:/|$)")


def normalise_path(path: str) -> str:
    """``/testbed/a/../b.py`` -> ``b.py``; ``/workspace/proj/x`` -> ``x``; ``./x`` -> ``x``."""
    p = _SANDBOX_ROOT.sub("", path.strip())
    return os.path.normpath(p) if p else "."


def collapse(text: str) -> str:
    return " ".join(text.split())


def command_argv(command: str) -> tuple[str, list[str] | None]:
    """A shell command reduced to the step it takes: ``(collapsed command, argv)``, argv None when shlex cannot split it.

    ``cd DIR &&`` prefixes are dropped (the working directory is context, not the step) and ``python -m MOD ...``
    reads as ``MOD ...``; both the equivalence key and the content key start from this.
    """
    cmd = collapse(command)
    while cmd.startswith("cd ") and "&&" in cmd:
        cmd = cmd.split("&&", 1)[1].strip()
    try:
        argv = shlex.split(cmd)
    except ValueError:
        return cmd, None
    if len(argv) >= 3 and argv[0].startswith("python") and argv[1] == "-m":
        argv = argv[2:]
    return cmd, argv


def _norm_value(key: str, value: Any) -> Any:
    if isinstance(value, str):
        return normalise_path(value) if key in PATH_KEYS else collapse(value)
    if isinstance(value, dict):
        return {k: _norm_value(k, v) for k, v in sorted(value.items()) if k not in COSMETIC_KEYS}
    if isinstance(value, list):
        return [_norm_value(key, v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def parse_arguments(arguments: str) -> dict[str, Any] | None:
    """The arguments as a dict; None when they are not a JSON object (a malformed call)."""
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


@dataclass(frozen=True)
class CanonicalCall:
    name: str
    """Canonical tool (``bash``, ``read``, ``edit``, ...) or the lower-cased recorded name when unknown."""
    args: str
    """Normalised arguments as sorted-key JSON (the raw string collapsed when not valid JSON)."""
    raw: str = field(default="", compare=False, repr=False)
    """The recorded arguments string, whitespace intact (edit and write content is compared on it)."""

    def arguments(self) -> dict[str, Any]:
        return parse_arguments(self.args) or {}

    def raw_arguments(self) -> dict[str, Any]:
        """The recorded arguments as a dict (strings not collapsed); ``{}`` when they are not a JSON object."""
        return parse_arguments(self.raw) or {}


@dataclass(frozen=True)
class CanonicalAction:
    calls: tuple[CanonicalCall, ...]
    text: str
    """Lower-cased, whitespace-collapsed visible text (compared only for actions without calls)."""


def canonical_call(name: str, arguments: str) -> CanonicalCall:
    raw = name.strip()
    lowered = raw.lower()
    if lowered.startswith("mcp__"):
        lowered = lowered.rsplit("__", 1)[-1]
    args = parse_arguments(arguments)
    if args is None:
        return CanonicalCall(TOOL_ALIASES.get(lowered, lowered), collapse(arguments), arguments)
    if lowered == "str_replace_editor":
        canonical = _EDITOR_COMMANDS.get(str(args.get("command", "")), "edit")
        args = {k: v for k, v in args.items() if k != "command"}
    else:
        canonical = TOOL_ALIASES.get(lowered, lowered)
    norm = _norm_value("", args)
    return CanonicalCall(canonical, json.dumps(norm, sort_keys=True, ensure_ascii=False), arguments)


_XML_FUNCTION = re.compile(r"<function=([\w.-]+)>(.*?)</function>", re.S)
_XML_PARAM = re.compile(r"<parameter=([\w.-]+)>(.*?)</parameter>", re.S)
_TRAILING_FENCE = re.compile(r"```(?:bash|sh|shell|console)?\n(.*?)```\s*$", re.S)


def embedded_calls(text: str) -> list[tuple[str, str]]:
    """(name, JSON arguments) of actions written as text: SWE-agent ``xml`` (``<function=bash>...``) or ``ticks``
    (a shell block that ends the message is the command; ``submit`` is the finish action). Prose that merely
    contains code (a fenced block in the middle, or a ``python`` block) is not an action."""
    xml = _XML_FUNCTION.findall(text)
    if xml:
        return [(n, json.dumps({k: v.strip("\n") for k, v in _XML_PARAM.findall(body)})) for n, body in xml]
    fence = _TRAILING_FENCE.search(text)
    if fence:
        command = fence.group(1).strip()
        if command.split()[:1] == ["submit"]:
            return [("submit", "{}")]
        return [("bash", json.dumps({"command": command}))]
    return []


def canonical_action(action: Action) -> CanonicalAction:
    """Canonical form; text-embedded SWE-agent actions count as calls."""
    pairs = [(c.name, c.arguments) for c in action.tool_calls] or embedded_calls(action.text)
    # think/todo calls carry no environment effect: they never make two steps differ
    calls = tuple(c for c in (canonical_call(n, a) for n, a in pairs) if c.name != "think")
    return CanonicalAction(calls=calls, text=collapse(action.text).lower() if not pairs else "")
