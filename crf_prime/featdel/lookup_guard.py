"""Attribute lookups by a computed name, judged when they run: the code policy's attribute rules, applied by the
builtins themselves.

A static scan cannot tell what ``getattr(obj, name)`` reaches when ``name`` is computed, so the code policy
(crf_prime/featdel/policy.py) refuses such calls, and with them honest code that the project's own authors wrote
(``getattr(obj, header)`` over a table's headers). With :data:`ENABLED` the policy leaves them to this guard. In a
grading run the grader replaces ``getattr``, ``setattr``, ``delattr`` and ``hasattr`` in :mod:`builtins`, before any
project code is imported, by versions that judge the calls made from the tree's *sites*: the lines where the agent's
added code calls ``getattr``/``setattr``/``delattr`` with a computed name, the very calls the scan left to this guard
(``policy.deferred_lookups``). There they refuse exactly the names the policy refuses as a literal: frames, tracebacks,
interpreter hooks, import machinery and the interpreter's own dunders (``__globals__``, ``__dict__``,
``__subclasses__``, …), and, on a module, private members, the members the policy never allows (``loads`` of
``pickle``) and another package's module (``sys`` through ``posixpath``, as the policy's "module reached through a
safe module's attribute"; a module counts as itself only while ``sys.modules`` holds it under its ``__name__``). A
refused lookup behaves as a missing attribute (``AttributeError``, or the default). Every other call is the builtin's
own: a literal name (the scan's to judge), the project's own code (mistune reads ``getattr(html, "_replace_charref")``
at import; a project function that looks names up for its caller stays a gadget for the scan), pytest, the standard
library, the tests.

``eval`` refuses code that uses a name the policy refuses, for any caller (:func:`_guard_evaluation`): the standard
library evaluates annotations on code's behalf, and an annotation computed at run time is text no scan saw.
``functools.update_wrapper`` (and so ``wraps``) refuses a module on either side, for any caller: it copies names and
the ``__dict__`` of the wrapped object from the library's own frame. The policy still refuses these builtins as
values (``partial(getattr, f)``), since a library function calling them on the project's behalf would be the caller.
Names are read as exact ``str`` (a ``str`` subclass cannot answer the check differently from the lookup).

Standard library only (in the box): copied beside the grading plugin (``hide_test_id.LOOKUP_MODULE``) and the replay
driver, and imported there before any project code.
"""

from __future__ import annotations

import builtins
import json
import os
import sys
import types
from collections.abc import Collection, Mapping

RULES = "crf_lookup_rules.json"
"""Beside the module in the test box: :func:`settings` as JSON."""


def refusal(obj: object, name: str, names: Collection[str], module_names: Collection[str]) -> str:
    """Why the project's code may not look ``name`` up on ``obj`` by a computed name ('' when it may)."""
    if name in names:
        return "a frame, hook, import-machinery or interpreter attribute"
    if issubclass(type(obj), types.ModuleType) and (name.startswith("_") or name in module_names):
        return "a module member the code policy never allows"
    return ""


def install(sites: Mapping[str, Collection[int]], names: Collection[str], module_names: Collection[str]) -> None:
    """Replace the four builtins, process-wide and permanently: a call made from one of ``sites`` (file path -> line
    numbers: where the project's code calls them with a computed name) is judged by :func:`refusal`; any other call
    is the builtin's own. With no sites every call would be the builtin's own, so the builtins stay (a Python
    wrapper around every ``getattr`` of pytest and the project costs a third of a test run); the guards of
    ``update_wrapper`` and ``eval``, which apply to any caller, are installed either way."""
    _guard_update_wrapper()
    _guard_evaluation(frozenset(names))
    if not any(sites.values()):
        return
    where = {os.path.realpath(path): frozenset(lines) for path, lines in sites.items()}
    names, module_names = frozenset(names), frozenset(module_names)
    known: dict[str, frozenset[int]] = {}
    nowhere: frozenset[int] = frozenset()
    realpath, getframe, exact = os.path.realpath, sys._getframe, str.__getitem__
    modules = sys.modules
    real_getattr, real_hasattr = builtins.getattr, builtins.hasattr
    real_setattr, real_delattr = builtins.setattr, builtins.delattr
    whole = slice(None)

    def ours(frame: types.FrameType) -> bool:
        filename = frame.f_code.co_filename
        lines = known.get(filename)
        if lines is None:  # "<string>", "<frozen ...>": no file of the tree
            lines = known[filename] = where.get(realpath(filename), nowhere) if os.path.isabs(filename) else nowhere
        return frame.f_lineno in lines

    def judged(obj: object, name: object) -> object:
        """``name`` as exact text (AttributeError when the project's code may not look it up on ``obj``); a
        non-string unchanged, for the builtin to raise its own TypeError."""
        if not isinstance(name, str):
            return name
        text = exact(name, whole)
        if ours(getframe(2)):  # 0: here, 1: the replaced builtin, 2: its caller
            why = refusal(obj, text, names, module_names)
            if why:
                raise AttributeError(f"{text!r} by a computed name from the code under test: {why} (grader's rule)")
        return text

    def module_name(value: object) -> str:
        """A module's name when it is the module imported under that name ('' otherwise: a renamed one)."""
        name = real_getattr(value, "__name__", "")
        return name if isinstance(name, str) and modules.get(name) is value else ""

    def other_module(obj: object, value: object) -> bool:
        """``value`` is a module of another top-level package than the module ``obj`` (``posixpath`` -> ``sys``)."""
        if not (issubclass(type(obj), types.ModuleType) and issubclass(type(value), types.ModuleType)):
            return False
        a, b = module_name(obj), module_name(value)
        return not (a and b) or a.partition(".")[0] != b.partition(".")[0]

    # the replacements carry the builtins' names: tracebacks and reprs read as the builtins' own
    def getattr(obj, name, *default):
        try:
            text = judged(obj, name)
        except AttributeError:
            if default:
                return default[0]
            raise
        value = real_getattr(obj, text, *default)
        if isinstance(text, str) and other_module(obj, value) and ours(getframe(1)):
            if default:
                return default[0]
            raise AttributeError(f"{text!r} by a computed name from the code under test: another package's module")
        return value

    def hasattr(obj, name):
        try:
            return real_hasattr(obj, judged(obj, name))
        except AttributeError:
            return False

    def setattr(obj, name, value):
        real_setattr(obj, judged(obj, name), value)

    def delattr(obj, name):
        real_delattr(obj, judged(obj, name))

    for fn, real in (
        (getattr, real_getattr),
        (hasattr, real_hasattr),
        (setattr, real_setattr),
        (delattr, real_delattr),
    ):
        fn.__doc__ = real.__doc__
    builtins.getattr, builtins.hasattr, builtins.setattr, builtins.delattr = getattr, hasattr, setattr, delattr


def _guard_update_wrapper() -> None:
    """``functools.update_wrapper`` (and ``wraps``, which calls it by its module-level name) never copies a module's
    namespace: ``wraps(posixpath)(obj)`` would hand ``obj.sys`` to any caller, and ``assigned=("modules",)`` on
    ``sys`` would read ``sys.modules`` from the library's own frame, where no caller check applies."""
    import functools

    real = functools.update_wrapper

    def update_wrapper(wrapper, wrapped, assigned=functools.WRAPPER_ASSIGNMENTS, updated=functools.WRAPPER_UPDATES):
        if issubclass(type(wrapped), types.ModuleType) or issubclass(type(wrapper), types.ModuleType):
            raise TypeError("update_wrapper of a module: it would copy the module's namespace (grader's rule)")
        return real(wrapper, wrapped, assigned, updated)

    update_wrapper.__doc__ = real.__doc__
    functools.update_wrapper = update_wrapper


EVALUATED_REFUSED = frozenset({"getattr", "setattr", "delattr"})
"""Refused in evaluated code beside the policy's names: a lookup by a computed name there has no site for the guard
to judge."""


def refused_in_code(code: types.CodeType, names: Collection[str]) -> str:
    """The first name ``code`` (or a function body inside it) uses that the code policy refuses: the guard's
    ``names`` (``__import__``, ``modules``, frames, interpreter dunders) and :data:`EVALUATED_REFUSED` ('' when
    none)."""
    for name in code.co_names:
        if name in names or name in EVALUATED_REFUSED:
            return name
    for const in code.co_consts:
        if isinstance(const, types.CodeType) and (inner := refused_in_code(const, names)):
            return inner
    return ""


def _guard_evaluation(names: frozenset[str]) -> None:
    """``eval`` refuses code that uses a name the code policy refuses (``__import__``, ``modules``, frames, lookups
    by name: :func:`refused_in_code`). The standard library evaluates text on code's behalf: ``inspect.signature(f,
    eval_str=True)`` evaluates ``f``'s string annotations and ``typing.ForwardRef`` evaluates the code it compiled
    from one, and an annotation computed at run time (``"__imp" + "ort__('sys')"``), or a keyword passed as
    ``**{"eval_" + "str": True}``, is text no scan saw. The refusal is a ``NameError``, as for an annotation naming
    something undefined. Any caller: the agent's code cannot name ``eval``, so every call is a library's."""
    real_eval, real_compile, getframe = builtins.eval, builtins.compile, sys._getframe

    def eval(source, globals=None, locals=None):  # the builtin's name; keywords as Python 3.13+ takes them
        if globals is None:  # the caller's namespaces, as the builtin takes them
            frame = getframe(1)
            globals, locals = frame.f_globals, frame.f_locals if locals is None else locals
        code = source
        if isinstance(source, str | bytes):
            text = source.decode() if isinstance(source, bytes) else source
            try:
                code = real_compile(text.lstrip(" \t"), "<string>", "eval", dont_inherit=True)
            except (SyntaxError, ValueError):
                code = None  # the builtin raises its own error
        if isinstance(code, types.CodeType) and (name := refused_in_code(code, names)):
            raise NameError(f"{name!r} in evaluated code: a name the code policy refuses (grader's rule)")
        return real_eval(source, globals, locals)

    eval.__doc__ = real_eval.__doc__
    builtins.eval = eval


ENABLED = True
"""Host side: grading runs install the guard at the tree's computed-lookup sites, and the code policy leaves direct
computed lookups to it (False only in the hack suites, to show what it stops)."""


def settings(sites: Mapping[str, Collection[int]]) -> dict:
    """Host side: the guard's settings for a box where the project's code calls the builtins with a computed name at
    ``sites`` (absolute path -> lines), with the code policy's rules (crf_prime/featdel/policy.py ``lookup_rules``)."""
    from crf_prime.featdel.policy import lookup_rules  # host only: the box has the standard library alone

    names, module_names = lookup_rules()
    return {
        "sites": {path: sorted(lines) for path, lines in sorted(sites.items())},
        "names": sorted(names),
        "module_names": sorted(module_names),
    }


def install_settings(config: dict) -> None:
    """:func:`install` from :func:`settings`' output."""
    install(config["sites"], config["names"], config["module_names"])


def install_from(directory: str) -> bool:
    """:func:`install_settings` with :data:`RULES` in ``directory``; False, nothing installed, when it holds none."""
    path = os.path.join(directory, RULES)
    if not os.path.exists(path):
        return False
    with open(path) as fh:
        install_settings(json.load(fh))
    return True
