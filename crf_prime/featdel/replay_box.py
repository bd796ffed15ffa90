"""Feature Deletion replay driver: runs INSIDE the replay box, with only the standard library and cloudpickle.

Copied into the box next to cloudpickle and run as ``python -S -s replay_box.py CONFIG.json``; it never imports
crf_prime, pytest or any test file. For every call input (pickled at generation from the gold run of the target tests,
or derived from one) it forks a child, calls the target's underlying function with the recorded arguments (the
receiver first, for methods), and writes the canonical outcome: return value or exception type, the arguments (and
so the receiver) after the call, and, when the result is callable, the outcomes of calling it on the follow-up
inputs. Values are read through primitives bound here before any project code is imported (``canonical``), never
through a method the agent's classes can override. Expected outcomes are never here: they are compared on the host
(crf_prime/featdel/replay.py). The one exception is mutation testing, where every tree is gold's own code: there the
box gets gold's judged outcomes (``differs``) only to stop a tree at its first difference.

The same module serves the generator's recorder (``canonical`` on in-test return values) and ``derive`` mode (fresh
inputs generated from the recorded ones by ``inputs.py``, pickled back for gold and agent alike).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import io
import json
import math
import os
import pickle
import random
import select
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

MAX_NODES = 5000
"""Canonical trees are cut (with a marker) beyond this many nodes; both sides are cut the same way."""
CANON = 2
"""The canonical form replays record and read (``ReplayInfo.canon``). 1: a container goes on past the node budget
with one cut marker per remaining item (a returned million-item tuple made a 15 MB outcome); 2: one marker holding
the number of items left, then the rest of the container is left out."""
MAX_ITEMS = 200
"""Items taken from a returned iterator (an infinite one is fine)."""
MAX_DEPTH = 40
SEQUENCE_SUFFIX = "@seq"
"""Key suffix of a call's outcome from the in-sequence run (every call in one process, crf_prime/featdel/replay.py)."""


def sequence_timeout(call_timeout_s: float, n_calls: int) -> float:
    """Deadline of the in-sequence run: one call's limit plus half a second per call."""
    return call_timeout_s + 0.5 * n_calls


_R = TypeVar("_R")
_PRIMITIVES = (type(None), bool, int, str, bytes)
# Builtin types live as long as the process, so no other object ever has their id: a type is one of them exactly
# when its id is in the set (a set of the types themselves would hash them through a metaclass's ``__hash__``).
_PRIMITIVE_IDS = frozenset(map(id, _PRIMITIVES))
_GENERATOR = types.GeneratorType
_SEQUENCE_IDS = frozenset(map(id, (list, tuple)))
_SET_IDS = frozenset(map(id, (set, frozenset)))
_FUNCTION_IDS = frozenset(
    map(id, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.BuiltinMethodType))
)
_HEAPTYPE = 1 << 9
"""``Py_TPFLAGS_HEAPTYPE``: a class made by a ``class`` statement (one the agent could have written)."""

# Unbound primitives of the builtin types, bound here before any project code is imported: values are read only
# through them, never through a method a class of the agent's can override (issue 25).
_T_DICT = type.__dict__["__dict__"].__get__
_T_MRO = type.__dict__["__mro__"].__get__
_T_FLAGS = type.__dict__["__flags__"].__get__
_T_MODULE = type.__dict__["__module__"].__get__
_T_QUALNAME = type.__dict__["__qualname__"].__get__
_PROXY_GET = types.MappingProxyType.get
_DICT_GET = dict.get
_GETSET_GET = types.GetSetDescriptorType.__get__
_MEMBER_GET = types.MemberDescriptorType.__get__
_MODULE_DICT = types.ModuleType.__dict__["__dict__"].__get__  # type: ignore[index]  # typeshed declares ModuleType.__dict__ as the instance attribute; on the class it is the type's mapping
STRICT = True
"""False only when the hack suites turn the defence off: reads go through the value's own (overridable) methods."""
CUT_ONCE = True
"""``CANON`` 2 (the config's ``canon``): a container stops at the first item cut by the node budget."""
REACH: dict[str, frozenset[int]] = {}
"""File (as the box sees it) -> lines deleted from it, in gold's first run at generation: each call's outcome then
says which of them it executed (``reached``). Empty everywhere else."""


class Opaque(Exception):
    """Raised by ``canonical(..., consume=False)`` for a value it may not look into (an iterator or a callable)."""


class Unreadable(Exception):
    """A value whose state cannot be read without trusting its own class (e.g. a ``__dict__`` it overrides)."""


def _qual(t: type) -> str:
    return f"{t.__module__}.{t.__qualname__}"


def _mro(t: type) -> tuple:
    return _T_MRO(t)


def _subclass(t: type, base: type) -> bool:
    return any(c is base for c in _mro(t))


def _lookup(t: type, name: str):
    """``name`` in the class dicts along ``t``'s MRO (no metaclass ``__getattr__``/``__getattribute__``)."""
    for c in _mro(t):
        found = _PROXY_GET(_T_DICT(c), name)
        if found is not None:
            return found
    return None


def _heap(t: type) -> bool:
    return bool(_T_FLAGS(t) & _HEAPTYPE)


def _resolves(module: str, qualname: str, t: type) -> bool:
    """``module.qualname`` names ``t`` itself, looked up through the module's and classes' real dicts."""
    obj = _DICT_GET(sys.modules, module)
    if obj is None or not _subclass(type(obj), types.ModuleType):
        return False
    ns = _MODULE_DICT(obj)
    for part in qualname.split("."):
        obj = _DICT_GET(ns, part) if type(ns) is dict else _PROXY_GET(ns, part)
        if obj is None or not _subclass(type(obj), type):
            return False
        ns = _T_DICT(obj)
    return obj is t


def type_name(t: type) -> str:
    """``module.qualname`` of a class; a class made by a ``class`` statement that is not what that name resolves to
    (a ``__module__``/``__qualname__`` claiming a standard-library type, or a local class) gets a trailing ``!``."""
    if not STRICT:
        return _qual(t)
    module, qualname = _T_MODULE(t), _T_QUALNAME(t)
    if type(module) is not str or type(qualname) is not str:
        raise Unreadable("class name")
    name = f"{module}.{qualname}"
    return name + "!" if _heap(t) and not _resolves(module, qualname, t) else name


def canonical(value, *, consume: bool = True):
    """JSON-able, type-strict tree of ``value``: ``[type, payload]``, read only through exact-type checks and unbound
    builtin primitives (never ``__eq__``/``__hash__``/``__reduce_ex__`` or a ``__dict__`` the value's class defines).

    Exact builtin types keep their values (floats as ``repr``), containers recurse (sets and dict items sorted by
    their canonical text, so hash order does not matter), iterators are consumed up to ``MAX_ITEMS`` (their type is
    not compared: a generator and ``map`` yielding the same items agree), other objects are their checked class name
    plus the state in their real ``__dict__`` and slots, the builtin content of a builtin's subclass, and for classes
    the agent cannot have written (C types, standard-library classes) their reduction. With ``consume=False``
    iterators and callables raise :class:`Opaque`; state that cannot be read that way raises :class:`Unreadable`.
    """
    return _canon(value, _Walk(), (), consume)


class _Walk:
    """One :func:`canonical` walk: the node budget left, and what it learned of each class it met (a deep state holds
    thousands of instances of a few classes; their class dicts were read again for each one). A class is read as it
    was when the walk first met it: an iterator the walk consumes runs the value's code, which may change a class,
    and an instance met after that is read through the descriptors Python made, as before the change."""

    def __init__(self) -> None:
        self.left = MAX_NODES
        self.classes: dict[int, _Class] = {}

    def of(self, t: type) -> _Class:
        got = self.classes.get(id(t))
        if got is None:  # the entry holds ``t``: its id is not reused while the walk lasts
            got = self.classes[id(t)] = _Class(t)
        return got


class _Class:
    """What the canonical form needs of a class, read once per walk through the same primitives, in the same order
    (a read that raises is kept nowhere: the next instance reads the class again, and raises the same way)."""

    def __init__(self, t: type) -> None:
        self.t = t
        self.is_type = _subclass(t, type)
        self.iterator = _is_iterator(t)
        self._object: tuple | None = None

    def object(self) -> tuple:
        """(name, the ``__dict__`` member or None, the slot members by name, the builtin base or None, trusted, its
        ``__reduce_ex__``) of a class whose instances are read as objects (STRICT)."""
        if self._object is None:
            t = self.t
            name = type_name(t)
            member = _dict_member(t)
            slots = _slot_members(t)
            base = _base_of(t)
            trusted = _trusted(t)
            self._object = (name, member, slots, base, trusted, _lookup(t, "__reduce_ex__") if trusted else None)
        return self._object


def _canon(v, walk: _Walk, stack: tuple[int, ...], consume: bool):
    walk.left -= 1
    if walk.left < 0:
        return ["cut", None]
    t = type(v)
    if id(t) in _PRIMITIVE_IDS:
        return [t.__name__, v if t is not bytes else v.hex()]
    if t is _GENERATOR and _STREAMS.get(id(v)) is v:
        return ["stream", None]
    if t is float:
        return ["float", repr(v) if not math.isnan(v) else "nan"]
    if t is complex:
        return ["complex", repr(v)]
    if id(v) in stack:
        return ["cycle", len(stack) - stack.index(id(v))]
    if len(stack) > MAX_DEPTH:
        return ["deep", None]
    inner = (*stack, id(v))

    def rec(x):
        return _canon(x, walk, inner, consume)

    if id(t) in _SEQUENCE_IDS:
        return [t.__name__, _items(v, len(v), rec, walk)]
    if id(t) in _SET_IDS:
        return [t.__name__, sorted(_items(v, len(v), rec, walk), key=_text)]
    if t is dict:
        entries = _items(dict.items(v), dict.__len__(v), lambda kv: [rec(kv[0]), rec(kv[1])], walk)
        return ["dict", _by_first_text(entries)]
    cls = walk.of(t)
    if cls.is_type:
        return ["type", type_name(v)]
    if t is types.ModuleType:
        return ["module", v.__name__]
    if id(t) in _FUNCTION_IDS:
        if not consume:
            raise Opaque("callable")
        return ["function", getattr(v, "__qualname__", "?")]
    if cls.iterator:
        if not consume:
            raise Opaque("iterator")
        items, error = [], None
        try:
            for _ in range(MAX_ITEMS):
                items.append(rec(next(v)))
        except StopIteration:
            pass
        except Exception as e:
            error = type_name(type(e))
        return ["iterator", [items, error]]
    if not STRICT:
        return ["object", [type_name(t), _loose_state(v, rec)]]
    name, member, slots, base, trusted, reduce_ex = cls.object()
    state: list[list] = []
    d = _instance_dict(v, t, member)
    if type(d) is dict:
        state.append(["dict", _by_first_text([[k, rec(x)] for k, x in dict.items(d)])])
    for slot, present, x in _slots(v, t, slots):
        state.append(["slot", slot, rec(x) if present else None])
    content = None if base is None else _base_view(v, base)
    if content is not None:
        state.append(["base", rec(content)])
    if trusted:
        try:
            reduced = reduce_ex(v, 4)
            state.append(["reduce", rec(tuple(reduced[1:]) if type(reduced) is tuple else reduced)])
        except Exception as e:
            state.append(["unreducible", type_name(type(e))])
    return ["object", [name, state]]


def _items(values, size: int, rec, walk: _Walk) -> list:
    """Each item's tree; with ``CUT_ONCE``, once the node budget ran out, one marker with the number of items left
    (a container's size stays compared: output cut short past the budget does not pass for the whole)."""
    if not CUT_ONCE:
        return [rec(x) for x in values]
    out: list = []
    for x in values:
        if walk.left <= 0:
            out.append(["cut", size - len(out)])
            break
        out.append(rec(x))
    return out


def _is_iterator(t: type) -> bool:
    if not STRICT:
        return hasattr(t, "__next__") and hasattr(t, "__iter__")
    return _lookup(t, "__next__") is not None and _lookup(t, "__iter__") is not None


_BASES = (str, bytes, bool, int, float, complex, tuple, list, dict, set, frozenset)


def _base_of(t: type) -> type | None:
    """The builtin ``t`` subclasses (the first of ``_BASES`` in its MRO), or None."""
    return next((base for base in _BASES if _subclass(t, base)), None)


def _base_view(v, base: type):
    """The builtin content of an instance of a subclass of ``base``, read with the builtin's own (C) methods."""
    if base is str:
        return str.__str__(v)
    if base is bytes:
        return bytes(memoryview(v))
    if base is bool or base is int:
        return int.__index__(v)
    if base is float:
        return float.__float__(v)
    if base is complex:
        return complex.__complex__(v)
    if base is dict:
        return dict(
            dict.items(v)
        )  # an exact dict: compared like one (order-free); OrderedDict order is in its reduction
    return base(base.__iter__(v))  # type: ignore[attr-defined]  # base is one of tuple/list/set/frozenset here (the scalars returned above): the builtin's iterator, not an override


def _stdlib(t: type) -> bool:
    module = t.__module__.split(".")[0]
    return module in sys.stdlib_module_names or module == "builtins"


def _trusted(t: type) -> bool:
    """A class whose methods the agent cannot have written: a C type, or a standard-library class by its real name."""
    if not _heap(t):
        return True
    module, qualname = _T_MODULE(t), _T_QUALNAME(t)
    return (
        type(module) is str
        and type(qualname) is str
        and module.split(".")[0] in sys.stdlib_module_names
        and _resolves(module, qualname, t)
    )


def _dict_member(t: type) -> tuple[type, Any] | None:
    """(the class along ``t``'s MRO that holds ``__dict__``, its descriptor), None when instances have none. A
    ``__dict__`` a class statement defines other than the descriptor Python made for it is refused: it could show any
    state it likes."""
    for c in _mro(t):
        found = _PROXY_GET(_T_DICT(c), "__dict__")
        if found is None:
            continue
        if _heap(c) and type(found) is not types.GetSetDescriptorType:
            raise Unreadable(f"{type_name(c)} defines __dict__")
        return c, found
    return None


def _instance_dict(v, t: type, member: tuple[type, Any] | None):
    """The instance's real ``__dict__`` through :func:`_dict_member`'s descriptor (None when it has none)."""
    if member is None:
        return None
    c, found = member
    if not _heap(c):
        return found.__get__(v, t)  # a C type's own descriptor
    try:
        return _GETSET_GET(found, v, t)
    except TypeError as e:
        raise Unreadable(f"{type_name(c)}.__dict__ is not its own") from e


def _slot_members(t: type) -> list[tuple[str, types.MemberDescriptorType]]:
    """Every slot's member descriptor the class statements along ``t``'s MRO made, sorted by name."""
    found: dict[str, types.MemberDescriptorType] = {}
    for c in _mro(t):
        if not _heap(c):
            continue
        for name, d in dict.items(dict(_T_DICT(c))):
            if type(d) is types.MemberDescriptorType and type(name) is str and name not in found:
                found[name] = d
    return sorted(found.items())


def _slots(v, t: type, members: list[tuple[str, types.MemberDescriptorType]]) -> list:
    """(name, present, value) of every slot, read through :func:`_slot_members`' descriptors."""
    out = []
    for name, d in members:
        try:
            out.append((name, True, _MEMBER_GET(d, v, t)))
        except AttributeError:
            out.append((name, False, None))
        except TypeError as e:
            raise Unreadable(f"slot {name} is not its own") from e
    return out


def _loose_state(v, rec):
    """An object's state read through its own (overridable) methods: what the box reads with the defence off
    (``STRICT`` False, the hack suites' control runs)."""
    state = []
    try:
        d = object.__getattribute__(v, "__dict__")
    except AttributeError:
        d = None
    if type(d) is dict:
        state.append(["dict", _by_first_text([[k, rec(x)] for k, x in dict.items(d)])])
    names = [
        s for c in type(v).__mro__ for s in c.__dict__.get("__slots__", ()) if s not in ("__dict__", "__weakref__")
    ]
    for name in sorted(set(names) if not isinstance(names, str) else {names}):
        try:
            x = object.__getattribute__(v, name)
        except AttributeError:
            state.append(["slot", name, None])
            continue
        state.append(["slot", name, rec(x)])
    base = next((b for b in _BASES if isinstance(v, b)), None)
    if base is not None:
        state.append(["base", rec(_base_view(v, base))])
    if _stdlib(type(v)):
        try:
            reduced = v.__reduce_ex__(4)
            state.append(["reduce", rec(tuple(reduced[1:]) if type(reduced) is tuple else reduced)])
        except Exception as e:
            state.append(["unreducible", type_name(type(e))])
    elif not state:
        try:
            reduced = object.__reduce_ex__(v, 4)
            state.append(["reduce", rec(tuple(reduced[1:]) if isinstance(reduced, tuple) else reduced)])
        except Exception as e:
            state.append(["unreducible", type_name(type(e))])
    return state


def _text(tree) -> str:
    return json.dumps(tree, sort_keys=True, separators=(",", ":"))


def _by_first_text(entries: list[list]) -> list[list]:
    """``sorted(entries, key=_text)`` for ``[key, value]`` entries, ordered by the key's text alone when no two keys
    have the same text: the order is the same (a complete JSON value's text is never a proper prefix of another's,
    so two entries' texts differ first inside their keys), and a value is not serialized again at every level above
    it (a deep object's state took seconds per call)."""
    if len(entries) < 2:
        return entries
    keyed = [(_text(e[0]), e) for e in entries]
    if len({k for k, _ in keyed}) < len(keyed):
        return sorted(entries, key=_text)
    keyed.sort(key=lambda ke: ke[0])
    return [e for _, e in keyed]


# -- resolving a target inside the imported module ---------------------------------------------------------------


def resolve(module: str, qualname: str) -> types.FunctionType:
    """The plain function behind ``module.qualname`` (through classes, static/class methods, properties, wrappers)."""
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        ns = obj.__dict__ if hasattr(obj, "__dict__") else {}
        if part not in ns:
            raise LookupError(f"{module}.{qualname}: {part!r} not found")
        obj = ns[part]
    name = qualname.rsplit(".", 1)[-1]
    for _ in range(10):
        if isinstance(obj, types.FunctionType) and obj.__name__ == name:
            return obj
        for attr in ("__func__", "fget", "__wrapped__", "func"):
            inner = getattr(obj, attr, None)
            if inner is not None:
                obj = inner
                break
        else:
            break
    raise LookupError(f"{module}.{qualname}: no plain function named {name!r} behind it")


# -- pickling a call's inputs --------------------------------------------------------------------------------------


def dumps(value: object, protocol: int = 4) -> bytes:
    """``cloudpickle.dumps(value, protocol)``, except that the items of an instance of a subclass of ``dict`` or
    ``list`` are stored back by ``dict``'s and ``list``'s own methods, as they were: pickle stores them through the
    subclass's ``__setitem__`` or ``append`` before the instance has its attributes, so a class whose ``__setitem__``
    reads one (prettytable's ``ObservableDict``) fails to load, and every call given one is lost to the replay. The
    loads stay plain ``pickle.loads`` (:func:`_exact_items`)."""
    buf = io.BytesIO()
    _pickler()(buf, protocol=protocol).dump(value)
    return buf.getvalue()


_PICKLER: type | None = None


def _pickler() -> type:
    """The pickler class of :func:`dumps`, made on first use: cloudpickle is imported after the project's paths."""
    global _PICKLER
    if _PICKLER is None:
        import cloudpickle

        class ExactItems(cloudpickle.Pickler):
            def reducer_override(self, obj):
                t = type(obj)
                if t is not dict and t is not list and isinstance(obj, (dict, list)) and _heap(t):
                    rv = _exact_items(obj)
                    if rv is not None:
                        return rv
                return super().reducer_override(obj)

        _PICKLER = ExactItems
    return _PICKLER


def _exact_items(obj) -> tuple | None:
    """pickle's own reduction of ``obj`` (``__reduce_ex__(4)``: its class, arguments and state), with its items
    read and stored back by ``dict``'s and ``list``'s own methods (:data:`_SET_EXACT`), in pickle's order: the items,
    then the state. None for a class that pickles itself its own way (``__reduce__``, ``__reduce_ex__``)."""
    t = type(obj)
    if t.__reduce_ex__ is not object.__reduce_ex__ or t.__reduce__ is not object.__reduce__:
        return None
    try:
        rv = obj.__reduce_ex__(4)
    except Exception:
        return None  # pickle meets the same error and reports it
    if not isinstance(rv, tuple) or len(rv) < 3:
        return None
    items = list(dict.items(obj)) if isinstance(obj, dict) else list(list.__iter__(obj))
    return rv[0], rv[1], (items, rv[2]), None, None, _SET_EXACT


def _exact_setter():
    """The state setter of :func:`_exact_items`, made inside a function so that cloudpickle pickles it by value (it
    has no importable name): the replay box loads it without this module."""

    def set_exactly(obj, packed) -> None:
        """The items by ``dict.update`` / ``list.extend``, then the state as pickle's BUILD sets it."""
        items, state = packed
        if isinstance(obj, dict):
            dict.update(obj, items)
        else:
            list.extend(obj, items)
        if state is None:
            return
        setstate = getattr(obj, "__setstate__", None)
        if setstate is not None:
            setstate(state)
            return
        slots = None
        if isinstance(state, tuple) and len(state) == 2:
            state, slots = state
        if state:
            obj.__dict__.update(state)
        for key, value in (slots or {}).items():
            setattr(obj, key, value)

    return set_exactly


_SET_EXACT = _exact_setter()


# -- deriving fresh calls ------------------------------------------------------------------------------------------


# -- running one call ---------------------------------------------------------------------------------------------


STREAM_ITEMS = 10_000
"""Items a stream argument gives before it ends with :class:`StreamEnd`: far more than a lazy result's ``MAX_ITEMS``
need, few enough that code reading every item first fails in milliseconds, not at a call's time limit."""


class StreamEnd(BaseException):
    """A stream argument read past :data:`STREAM_ITEMS`. Not an ``Exception``: code that catches every error still
    sees it, and gold's outcome there (a raise, or a result that cannot be read) is never kept."""


_STREAMS: dict[int, object] = {}
"""This process's stream arguments by id, held so that an id is not reused while the process lives: the canonical
form knows a stream by identity (:func:`stream_of`)."""


def _cycled(items: tuple):
    for at in range(STREAM_ITEMS):
        yield items[at % len(items)]
    raise StreamEnd


def stream_of(items) -> Iterator:
    """A stream argument (``inputs.STREAM``): the items of a recorded list or tuple, again and again, one at a time,
    up to :data:`STREAM_ITEMS`. A generator, so no attribute holds the items (its frame is out of the code policy's
    reach), and its canonical form is ``["stream", None]`` wherever it is met: how far an implementation read it is
    not compared, only what it made of the items."""
    stream = _cycled(tuple(items))
    _STREAMS[id(stream)] = stream
    return stream


def streamed(args: tuple, kwargs: dict, where: int | str | None) -> tuple[tuple, dict]:
    """``args`` and ``kwargs`` with the items at ``where`` (an index into ``args``, a name in ``kwargs``) passed as a
    stream (:func:`stream_of`); as they are for None."""
    if where is None:
        return args, kwargs
    if type(where) is int:
        return (*args[:where], stream_of(args[where]), *args[where + 1 :]), kwargs
    return args, {**kwargs, where: stream_of(kwargs[where])}


def stand_in(original, tag: str):
    """A variadic stand-in for a function of a generated call (``inputs.STAND_IN``): it takes any arguments and
    returns a value that says which stand-in was called with what: ``(tag, arguments by name)`` where they bind to the
    function's own signature, defaults applied (``f(x, d)`` and ``f(x, default=d)`` are one call, as they are for the
    function), else ``(tag, args, keyword items)``. It bears the function's names, so no name tells it from a function
    the tests could have passed."""
    import inspect  # only where a call passes stand-ins

    try:
        sig: inspect.Signature | None = inspect.signature(original)
    except (TypeError, ValueError):
        sig = None

    def called(*args, **kwargs):
        if sig is not None:
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError:
                pass
            else:
                bound.apply_defaults()
                return (tag, tuple(bound.arguments.items()))
        return (tag, args, tuple(sorted(kwargs.items())))

    for name in ("__name__", "__qualname__", "__module__", "__doc__"):
        value = getattr(original, name, None)
        if type(value) is str or (name == "__doc__" and value is None):
            setattr(called, name, value)
    return called


def with_stand_ins(args: tuple, kwargs: dict, places) -> tuple[tuple, dict]:
    """``args`` and ``kwargs`` with a :func:`stand_in` at each of ``places`` (``inputs.Fresh.stand_ins``: an index
    in ``args`` or a name in ``kwargs``, then the index or key in that list, tuple or dict)."""
    if not places:
        return args, kwargs
    held: dict = {**dict(enumerate(args)), **{("k", k): v for k, v in kwargs.items()}}
    for n, (where, *inner) in enumerate(places):
        key = where if type(where) is int else ("k", where)
        value = held[key]
        tag = f"{getattr(value if not inner else value[inner[0]], '__qualname__', '?')}#{n}"
        if not inner:
            held[key] = stand_in(value, tag)
        elif type(value) is dict:
            held[key] = {**value, inner[0]: stand_in(value[inner[0]], tag)}
        else:
            items = list(value)
            items[inner[0]] = stand_in(items[inner[0]], tag)
            held[key] = type(value)(items)
    return tuple(held[i] for i in range(len(args))), {k: held[("k", k)] for k in kwargs}


def outcome(
    fn, payload_bytes: bytes, followups: list[bytes], loads, stream: int | str | None = None, stand_ins=()
) -> dict:
    """Call ``fn`` on one pickled input (``stream``: where it passes a stream, :func:`streamed`; ``stand_ins``: where
    it passes stand-ins, :func:`with_stand_ins`) and return its canonical outcome (in the forked child)."""
    try:
        args, kwargs, _method = loads(payload_bytes)
        args, kwargs = streamed(args, kwargs, stream)
        args, kwargs = with_stand_ins(args, kwargs, stand_ins)
    except Exception as e:
        return {"load_error": type_name(type(e))}
    result: dict = {}
    try:
        value = fn(*args, **kwargs)
    except BaseException as e:  # SystemExit/KeyboardInterrupt from the code under test are outcomes too
        result["raised"] = type_name(type(e))
    else:
        if callable(value) and not isinstance(value, type):
            result["callable"] = [_follow(value, f, loads) for f in followups]
        else:
            result["returned"] = _safe(value)
    result["args_after"] = _safe((args, kwargs))
    return result


def _follow(fn, payload_bytes: bytes, loads) -> dict:
    try:
        args, kwargs = loads(payload_bytes)
    except Exception as e:
        return {"load_error": type_name(type(e))}
    try:
        value = fn(*args, **kwargs)
    except BaseException as e:
        return {"raised": type_name(type(e))}
    return {"returned": _safe(value)}


def _safe(value):
    try:
        return canonical(value)
    except BaseException as e:  # a value whose inspection fails is an outcome, not a crash
        return ["uninspectable", type_name(type(e))]


def judged(outcome):
    """What of a call's outcome the host compares (crf_prime/featdel/replay.py ``judged``): a raise only as raised."""
    if not isinstance(outcome, dict):
        return outcome
    if "raised" in outcome:
        return {"raised": True}
    if isinstance(outcome.get("callable"), list):
        return {**outcome, "callable": [judged(f) for f in outcome["callable"]]}
    return outcome


def judged_text(outcome) -> str:
    """:func:`judged` as JSON text with sorted keys: equal texts are equal outcomes."""
    return json.dumps(judged(outcome), sort_keys=True)


_real_paths: dict[str, str] = {}
"""A code object's file name -> its real path, for :func:`reaching` (filled in the parent by :func:`known_paths`,
so that each call's child starts with the files imported before it)."""


def known_paths() -> None:
    """Fill :data:`_real_paths` for the modules imported so far (the parent's, before it forks a traced call)."""
    for module in list(sys.modules.values()):
        name = getattr(module, "__file__", None)
        if isinstance(name, str) and name not in _real_paths:
            _real_paths[name] = os.path.realpath(name)


def reaching(body: Callable[[], _R]) -> tuple[_R, dict[str, list[int]]]:
    """``body()`` under a line tracer (in the threads it starts too): its result, and the ``REACH`` lines it executed
    (file -> sorted lines).
    The whole outcome is traced: a deleted line may run only when a returned iterator is consumed."""
    hit: dict[str, set[int]] = {}
    watched: dict[types.CodeType, tuple[set[int], set[int]] | None] = {}  # code -> (its lines not hit yet, hit)

    def tracer(frame, _event, _arg):
        code = frame.f_code
        if code not in watched:  # line events only in code whose own lines hold a watched one
            path = _real_paths.get(code.co_filename)
            if path is None:  # once per file name (realpath is a system call per path part)
                path = _real_paths[code.co_filename] = os.path.realpath(code.co_filename)
            mine = REACH[path].intersection(n for _, _, n in code.co_lines()) if path in REACH else None
            watched[code] = (set(mine), hit.setdefault(path, set())) if mine else None
        state = watched[code]
        if state is None:
            return None
        left, found = state

        def local(frame, event, _arg):
            if event == "line" and frame.f_lineno in left:
                left.discard(frame.f_lineno)
                found.add(frame.f_lineno)
                if not left:  # every watched line of this code ran: no more events from it (a loop's lines)
                    watched[code] = None
                    frame.f_trace_lines = False
            return local

        return local

    sys.settrace(tracer)
    threading.settrace(tracer)  # a thread the call starts runs its code too (a pool's worker)
    try:
        result = body()
    finally:
        threading.settrace(None)
        sys.settrace(None)
    return result, {path: sorted(lines) for path, lines in sorted(hit.items()) if lines}


def _run_child(fn, call: dict, loads, write_fd: int) -> None:
    def run() -> dict:
        return outcome(
            fn, call["payload"], call.get("followups", []), loads, call.get("stream"), call.get("stand_ins", ())
        )

    try:
        if REACH:
            got, reached = reaching(run)
            got["reached"] = reached
        else:
            got = run()
        data = json.dumps(got, sort_keys=True)
    except BaseException as e:
        data = json.dumps({"driver_error": type_name(type(e))})
    view = memoryview(data.encode())
    while view:
        view = view[os.write(write_fd, view) :]


def run_one(fn, call: dict, loads, timeout_s: float) -> dict:
    """Fork, run one call in the child, read its JSON back; timeout / crash / early exit are outcomes."""
    data, status = _forked(lambda w: _run_child(fn, call, loads, w), timeout_s)
    if data is None:
        return {"timeout": timeout_s}
    if os.WIFSIGNALED(status):
        return {"crashed": f"signal {os.WTERMSIG(status)}"}
    try:
        return json.loads(data)
    except ValueError:
        return {"no_result": f"exit {os.waitstatus_to_exitcode(status)}"}


def run_sequence(fns: dict, calls: list[dict], order: list[int], loads, timeout_s: float) -> dict[str, dict]:
    """Every call in ``order`` one after another in ONE forked child: what a call leaves behind in the process
    (module globals, caches, counters) is there for the next, as in real use. Outcomes are streamed one JSON line per
    call; those missing after a crash or the deadline are simply absent (a mismatch where gold's are expected)."""

    def child(w: int) -> None:
        for i in order:
            call = calls[i]
            fn = fns.get(call["target"])
            if fn is None or isinstance(fn, BaseException):
                continue
            try:
                line = json.dumps(
                    [
                        call["id"],
                        outcome(
                            fn,
                            call["payload"],
                            call.get("followups", []),
                            loads,
                            call.get("stream"),
                            call.get("stand_ins", ()),
                        ),
                    ],
                    sort_keys=True,
                )
            except BaseException as e:
                line = json.dumps([call["id"], {"driver_error": type_name(type(e))}])
            view = memoryview(line.encode() + b"\n")
            while view:
                view = view[os.write(w, view) :]

    data, _ = _forked(child, timeout_s, partial=True)
    out: dict[str, dict] = {}
    for line in (data or b"").split(b"\n"):
        try:
            call_id, got = json.loads(line)
        except ValueError:
            continue  # the line cut by a crash or the deadline
        out[call_id] = got
    return out


def _forked(body, timeout_s: float, *, partial: bool = False, group: bool = False) -> tuple[bytes | None, int]:
    """Run ``body(write_fd)`` in a forked child; (what it wrote, wait status). At the deadline the child is killed
    (with ``group``, its own children too): the data is None, or with ``partial`` what it wrote so far."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        if group:
            os.setpgid(0, 0)
        try:
            random.seed()
            body(w)
        finally:
            os._exit(0)
    if group:
        with contextlib.suppress(OSError):  # both sides set it (the usual idiom): no window where a kill misses
            os.setpgid(pid, pid)
    os.close(w)
    chunks, deadline, timed_out = [], time.monotonic() + timeout_s, False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([r], [], [], left)
        if not ready:
            continue
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    if timed_out:
        if group:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if timed_out and not partial:
        return None, status
    return b"".join(chunks), status


def main(config_path: str) -> int:
    with open(config_path) as fh:
        cfg = json.load(fh)
    global STRICT, REACH, CUT_ONCE
    STRICT = bool(cfg.get("strict", True))
    CUT_ONCE = cfg.get("canon", CANON) >= 2
    REACH = {path: frozenset(lines) for path, lines in cfg.get("reach", {}).items()}
    variants = cfg.get("variants")
    if variants is None:
        _add_paths(cfg["paths"], cfg.get("lookups"))
    else:
        paths = [p for v in variants for p in v["paths"]]
        if not any(_provides(p, "cloudpickle") for p in paths):
            import cloudpickle  # noqa: F401 - imported once here, before any project code, for every variant
        preload(cfg.get("preload", []), paths)

    with open(cfg["calls"], "rb") as fh:
        calls = pickle.load(fh)
    if cfg["mode"] == "derive":
        return _derive_main(cfg, calls, cfg["out"])
    if variants is None:
        _run_calls(cfg, calls, cfg["out"])
        return 0
    for v in variants:  # one child per tree; the parent never imports project code
        _forked(lambda _w, v=v: _variant(cfg, calls, v), v["wall_s"], group=True)
    return 0


def _add_paths(paths: list[str], lookups: dict | None) -> None:
    """The tree's import paths, and the lookup guard for its files (before any project code is imported)."""
    for p in reversed(paths):
        sys.path.insert(0, p)
    import cloudpickle  # noqa: F401 - registers nothing; plain pickle.loads reads its output

    if lookups is not None:
        import crf_lookup_guard  # type: ignore[import-not-found]  # beside this driver (featdel/lookup_guard.py)

        crf_lookup_guard.install_settings(lookups)


def preload(names: list[str], paths: list[str]) -> list[str]:
    """Import the standard-library modules among ``names`` here, once, so that every tree's child inherits them
    instead of importing them afresh (xmltodict's import takes 46 ms, 36 of them the standard library's). One whose
    top-level name the trees' ``paths`` could provide (a module, package or namespace portion there) is left to each
    tree: there it would shadow the standard library's. Returns the names imported."""
    done = []
    for name in names:
        top = name.partition(".")[0]
        if top not in sys.stdlib_module_names or importlib.machinery.PathFinder.find_spec(top, paths) is not None:
            continue
        try:
            importlib.import_module(name)
        except (Exception, SystemExit):  # e.g. a platform's module: the tree meets the same error itself
            continue
        done.append(name)
    return done


def _provides(path: str, name: str) -> bool:
    return os.path.exists(os.path.join(path, name)) or os.path.exists(os.path.join(path, name + ".py"))


def _variant(cfg: dict, calls: list[dict], variant: dict) -> None:
    """One tree of a ``variants`` run (mutation testing: many trees, one box): its own paths, its own results."""
    _add_paths(variant["paths"], variant.get("lookups"))
    _run_calls(cfg, calls, variant["out"], variant.get("alone"))


def _run_calls(cfg: dict, calls: list[dict], out_path: str, only: list[str] | None = None) -> None:
    """Every call alone (one child each, shuffled; not with ``alone`` off; only the calls of ``only`` when given:
    a gold mutant's tree runs alone only the calls whose gold run reached its code), then in sequence when asked;
    the outcomes as JSON at ``out_path``."""
    run_alone = None if only is None else frozenset(only)
    loads = pickle.loads
    targets = cfg["targets"]
    differs: dict[str, str] | None = cfg.get("differs")
    alone = cfg.get("alone", True)  # False: the in-sequence run only (gold's second run at generation)
    fns: dict[int, object] = {}
    results: dict[str, dict] = {}
    order = list(range(len(calls)))
    random.Random(cfg.get("seed", 0)).shuffle(order)
    known = 0  # modules whose files known_paths has seen
    for i in order:
        call = calls[i]
        t = call["target"]
        if t not in fns:
            try:
                fns[t] = resolve(targets[t]["module"], targets[t]["qualname"])
            except BaseException as e:  # an unresolvable target is the attempt's outcome
                fns[t] = e
        fn = fns[t]
        if isinstance(fn, BaseException):
            results[call["id"]] = {"unresolvable": type_name(type(fn))}
            continue
        if not alone or (run_alone is not None and call["id"] not in run_alone):
            continue
        slow = cfg.get("derived_timeout_s") if call.get("derived") else None
        if REACH and len(sys.modules) != known:
            known_paths()
            known = len(sys.modules)
        results[call["id"]] = got = run_one(fn, call, loads, min(cfg["timeout_s"], slow or cfg["timeout_s"]))
        if "timeout" in got and cfg.get("stop_on_timeout", True):
            break  # gold finished every kept call in time: the attempt has failed, stop spending time
        if differs is not None and judged_text(got) != differs.get(call["id"]):
            break  # a gold mutant's tree: its first difference from gold ends it (the host judges it)
    else:
        if cfg.get("sequence", False):
            random.Random(cfg.get("seed", 0) + 1).shuffle(order)
            timeout_s = sequence_timeout(cfg["timeout_s"], len(calls))
            order = [i for i in order if "timeout" not in results.get(calls[i]["id"], {})]  # it would hang here too
            for call_id, got in run_sequence(fns, calls, order, loads, timeout_s).items():
                results[call_id + SEQUENCE_SUFFIX] = got
    tmp = out_path + ".tmp"
    with open(tmp, "w") as fh:  # dumps, not dump: json.dump never uses the C encoder (10x slower on deep outcomes)
        fh.write(json.dumps(results, sort_keys=True))
    os.replace(tmp, out_path)


def _derive_main(cfg: dict, calls: list[dict], out_path: str) -> int:
    """Fresh calls generated from the recorded ones on gold's tree (inputs.py), pickled back with their parent's id."""
    import hashlib  # in the box: the driver imports from its own directory

    from inputs import followup_variations, generate  # in the box: the driver imports from its own directory

    targets = cfg["targets"]
    fns: dict[int, object] = {}
    seeds, parents = [], []
    seen: set[tuple[int, str, int | str | None, tuple]] = set()
    for call in calls:
        try:
            args, kwargs, method = pickle.loads(call["payload"])
            if call["target"] not in fns:
                fns[call["target"]] = resolve(targets[call["target"]]["module"], targets[call["target"]]["qualname"])
        except Exception:
            continue
        seen.add((call["target"], hashlib.sha256(call["payload"]).hexdigest(), None, ()))
        seeds.append((call["target"], args, kwargs, method))
        parents.append(call)
    fresh = []
    made: dict[str, int] = {}
    rng = random.Random(cfg.get("seed", 0))
    for f in generate(seeds, fns, rng, cfg["per_target"]):
        try:
            data = dumps((f.args, f.kwargs, f.method))
        except Exception:
            continue
        # a stream's payload is its seed's list, a stand-in's its seed's function
        key = (f.target, hashlib.sha256(data).hexdigest(), f.stream, f.stand_ins)
        if key in seen:
            continue
        seen.add(key)
        parent = parents[f.seed]
        j = made[parent["id"]] = made.get(parent["id"], -1) + 1
        meta = {"varied": f.varied, "operator": f.operator, "keys": f.keys, "parent_keys": f.seed_keys}
        if f.stream is not None:
            meta["stream"] = f.stream
        if f.stand_ins:
            meta["stand_ins"] = f.stand_ins
        followups = parent.get("followups", [])
        more = followup_variations(followups, rng, dumps, cfg.get("followups", 4))
        fresh.append(
            {
                # a served stream or stand-in call as a seed: its list, its functions; what gold's run of it
                # reached is its own
                **{k: v for k, v in parent.items() if k not in ("stream", "stand_ins", "lines", "reaches")},
                "id": f"{parent['id']}~{j}",
                "payload": data,
                "derived": True,
                "followups": followups + more,
                **meta,
            }
        )
    with open(out_path, "wb") as fh:
        pickle.dump(fresh, fh, protocol=4)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
