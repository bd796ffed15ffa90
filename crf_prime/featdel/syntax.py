"""``ast.parse`` that is safe to call from many threads at once.

CPython 3.11 keeps the AST converter's recursion counter in interpreter-wide state (``Python/Python-ast.c``,
``PyAST_mod2obj`` sets ``state->recursion_depth`` from the calling thread's stack depth and checks it afterwards).
Converting a large tree allocates many objects; a garbage collection run in the middle may call finalizers (Python
code), the GIL passes to another thread, and that thread's ``ast.parse`` overwrites the shared counter: the first
parse then fails with ``SystemError: AST constructor recursion depth mismatch``. Graders run in worker threads
(``asyncio.to_thread``), so every parse in crf_prime.featdel goes through one process-wide lock here.
"""

from __future__ import annotations

import ast
import threading

_PARSE_LOCK = threading.RLock()  # re-entrant: a finalizer run inside a parse may itself parse


def parse(source: str | bytes, mode: str = "exec") -> ast.AST:
    """``ast.parse(source, mode=mode)`` under the process-wide parse lock (bytes are decoded like the importer)."""
    with _PARSE_LOCK:
        return ast.parse(source, mode=mode)
