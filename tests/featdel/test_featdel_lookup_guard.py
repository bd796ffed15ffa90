"""The lookup guard (crf_prime/featdel/lookup_guard.py): ``getattr``/``hasattr``/``setattr``/``delattr`` called from
the project's own files refuse, when they run, exactly what the code policy refuses as a literal name; every other
caller keeps the builtins' behaviour. The code policy then lets a computed name through a direct call only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from crf_prime.featdel import lookup_guard
from crf_prime.featdel.policy import added_violations, deferred_lookups, violations

PROJECT = """\
import math
import posixpath


class P:
    a = 1


def look(obj, name, *default):
    return getattr(obj, name, *default)


def has(obj, name):
    return hasattr(obj, name)


def put(obj, name, value):
    setattr(obj, name, value)


def drop(obj, name):
    delattr(obj, name)


def literal():
    return getattr(posixpath, "_get_sep")  # a literal name: the scan's to judge (and excuse in original code)
"""

PROBE = '''\
import functools
import json
import json.decoder
import math
import posixpath
import reprlib
import sys

import lookup_guard

lookup_guard.install_settings(json.loads(sys.argv[2]))
sys.path.insert(0, sys.argv[1])
import m


class Sneaky(str):
    """A name whose own comparison could tell the check something else than the lookup reads."""

    def __eq__(self, other):
        return False

    __hash__ = str.__hash__


def later():
    return 1


out = {}


def attempt(label, fn):
    try:
        out[label] = repr(fn())
    except Exception as e:
        out[label] = type(e).__name__


attempt("ordinary", lambda: m.look(m.P, "a"))
attempt("computed dunder", lambda: m.look(m.look, "__glo" + "bals__"))
attempt("with a default", lambda: m.look(m.look, "__globals__", "default"))
attempt("hasattr", lambda: m.has(m.look, "__globals__"))
attempt("hasattr ordinary", lambda: m.has(m.P, "a"))
attempt("frame attribute", lambda: m.look(m.look, "__code__"))
attempt("str subclass", lambda: m.look(m.look, Sneaky("__globals__")))
attempt("module member", lambda: m.look(math, "sqrt") is math.sqrt)
attempt("module private member", lambda: m.look(posixpath, "_get_sep") is posixpath._get_sep)
attempt("module never-allowed member", lambda: m.look(posixpath, "path"))
attempt("another package's module", lambda: m.look(posixpath, "s" + "ys"))
attempt("... with a default", lambda: m.look(posixpath, "sys", None))
attempt("a forbidden member of a module at hand", lambda: m.look(sys, "mod" + "ules"))
attempt("the builtins' compile", lambda: m.look(reprlib.builtins, "com" + "pile"))
attempt("a package's own submodule", lambda: m.look(json, "dec" + "oder") is json.decoder)
posixpath.__name__ = "sys"
attempt("a renamed module", lambda: m.look(posixpath, "sys"))
posixpath.__name__ = "posixpath"
attempt("setattr", lambda: m.put(later, "__code__", m.look.__code__))
attempt("setattr ordinary", lambda: (m.put(m.P, "b", 2), m.P.b)[1])
attempt("delattr", lambda: m.drop(m.P, "__dict__"))
attempt("non-string name", lambda: m.look(m.P, 3))
attempt("a literal lookup", lambda: m.literal() is posixpath._get_sep)
attempt("wraps a module", lambda: functools.wraps(posixpath)(m.P()))
attempt("update_wrapper onto a module", lambda: functools.update_wrapper(posixpath, m.look))
attempt("wraps a function", lambda: functools.wraps(m.look)(lambda: 0).__wrapped__ is m.look)
attempt("caller outside the project", lambda: getattr(m.look, "__globals__") is m.__dict__)
print(json.dumps(out))
'''


def _probe(tmp_path: Path) -> dict[str, str]:
    proj, lib = tmp_path / "proj", tmp_path / "lib"
    proj.mkdir()
    lib.mkdir()
    (proj / "m.py").write_text(PROJECT)
    (lib / "lookup_guard.py").write_text(Path(lookup_guard.__file__).read_text())
    (lib / "probe.py").write_text(PROBE)
    sites = deferred_lookups("", PROJECT, frozenset({"math", "posixpath"}))
    assert sites == [10, 18, 22]  # look, put, drop; not has, not the literal
    settings = json.dumps(lookup_guard.settings({str(proj / "m.py"): sites}))
    done = subprocess.run(
        [sys.executable, "-S", "-s", str(lib / "probe.py"), str(proj), settings], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_project_s_computed_lookups_are_judged_when_they_run(tmp_path: Path) -> None:
    assert _probe(tmp_path) == {
        "ordinary": "1",
        "computed dunder": "AttributeError",
        "with a default": "'default'",
        "hasattr": "True",  # not a site: hasattr tells existence only, and the policy never refused it
        "hasattr ordinary": "True",
        "frame attribute": "AttributeError",
        "str subclass": "AttributeError",
        "module member": "True",
        "module private member": "AttributeError",
        "module never-allowed member": "AttributeError",
        "another package's module": "AttributeError",
        "... with a default": "None",
        "a forbidden member of a module at hand": "AttributeError",
        "the builtins' compile": "AttributeError",
        "a package's own submodule": "True",
        "a renamed module": "AttributeError",
        "setattr": "AttributeError",
        "setattr ordinary": "2",
        "delattr": "AttributeError",
        "non-string name": "TypeError",
        "a literal lookup": "True",
        "wraps a module": "TypeError",
        "update_wrapper onto a module": "TypeError",
        "wraps a function": "True",
        "caller outside the project": "True",
    }


@pytest.mark.parametrize(
    ("source", "judged_when_run"),
    [
        ("def f(obj, name):\n    return getattr(obj, name)\n", True),
        ("def f(obj, name, v):\n    setattr(obj, 'x_' + name, v)\n    delattr(obj, name)\n", True),
        ("def f(obj, args):\n    return getattr(*args)\n", True),
        # as a value, a library function would be the caller the guard sees: still refused
        ("import functools\n\n\ndef f(obj, name):\n    return functools.partial(getattr, obj)(name)\n", False),
        # a name the module binds is not the builtin
        ("from operator import attrgetter\ngetattr = attrgetter\n\n\ndef f(o, n):\n    return getattr(o, n)\n", False),
        # a literal forbidden name is refused statically, as before
        ("def f(obj):\n    return getattr(obj, '__globals__')\n", False),
    ],
)
def test_the_policy_leaves_direct_computed_lookups_to_the_guard(source: str, judged_when_run: bool) -> None:
    strict = violations(source, frozenset({"functools", "operator"}))
    relaxed = violations(source, frozenset({"functools", "operator"}), runtime_lookups=True)
    assert strict, source  # without the guard every one of these is refused
    assert (relaxed == []) is judged_when_run, relaxed


def test_sites_are_the_added_code_s_computed_calls() -> None:
    """The project's own computed lookups (same enclosing function, same call) keep the builtin's behaviour; added ones,
    and an original one moved into another function, are judged when they run."""
    before = "def own(o, n):\n    return getattr(o, n)\n\n\ndef f(o, n):\n    raise NotImplementedError\n"
    honest = before.replace("raise NotImplementedError", "return getattr(o, n, None)")
    assert deferred_lookups(before, honest, frozenset()) == [6]
    moved = "def own(o, n):\n    return n\n\n\ndef f(o, n):\n    return getattr(o, n)\n"
    assert deferred_lookups(before, moved, frozenset()) == [6]
    assert deferred_lookups(before, before, frozenset()) == []
    rebound = "from operator import attrgetter as getattr\n\n\ndef f(o, n):\n    return getattr(o, n)\n"
    assert deferred_lookups("", rebound, frozenset({"operator"})) == []  # not the builtin: the scan judges it
    assert deferred_lookups("", "def f(o, *a):\n    return getattr(o, *a)\n", frozenset()) == [2]


def test_settings_hold_the_policy_s_rules() -> None:
    got = lookup_guard.settings({"/r/m.py": (3, 1)})
    assert got["sites"] == {"/r/m.py": [1, 3]}
    assert {"__globals__", "__dict__", "modules", "f_back", "tb_frame", "compile", "_getframe"} <= set(got["names"])
    assert {"__name__", "__class__", "__args__", "append"}.isdisjoint(got["names"])
    assert {"loads", "FunctionType", "path"} <= set(got["module_names"])


def test_a_builtin_the_snapshot_already_uses_is_still_the_builtin() -> None:
    """The snapshot's own unbound loads (``delattr`` elsewhere in the file) are accepted names, not rebindings."""
    before = 'def g(o):\n    delattr(o, "x")\n\n\ndef f(o, n):\n    raise NotImplementedError\n'
    after = before.replace("raise NotImplementedError", "delattr(o, n)")
    assert added_violations(before, after, frozenset(), runtime_lookups=True) == []
    assert [v.rule for v in added_violations(before, after, frozenset())] == [
        "delattr() with a computed attribute name"
    ]


def test_without_sites_the_builtins_stay_and_update_wrapper_is_still_judged() -> None:
    """No site to judge (gold, the deleted tree, every mutant, most attempts): the builtins are left in place, since a
    Python wrapper around every ``getattr`` of pytest and the project slows a test run by a third; ``update_wrapper``
    still refuses a module, for any caller."""
    code = (
        "import builtins, functools, posixpath, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import lookup_guard\n"
        "real = builtins.getattr\n"
        "lookup_guard.install_settings({'sites': {}, 'names': ['__globals__'], "
        "'module_names': []})\n"
        "print(builtins.getattr is real)\n"
        "try:\n"
        "    functools.wraps(posixpath)(lambda: 0)\n"
        "    print('wrapped')\n"
        "except TypeError:\n"
        "    print('TypeError')\n"
        "lookup_guard.install_settings({'sites': {'/nowhere/m.py': [1]}, 'names': [], 'module_names': []})\n"
        "print(builtins.getattr is real)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(Path(lookup_guard.__file__).parent)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["True", "TypeError", "False"]
