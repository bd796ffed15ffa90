"""The block / tail / class granularities: exact splices and candidate selection from coverage."""

from __future__ import annotations

import textwrap

import pytest

from crf_prime.featdel.deletion import delete_block, delete_tail, iter_functions
from crf_prime.featdel.granularity import Candidate, class_candidates, delete, granularity_of, statement_candidates

SRC = textwrap.dedent(
    '''\
    def keep_positive(xs, n):
        """Doc."""
        out = []
        for x in xs:  # loop
            # keep positives
            if x > 0:
                out.append(x)
                seen = len(out)
        else:
            pass
        return out[:n]


    class Box:
        def __init__(self, v):
            self.v = v

        def get(self):
            return self.v

        def _peek(self):
            return self.v


    class _Hidden:
        def a(self):
            return 1

        def b(self):
            return 2
    '''
)


def test_delete_block_replaces_only_that_body() -> None:
    assert delete_block(SRC, "keep_positive", 6).splitlines()[:9] == [
        "def keep_positive(xs, n):",
        '    """Doc."""',
        "    out = []",
        "    for x in xs:  # loop",
        "        # keep positives",
        "        if x > 0:",
        "            raise NotImplementedError",
        "    else:",
        "        pass",
    ]
    # a loop body goes with its comments; its else clause stays
    assert delete_block(SRC, "keep_positive", 4).splitlines()[:6] == [
        "def keep_positive(xs, n):",
        '    """Doc."""',
        "    out = []",
        "    for x in xs:",
        "        raise NotImplementedError",
        "    else:",
    ]
    with pytest.raises(KeyError, match="no block at line 5"):
        delete_block(SRC, "keep_positive", 5)


def test_delete_tail_keeps_the_first_statements() -> None:
    assert delete_tail(SRC, "keep_positive", 1).splitlines()[:5] == [
        "def keep_positive(xs, n):",
        '    """Doc."""',
        "    out = []",
        "    raise NotImplementedError",
        "",
    ]
    with pytest.raises(ValueError, match="cannot keep 3 of 3"):
        delete_tail(SRC, "keep_positive", 3)


def test_statement_candidates_follow_coverage() -> None:
    functions = iter_functions("m.py", SRC)
    coverage = {7: {"t.py::test_pos"}, 8: {"t.py::test_pos"}, 3: {"t.py::test_a"}, 11: {"t.py::test_a"}}
    coverage[4] = {"t.py::test_header"}  # the loop header is not part of the loop's body

    def tests_at(path: str, lines: frozenset[int]) -> set[str]:
        assert path == "m.py"
        return set().union(*(coverage.get(ln, set()) for ln in lines))

    cands = statement_candidates({"m.py": SRC}, functions, tests_at, 40, 2, lambda p, q: f"m.{q[0]}")
    assert [(c.key, c.tests, c.block_line, c.keep) for c in cands] == [
        ("block:m.keep_positive.L4", ("t.py::test_pos",), 4, 0),
        ("block:m.keep_positive.L6", ("t.py::test_pos",), 6, 0),
        ("tail:m.keep_positive", ("t.py::test_a", "t.py::test_header", "t.py::test_pos"), 0, 1),
    ]
    # a limit below the covering tests drops the candidate
    assert [c.key for c in statement_candidates({"m.py": SRC}, functions, tests_at, 2, 2, lambda p, q: q[0])] == [
        "block:keep_positive.L4",
        "block:keep_positive.L6",
    ]


HELPERS = textwrap.dedent(
    """\
    class _Handler:
        def __init__(self, items):
            for x in items:
                self.a = x
                self.b = x

        def _push(self, x):
            x = x or None
            if x:
                self.a = x
                self.b = x
            return self.a
    """
)


def test_private_functions_have_block_and_tail_candidates_but_dunders_do_not() -> None:
    """A small library's code is mostly private helpers (xmltodict's ``_DictSAXHandler``): their blocks and tails are
    candidates, as their bodies are; a dunder's are not."""
    functions = iter_functions("m.py", HELPERS)
    assert not any(f.public for f in functions)
    cands = statement_candidates({"m.py": HELPERS}, functions, lambda p, lines: {"t.py::t"}, 40, 2, lambda p, q: q[0])
    assert [(c.key, c.granularity, c.functions[0].qualname) for c in cands] == [
        ("block:_Handler._push.L9", "block", "_Handler._push"),
        ("tail:_Handler._push", "tail", "_Handler._push"),
    ]


def test_class_candidates_take_every_tested_method_of_public_classes() -> None:
    functions = iter_functions("m.py", SRC)
    lines = {f.qualname: f.body_lines for f in functions}

    def tests_at(path: str, body: frozenset[int]) -> set[str]:
        return {"t.py::test_box"} if body & (lines["Box.get"] | lines["Box.__init__"]) else set()

    cands = class_candidates(functions, tests_at, 40, 2, set(), lambda p, q: f"m.{q[0]}")
    # _peek runs under no test: it is not deleted (nothing could check its re-implementation)
    assert [(c.key, [f.qualname for f in c.functions]) for c in cands] == [("class:m.Box", ["Box.__init__", "Box.get"])]
    # the same set as a feature is not a second task
    assert class_candidates(functions, tests_at, 40, 2, {("Box.__init__", "Box.get")}, str) == []
    snapshot = delete({"m.py": SRC}, cands[0])["m.py"]
    assert snapshot.count("raise NotImplementedError") == 2 and "def _peek(self):\n        return self.v" in snapshot

    def everything(path: str, body: frozenset[int]) -> set[str]:
        return {"t.py::test_box"}

    cands = class_candidates(functions, everything, 40, 2, set(), lambda p, q: f"m.{q[0]}")
    assert [f.qualname for f in cands[0].functions] == ["Box.__init__", "Box.get", "Box._peek"]
    # one tested method is no class task
    only_get = class_candidates(functions, lambda p, b: {"t"} if b & lines["Box.get"] else set(), 40, 1, set(), str)
    assert only_get == []


def test_granularity_of_keys_and_task_ids() -> None:
    assert [granularity_of(k) for k in ("m.f", "block:m.f.L3", "lib-1__tail__m.f", "feature:m.C", "x__class__m.C")] == [
        "function",
        "block",
        "tail",
        "feature",
        "class",
    ]
    assert Candidate("k", "block", (), ()).keep == 0
