"""Git as the grader runs it: on a git directory the grader owns, with no configuration the agent could influence.

No system or global config, no replace objects, no hooks, no fsmonitor, no untracked cache, no pager, no external
diff or text conversion, no prompt for credentials. Used for the grader's own clone of the mirror (local placement)
and, inside the instance's container, on ``/testbed`` (where the agent's ``.git`` config is the only one read, and
these ``-c`` settings override every key of it that runs a program or redirects the work tree).
"""

from __future__ import annotations

import os
import shlex

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_NO_REPLACE_OBJECTS": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_PAGER": "cat",
    "GIT_EXTERNAL_DIFF": "",
    "GIT_ATTR_NOSYSTEM": "1",
}
GIT_OVERRIDES = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.untrackedCache=false",
    "core.excludesFile=/dev/null",
    "core.attributesFile=/dev/null",
    "core.sshCommand=false",
    "core.pager=cat",
    "core.askPass=",
    "diff.external=",
    "protocol.allow=never",
    "protocol.file.allow=always",
    "advice.detachedHead=false",
)
"""``-c`` settings that beat the repository's own config (command line > local config)."""


def git_argv(*args: str, git_dir: str | None = None, work_tree: str | None = None) -> list[str]:
    """``git -c ... [--git-dir D] [--work-tree W] args`` with every override.

    With a work tree, ``safe.directory`` names exactly that tree (command-line config is trusted for it), so a
    container whose ``/testbed`` belongs to another uid still works without touching any global config.
    """
    argv = ["git"]
    for setting in GIT_OVERRIDES:
        argv += ["-c", setting]
    if work_tree is not None:
        argv += ["-c", f"safe.directory={work_tree}"]
    if git_dir is not None:
        argv.append(f"--git-dir={git_dir}")
    if work_tree is not None:
        argv.append(f"--work-tree={work_tree}")
    return [*argv, *args]


def git_shell(*args: str, git_dir: str, work_tree: str) -> str:
    """The same as one shell command line (environment included), for runtimes that take a script."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in GIT_ENV.items())
    return f"env {env} " + " ".join(shlex.quote(a) for a in git_argv(*args, git_dir=git_dir, work_tree=work_tree))
