"""``ast.parse`` that is safe to call from many threads at once.

CPython 3.11 keeps the AST converter's recursion counter in interpreter-wide state (``Python/Python-ast.c``,
``PyAST_mod2obj`` sets ``state->recursion_depth`` from the calling thread's stack depth and checks it afterwards).
Converting a large tree allocates many objects; a garbage collection run in the middle may call finalizers (Python
code), the GIL passes to another thread, and that thread's ``ast.parse`` overwrites the shared counter: the first
parse then fails with ``SystemError: AST constructor recursion depth mismatch``. Graders run in worker threads
(``asyncio.to_thread``), so every parse in crf_prime.featdel goes through one process-wide lock here.

Generation parses the same module text many times (each candidate's deletion, prompt, policy check, duplicate keys
and mutants start from the original file: a 1,900-line module took 20 ms a parse, 12 % of a package's validation);
:func:`shared` parses each text once for the readers that never change the tree.
"""

from __future__ import annotations

import ast
import functools
import threading
from typing import cast

_PARSE_LOCK = threading.RLock()  # re-entrant: a finalizer run inside a parse may itself parse


def parse(source: str | bytes, mode: str = "exec") -> ast.AST:
    """``ast.parse(source, mode=mode)`` under the process-wide parse lock (bytes are decoded like the importer)."""
    with _PARSE_LOCK:
        return ast.parse(source, mode=mode)


SHARED_TREES = 8
"""Texts whose trees :func:`shared` keeps (the original of each module a package's candidates live in, a few more)."""


@functools.lru_cache(maxsize=SHARED_TREES)
def shared(source: str) -> ast.Module:
    """:func:`parse` of ``source``, one tree per text for every caller: callers only read it (a changed node would
    change every later caller's tree)."""
    return cast("ast.Module", parse(source))
