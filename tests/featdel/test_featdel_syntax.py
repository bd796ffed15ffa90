"""One parse per module text (crf_prime/featdel/syntax.py ``shared``): every reader gets the same tree, and none of
them changes it."""

from __future__ import annotations

import ast
import difflib
import inspect

import pytest

from crf_prime.featdel import policy
from crf_prime.featdel.deletion import (
    delete_block,
    delete_bodies,
    delete_tail,
    function_nodes,
    function_text,
    inner_blocks,
    iter_functions,
)
from crf_prime.featdel.generate import _class_header, _lazy
from crf_prime.featdel.mutants import file_mutants
from crf_prime.featdel.syntax import shared

SOURCE = inspect.getsource(difflib)


def test_equal_texts_share_one_tree_and_a_syntax_error_is_raised_every_time() -> None:
    copy = "".join(list(SOURCE))  # another string object with the same text
    assert copy is not SOURCE
    assert shared(copy) is shared(SOURCE)
    assert shared(SOURCE + "\n") is not shared(SOURCE)
    for _ in range(2):
        with pytest.raises(SyntaxError):
            shared("def broken(:\n")


def test_the_readers_leave_the_shared_tree_as_parsed() -> None:
    """Deletion, prompts, the code policy and mutants all read the module's one tree: after each has done its work on
    every function of difflib, the tree dumps as a fresh parse does."""
    fresh = ast.dump(ast.parse(SOURCE), include_attributes=True)
    functions = iter_functions("difflib.py", SOURCE)
    nodes = function_nodes(SOURCE)
    assert len(functions) > 30 and set(f.qualname for f in functions) <= set(nodes)
    for f in functions:
        assert function_text(SOURCE, f.qualname).lstrip().startswith(("def ", "@", "async def "))
        _class_header(SOURCE, f.qualname)
        _lazy(SOURCE, f.lineno)
        delete_bodies(SOURCE, [f.qualname])
        fn = nodes[f.qualname]
        for block in inner_blocks(fn)[:1]:
            delete_block(SOURCE, f.qualname, block.lineno)
        if len(fn.body) > 2:
            delete_tail(SOURCE, f.qualname, 1)
        file_mutants("difflib.py", SOURCE, frozenset(range(fn.lineno, (fn.end_lineno or fn.lineno) + 1)))
    policy.violations(SOURCE, frozenset({"difflib", "re", "heapq", "collections", "types"}))
    assert ast.dump(shared(SOURCE), include_attributes=True) == fresh
