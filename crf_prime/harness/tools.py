"""The agent's tools (bash, view, edit, submit): OpenAI function schemas, the in-box programs, result formatting.

``view`` and ``edit`` run as small Python programs *inside* the box, like ``bash``, so a path that points outside
the task directory (``/etc/shadow``, a planted symlink) resolves in the box's filesystem, never the host's.
"""

from __future__ import annotations

from dataclasses import dataclass

TOOL_NAMES = ("bash", "view", "edit", "submit")

TOOL_SCHEMAS: dict[str, dict] = {
    "bash": {
        "type": "function",
        "function": {
            "name": "bash",
            "description": (
                "Run a shell command (bash -c) in the task directory, in an isolated sandbox with no network. "
                "Returns stdout, stderr and the exit code."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The shell command to run."},
                    "timeout": {"type": "number", "description": "Seconds before the command is killed (optional)."},
                },
                "required": ["command"],
            },
        },
    },
    "view": {
        "type": "function",
        "function": {
            "name": "view",
            "description": "Show a file with line numbers (optionally a line range), or list a directory.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File or directory, relative to the task directory."},
                    "start_line": {"type": "integer", "description": "First line to show (1-based, optional)."},
                    "end_line": {"type": "integer", "description": "Last line to show (inclusive, optional)."},
                },
                "required": ["path"],
            },
        },
    },
    "edit": {
        "type": "function",
        "function": {
            "name": "edit",
            "description": (
                "Replace exactly one occurrence of old_str with new_str in a file. With an empty old_str, create "
                "the file (or overwrite it) with new_str."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "old_str": {"type": "string"},
                    "new_str": {"type": "string"},
                },
                "required": ["path", "old_str", "new_str"],
            },
        },
    },
    "submit": {
        "type": "function",
        "function": {
            "name": "submit",
            "description": "Finish the task. Call this once your changes are complete.",
            "parameters": {
                "type": "object",
                "properties": {"summary": {"type": "string", "description": "What you changed (optional)."}},
            },
        },
    },
}

# Both programs take one JSON argument and print the tool result; exit 1 (with "error: ...") on bad input.
VIEW_PROGRAM = r"""
import json, os, sys
a = json.loads(sys.argv[1]); path = a["path"]; limit = int(a.get("max_chars", 20000))
try:
    if os.path.isdir(path):
        names = sorted(os.listdir(path))
        print("\n".join(n + ("/" if os.path.isdir(os.path.join(path, n)) else "") for n in names)[:limit])
        sys.exit(0)
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
except OSError as e:
    print(f"error: cannot view {path}: {e.strerror}"); sys.exit(1)
start = max(1, int(a.get("start_line") or 1)); end = min(len(lines), int(a.get("end_line") or len(lines)))
out = "\n".join(f"{i:6d}\t{lines[i - 1]}" for i in range(start, end + 1))
print(out[:limit] + ("\n[... truncated ...]" if len(out) > limit else ""))
"""

EDIT_PROGRAM = r"""
import json, os, sys
a = json.loads(sys.argv[1]); path, old, new = a["path"], a["old_str"], a["new_str"]
try:
    if old == "":
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(new)
        print(f"wrote {path} ({len(new)} characters)"); sys.exit(0)
    with open(path, encoding="utf-8") as f:
        text = f.read()
except OSError as e:
    print(f"error: cannot edit {path}: {e.strerror}"); sys.exit(1)
count = text.count(old)
if count != 1:
    print(f"error: old_str occurs {count} times in {path}; it must occur exactly once"); sys.exit(1)
try:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(old, new, 1))
except OSError as e:
    print(f"error: cannot edit {path}: {e.strerror}"); sys.exit(1)
print(f"edited {path}")
"""


@dataclass(frozen=True)
class ToolOutcome:
    """What one command did, whichever executor ran it."""

    exit_code: int | None
    stdout: str
    stderr: str
    limit_hit: str | None = None
    limit_value: float | None = None


_LIMIT_TEXT = {
    "wall": "wall-clock limit of {v:g} s",
    "cpu": "CPU-time limit",
    "memory": "memory limit",
    "pids": "process-count limit",
    "file_size": "file-size limit",
    "output": "output limit (it printed far too much)",
}


def format_outcome(outcome: ToolOutcome, *, max_chars: int) -> str:
    """The tool message the model sees: output, stderr, exit code, and which limit killed the command."""
    parts = []
    if outcome.limit_hit:
        what = _LIMIT_TEXT.get(outcome.limit_hit, outcome.limit_hit).format(v=outcome.limit_value or 0)
        parts.append(f"error: the command hit the sandbox's {what}")
    if outcome.stdout:
        parts.append(outcome.stdout.rstrip("\n"))
    if outcome.stderr:
        parts.append("[stderr]\n" + outcome.stderr.rstrip("\n"))
    if outcome.exit_code not in (0, None):
        parts.append(f"[exit code: {outcome.exit_code}]")
    text = "\n".join(parts) or "(no output)"
    if len(text) > max_chars:
        half = max_chars // 2
        text = f"{text[:half]}\n[... {len(text) - max_chars} characters truncated ...]\n{text[-half:]}"
    return text
