"""Fresh replay inputs from the recorded calls: type-aware mutation and recombination (runs INSIDE the replay box).

Copied into the box next to ``replay_box.py`` and used by its ``derive`` mode on gold's tree, with only the standard
library (the box runs ``python -S``). The recorded calls are the seed corpus, as in EvalPlus (Liu et al., NeurIPS
2023: type-aware mutation of seed inputs plus differential testing against the reference). Each fresh call changes
one thing of one seed, bound to the target's parameters by name:

- a value: boundary and empty values, other container sizes, neighbours, one element of a container varied
  (``variations``);
- ``None`` <-> a value (one the same parameter had in another call, or its non-None default); where gold never
  declares ``None`` for that parameter (its default is not ``None`` and its source never compares it with ``None``),
  gold's answer there is incidental (``if not xs: return 0`` returns 0 on ``None``) and raising is accepted too
  (``UNDECLARED_NONE``);
- default <-> given: an omitted parameter gets a value, a given one falls back to its default;
- recombination: the value another call passed for this parameter, or another parameter passed, of the same type;
- keyword <-> positional spelling of the same call;
- another type for the same data (``retyped``): a list as a tuple and back, integer items as the equal floats (all of
  them, and one among the others: ``[1, 2, 1.0]``, where items compared by their text differ and by ``==`` do not). Code
  that special-cases the exact types the tests used (fixed only when every item is an ``int``, or only for a
  ``list``) fails there. Kept only where gold's outcome is the same for both types, and compared type-loosely: an
  implementation may return ``1.0`` for ``1`` or a list for a tuple, and may raise on a type the tests never used
  (crf_prime/featdel/record.py);
- a stream (``streamed``): a list or tuple passed as a one-shot iterator of its items cycled ten thousand items long
  (the driver makes it after loading the call: ``replay_box.stream_of``), then ending in an error no ``except
  Exception`` catches. Kept only where gold returns an iterator over it and reads it in time: gold then reads its
  input lazily, and code that reads every item first (``list(seq)``) ends in that error. How far an implementation
  reads ahead is not compared, only what it yields;
- each of the first ``ELEMENT_VARIATIONS`` items of a ``*args`` parameter varied as a value and as a stream
  (``diff(*seqs)``: the sequences are the data);
- a stand-in (``stood_in``): a function passed in an argument (itself, or an item of a list, tuple or dict), in that
  value and in each of its variations, replaced by a variadic one that returns what it was called with (the driver
  makes it after loading the call: ``replay_box.stand_in``). The tests' own functions take the arities the tests
  needed; a stand-in takes any, so an input the tests' functions put out of gold's domain (a three-item form
  ``(f, a, b)`` where the tests' ``f`` takes two arguments) is in it there, and code right only for the arities the
  tests used (``f, a = form``) fails;
- the receiver of a method, or an argument that is an instance of a project class: another recorded one of the same
  class, or a new one built by the class's own constructor (gold's code, at generation) from the recorded one's
  attributes with one constructor argument varied as above (``instances``). A state reached only that way is one the
  class's invariants allow: a constant answer on the recorded states (``Span(1, 4).length() == 3``) is caught, and
  no honest implementation is judged on a state its constructor would refuse.

Candidates are grouped by (parameter, operator) and taken round-robin, so the rare operators that reach untested
branches (``None``, defaults) are not crowded out by the many value variations. Which inputs are kept is decided on
the host: gold must finish each one in time and give the same outcome twice (crf_prime/featdel/record.py).
"""

from __future__ import annotations

import ast
import inspect
import math
import pickle
import random
import signal
import sys
import types
from collections.abc import Callable
from typing import NamedTuple

MAX_POOL = 12
"""Distinct values remembered per parameter (and per type) for recombination."""

FOLLOWUPS = 4
"""New follow-up inputs per generated call whose result is callable."""
PROBES = 2
"""Other seeds each changed value is also tried in (to tell an invalid value from a branch; see ``_probes``)."""
ELEMENT_VARIATIONS = 2
"""Elements of a container varied per variation, and variations taken per element."""
BUILT_PER_CLASS = 16
"""New instances built per project class (receivers and arguments), from at most ``BUILT_SEEDS`` recorded ones
(those whose constructor arguments can be read back: a receiver recorded before ``__init__`` ran has none)."""
BUILT_SEEDS = 3
BUILD_TIMEOUT_S = 0.5
"""Gold's constructor gets this long per new instance (a varied size may make it slow)."""

UNDECLARED_NONE = "none-undeclared"
"""Operator of a fresh call passing ``None`` to a parameter gold never declares ``None`` for (``declared_none``)."""
RETYPE = "retype"
"""Operator of a fresh call that passes the same data under another type (``retyped``)."""

STREAM = "stream"
"""Operator of a fresh call that passes a list or tuple argument as a long iterator of its items (``streamed``)."""
STAND_IN = "stand-in"
"""Operator of a fresh call that passes variadic stand-ins for the functions in an argument (``stood_in``)."""

_P = inspect.Parameter


class Stream:
    """A stream argument of a generated call while it is built: the items to pass as a long iterator.
    :func:`generate` puts the items back in its place and says where (``Fresh.stream``)."""

    __slots__ = ("items",)

    def __init__(self, items: list | tuple) -> None:
        self.items = items

    def __repr__(self) -> str:
        return f"Stream({self.items!r})"


def streamed(value) -> list:
    """``value`` as a stream (:class:`Stream`): only a non-empty list or tuple, whose items are the data."""
    return [Stream(value)] if type(value) in (list, tuple) and value else []


class StandIn:
    """A function in an argument of a generated call while it is built: the driver passes a variadic stand-in in its
    place. :func:`generate` puts the function back and says where (``Fresh.stand_ins``)."""

    __slots__ = ("original",)

    def __init__(self, original) -> None:
        self.original = original

    def __repr__(self) -> str:
        return f"StandIn({self.original!r})"


_FUNCTIONS = (types.FunctionType, types.BuiltinFunctionType, types.MethodType)
"""What a stand-in replaces: functions, builtins and methods (never a class: an instance of it is more than the
result of a call)."""


def _function(value) -> bool:
    return type(value) in _FUNCTIONS


def _swapped(value):
    """``value`` with each function in it (itself, or an item of a list, tuple or dict) as a :class:`StandIn`."""
    if _function(value):
        return StandIn(value)
    if type(value) in (list, tuple):
        return type(value)(StandIn(x) if _function(x) else x for x in value)
    if type(value) is dict:
        return {k: StandIn(x) if _function(x) else x for k, x in value.items()}
    return value


def _holds_function(value) -> bool:
    if _function(value):
        return True
    items = value.values() if type(value) is dict else value if type(value) in (list, tuple) else ()
    return any(_function(x) for x in items)


def stood_in(value, rng: random.Random) -> list:
    """``value`` and each of its variations that holds a function, with its functions as stand-ins
    (:class:`StandIn`): the shapes the tests' functions made out of gold's domain (a longer form) are in it with a
    function that takes any arguments."""
    if not _holds_function(value):
        return []
    return [_swapped(v) for v in [value, *variations(value, rng)] if _holds_function(v)]


def variations(value, rng: random.Random, depth: int = 2) -> list:
    """Type-preserving variations of one argument: boundary, empty, neighbours, other sizes (same exact type), and
    for a list, tuple or dict one element (value) replaced by a variation of its own (``depth`` levels down)."""
    t = type(value)
    out = _shallow(value, rng)
    if depth > 0 and t in (list, tuple, dict) and value:
        out += _inner(value, rng, depth - 1)
    return [v for v in out if type(v) is t]


LONG = 64
"""A list or tuple is also repeated to at least this many items: code right only up to the sizes the other
variations reach (``if len(xs) <= 8``) fails there."""
FLOAT_EXACT = 2**53
"""Integers up to this size are exactly equal to their float (larger ones are left as they are)."""


def retyped(value) -> list:
    """The same data under other types: a list as a tuple and a tuple as a list, and a list or tuple of numbers
    with its integer items as the equal floats, and with one of them as its float among the others (an item equal to
    an earlier one where there is one: ``[1, 2, 1]`` gives ``[1, 2, 1.0]``, where code that compares items by their
    text, ``repr`` or ``str``, sees three distinct items and Python's ``==`` two). Not for scalars: how an honest
    rewrite formats ``3.0`` where gold formats ``3`` is not the task (``"%d"`` vs ``str``)."""
    t = type(value)
    if t not in (list, tuple):
        return []
    out = [tuple(value) if t is list else list(value)]
    numbers = all(type(x) is float or (type(x) is int and abs(x) <= FLOAT_EXACT) for x in value)
    ints = [i for i, x in enumerate(value) if type(x) is int] if numbers else []
    if ints:
        out.append(t(float(x) for x in value))
    if len(ints) > 1:  # with one int, that one as a float is every int as a float
        i = next((i for i in ints if value[i] in value[:i]), ints[0])
        out.append(t([*value[:i], float(value[i]), *value[i + 1 :]]))
    return out


def _inner(value, rng: random.Random, depth: int) -> list:
    """``ELEMENT_VARIATIONS`` copies of a container, each with one element (a dict: one value) varied: elements
    are otherwise only ever the recorded ones, so a rule right only on them would pass (sum without the filter)."""
    keys = list(value) if type(value) is dict else list(range(len(value)))
    out: list = []
    for k in rng.sample(keys, min(len(keys), ELEMENT_VARIATIONS)):
        options = variations(value[k], rng, depth)
        for new in rng.sample(options, min(len(options), ELEMENT_VARIATIONS)):
            if type(value) is dict:
                out.append({**value, k: new})
            else:
                items = list(value)
                items[k] = new
                out.append(type(value)(items))
    return out


def _shallow(value, rng: random.Random) -> list:
    t = type(value)
    out: list = []
    if t is bool:
        out = [not value]
    elif t is int:
        out = [value + 1, value - 1, 0, 1, -1, -value, value * 2 + rng.randint(1, 3), 10**6]
    elif t is float and math.isfinite(value):
        out = [value + 0.5, -value, value * 2, 0.0, 1.0, -1.5]
    elif t is str:
        out = [value[:-1], value + value[:1], value[::-1], "", value[:1], value.upper(), value * 2, " " + value]
        out = out if value else ["a", "ab", "0", " "]
    elif t is bytes:
        out = [value[:-1], value[::-1], b"", value * 2] if value else [b"a", b"\x00"]
    elif t in (list, tuple):
        if value:
            out = [t(value[::-1]), t(value[:-1]), t(value[1:]), t(), t(value[:1]), t(list(value) + list(value[:1]))]
            # sizes of the same parity too (n + 2, n - 2, 2n): a rule right only at the recorded length passes
            # every neighbour of another parity (a median fixed only for four items)
            out += [t(list(value) + list(value[:2])), t(list(value) * 2), t(list(value) * -(-LONG // len(value)))]
            if len(value) > 2:
                out.append(t(value[:-2]))
                items = list(value)
                rng.shuffle(items)
                out.append(t(items))
    elif t is dict and value:
        keys = list(value)
        out = [{k: v for k, v in value.items() if k != keys[-1]}, {k: value[k] for k in reversed(keys)}, {}]
        if len(keys) > 1:
            out.append({k: v for k, v in value.items() if k != keys[0]})
    elif t in (set, frozenset) and value:
        ordered = sorted(value, key=repr)
        out = [t(ordered[1:]), t(ordered[:-1]), t()]
    return out


def _project_class(t: type) -> bool:
    """A class a ``class`` statement of the project made (not a builtin's or the standard library's)."""
    module = getattr(t, "__module__", "") or ""
    return isinstance(t, type) and t not in _PLAIN and module.split(".")[0] not in _STDLIB


_STDLIB = frozenset(sys.stdlib_module_names) | {"builtins"}
_PLAIN = (type(None), bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset)


def _attribute(value, name: str):
    """The recorded instance's value for constructor parameter ``name``: the attribute of that name, or of the
    private spelling (``_name``); ``inspect.Parameter.empty`` when it has neither."""
    state = getattr(value, "__dict__", None)
    for attr in (name, "_" + name):
        if isinstance(state, dict) and attr in state:
            return state[attr]
        if attr in getattr(type(value), "__slots__", ()) or attr in getattr(type(value), "_fields", ()):
            try:
                return getattr(value, attr)
            except Exception:
                return _P.empty
    return _P.empty


def _constructor_arguments(value) -> tuple[inspect.Signature, dict] | None:
    """The recorded instance's class constructor signature and the arguments read back from its state: each
    parameter from the attribute of its name (or its default); None when a required one has no such attribute."""
    t = type(value)
    try:
        sig = inspect.signature(t)
    except (TypeError, ValueError):
        return None
    arguments: dict = {}
    for name, p in sig.parameters.items():
        if p.kind in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD):
            continue
        found = _attribute(value, name)
        if found is not _P.empty:
            arguments[name] = found
        elif p.default is _P.empty:
            return None
    return (sig, arguments) if arguments else None


class _Slow(Exception):
    pass


def _construct(t: type, sig: inspect.Signature, arguments: dict):
    """``t(...)`` on ``arguments`` within ``BUILD_TIMEOUT_S``; None when the constructor refuses or is slow."""

    def alarm(_signum, _frame):
        raise _Slow

    args, kwargs = _unbind(sig, arguments, keywords=False, method=False)
    try:
        previous = signal.signal(signal.SIGALRM, alarm)
    except ValueError:  # not the main thread (unit tests): no time limit
        previous = None
    else:
        signal.setitimer(signal.ITIMER_REAL, BUILD_TIMEOUT_S)
    try:
        return t(*args, **kwargs)
    except BaseException:  # the constructor refused these arguments (or ran out of time): not a valid state
        return None
    finally:
        if previous is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def _state_key(value) -> str:
    """Identity of an instance's state, for de-duplicating built instances (its own ``__dict__`` in a stable form)."""
    state = getattr(value, "__dict__", None)
    if not isinstance(state, dict):
        return f"id:{id(value)}"
    return repr(sorted((k, _key(v)) for k, v in state.items()))


def instances(recorded: list, rng: random.Random, limit: int = BUILT_PER_CLASS) -> list:
    """New instances of the recorded instances' class, built by its own constructor: each constructor parameter
    read back from the attribute of its name, then one of them varied (``variations``). Only states the
    constructor accepts are made; gold's checks on the host then keep the calls on which gold is deterministic."""
    out: list = []
    seen: set[str] = set()
    usable = [(type(v), found) for v in recorded if _project_class(type(v)) and (found := _constructor_arguments(v))]
    queues = []
    for t, (sig, arguments) in usable[:BUILT_SEEDS]:
        changed = [{**arguments, name: v} for name, old in arguments.items() for v in variations(old, rng)]
        rng.shuffle(changed)
        queues.append([(t, sig, args) for args in [arguments, *changed]])
    for t, sig, args in (q[k] for k in range(max(map(len, queues), default=0)) for q in queues if k < len(q)):
        if len(out) >= limit:
            break
        built = _construct(t, sig, args)
        if type(built) is not t:
            continue
        key = _state_key(built)
        if key not in seen:
            seen.add(key)
            out.append(built)
    return out


def declared_none(fn: Callable, sig: inspect.Signature) -> set[str] | None:
    """Parameters for which gold declares ``None``: a ``None`` default, or a comparison with ``None`` (``is``, ``is
    not``, ``==``, ``!=``) anywhere in its source. None when the source cannot be read (every parameter counts)."""
    try:
        tree = ast.parse(_dedented(inspect.getsource(inspect.unwrap(fn))))
    except Exception:
        return None
    out = {name for name, p in sig.parameters.items() if p.default is None}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        if any(isinstance(o, ast.Constant) and o.value is None for o in operands):
            out |= {o.id for o in operands if isinstance(o, ast.Name)}
    return out


def _dedented(source: str) -> str:
    lines = source.splitlines()
    indent = min((len(x) - len(x.lstrip()) for x in lines if x.strip()), default=0)
    return "\n".join(x[indent:] for x in lines)


def _signature(fn: Callable) -> inspect.Signature | None:
    try:
        return inspect.signature(fn, follow_wrapped=False)
    except (TypeError, ValueError):
        return None


def _bind(sig: inspect.Signature, args: tuple, kwargs: dict) -> dict | None:
    try:
        return dict(sig.bind(*args, **kwargs).arguments)
    except TypeError:
        return None


def _unbind(sig: inspect.Signature, arguments: dict, *, keywords: bool, method: bool) -> tuple[tuple, dict]:
    """(args, kwargs) passing ``arguments``; positional-or-keyword ones by name when ``keywords`` (or after a gap),
    a method's receiver always first by position."""
    args: list = []
    kwargs: dict = {}
    gap = False
    for i, (name, p) in enumerate(sig.parameters.items()):
        if i == 0 and method and name in arguments:
            args.append(arguments[name])
            continue
        if name not in arguments:
            gap = gap or p.kind is not _P.VAR_POSITIONAL
            continue
        value = arguments[name]
        if p.kind is _P.VAR_POSITIONAL:
            args.extend(value)
        elif p.kind is _P.VAR_KEYWORD:
            kwargs.update(value)
        elif p.kind is _P.POSITIONAL_ONLY or (p.kind is _P.POSITIONAL_OR_KEYWORD and not gap and not keywords):
            args.append(value)
        else:
            kwargs[name] = value
            gap = True
    return tuple(args), kwargs


def _key(value) -> str:
    """Identity of a value for de-duplicating pools (type + repr; no ``__eq__`` of project classes)."""
    try:
        return f"{type(value).__qualname__}:{object.__repr__(value) if not _plain(value) else repr(value)}"
    except Exception:
        return f"{type(value).__qualname__}:{id(value)}"


def _plain(value) -> bool:
    return type(value) in _PLAIN


class _Pools:
    """Values seen per (target, parameter) and per exact type, across every recorded call."""

    def __init__(self) -> None:
        self.by_param: dict[tuple[int, str], dict[str, object]] = {}
        self.by_type: dict[type, dict[str, object]] = {}
        self.receivers: dict[type, dict[int, object]] = {}

    def add(self, target: int, name: str, value) -> None:
        if not _plain(value):
            self.add_receiver(value)
            return
        for pool in (self.by_param.setdefault((target, name), {}), self.by_type.setdefault(type(value), {})):
            if len(pool) < MAX_POOL:
                pool.setdefault(_key(value), value)

    def add_receiver(self, value) -> None:
        """A recorded instance of a project class (a receiver or an argument): recombined among calls."""
        pool = self.receivers.setdefault(type(value), {})
        if len(pool) < MAX_POOL:
            pool.setdefault(id(value), value)

    def build(self, rng: random.Random) -> dict[type, list]:
        """New instances per class, built by its constructor from the recorded ones (``instances``)."""
        return {t: instances(list(pool.values()), rng) for t, pool in self.receivers.items()}


def _candidates(
    target: int,
    sig: inspect.Signature,
    bound: dict,
    method: bool,
    pools: _Pools,
    rng: random.Random,
    built: dict[type, list],
    declared: set[str] | None = None,
) -> list[tuple[str, dict, bool]]:
    """(group, arguments, by-keyword) for every one-step change of one seed call; ``declared``: the parameters gold
    declares ``None`` for (None: all)."""
    names = list(sig.parameters)
    out: list[tuple[str, dict, bool]] = []
    receiver = names[0] if method and names else None

    def put(group: str, name: str, value) -> None:
        changed = dict(bound)
        changed[name] = value
        out.append((group, changed, False))

    for name, p in sig.parameters.items():
        if p.kind is _P.VAR_POSITIONAL and type(bound.get(name)) is tuple:
            items = bound[name]
            for k, item in enumerate(items[:ELEMENT_VARIATIONS]):
                changes = [("vary", v) for v in variations(item, rng)] + [(STREAM, v) for v in streamed(item)]
                changes += [(STAND_IN, v) for v in stood_in(item, rng)]
                for operator, v in changes:
                    put(f"{name}:{operator}", name, (*items[:k], v, *items[k + 1 :]))
            continue
        if p.kind in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD):
            continue
        if name in bound and (name == receiver or not _plain(bound[name])):
            for other in pools.receivers.get(type(bound[name]), {}).values():
                if other is not bound[name]:
                    put(f"{name}:instance", name, other)
            for new in built.get(type(bound[name]), []):
                put(f"{name}:built", name, new)
        if name == receiver:
            continue
        seen = list(pools.by_param.get((target, name), {}).values())
        if name not in bound:  # default -> given
            base = p.default if p.default is not _P.empty else None
            given = [v for v in seen] + variations(base, rng) + ([None] if base is not None else [])
            for v in given:
                put(f"{name}:given", name, v)
            continue
        value = bound[name]
        if p.default is not _P.empty:  # given -> default
            out.append((f"{name}:default", {k: v for k, v in bound.items() if k != name}, False))
        if value is None:
            others = [v for v in seen if v is not None]
            others += [p.default] if p.default not in (None, _P.empty) else []
            for v in others:
                put(f"{name}:from-none", name, v)
            continue
        put(f"{name}:{'none' if declared is None or name in declared else UNDECLARED_NONE}", name, None)
        for v in variations(value, rng):
            put(f"{name}:vary", name, v)
        for v in retyped(value):
            put(f"{name}:{RETYPE}", name, v)
        for v in streamed(value):
            put(f"{name}:{STREAM}", name, v)
        for v in stood_in(value, rng):
            put(f"{name}:{STAND_IN}", name, v)
        for v in seen + list(pools.by_type.get(type(value), {}).values()):
            if _key(v) != _key(value):
                put(f"{name}:recombine", name, v)
    if any(p.kind is _P.POSITIONAL_OR_KEYWORD and n in bound and n != receiver for n, p in sig.parameters.items()):
        out.append(("keywords", dict(bound), True))
    return out


def _probes(
    target: int, picked: list[tuple[int, str, dict, bool]], seeds: list, bound: list[dict]
) -> list[tuple[int, str, dict, bool]]:
    """Each changed plain value also placed into up to ``PROBES`` other seeds of the target: where gold raises on it
    there, the value is invalid for its parameter, and raising on it elsewhere is accepted (validation order)."""
    others = [i for i, s in enumerate(seeds) if s[0] == target and bound[i]]
    out = []
    for i, group, arguments, _ in picked:
        name = group.split(":", 1)[0]
        if ":" not in group or group.endswith((RETYPE, STREAM, STAND_IN)) or name not in arguments:
            continue  # a retyped value is judged type-loosely against its own seed only; a stream only where gold streams
        if not _plain(arguments[name]):
            continue
        for j in [j for j in others if j != i][:PROBES]:
            out.append((j, f"{name}:probe", {**bound[j], name: arguments[name]}, False))
    return out


class Fresh(NamedTuple):
    """One generated call."""

    seed: int
    """Index of the seed call it changes."""
    target: int
    args: tuple
    kwargs: dict
    method: bool
    varied: str
    """The parameter it changes ("" when only the spelling changed)."""
    operator: str
    """How it changes it: vary, none, given, default, recombine, instance, built, probe, ... (keywords: spelling)."""
    keys: dict[str, str]
    """Parameter -> identity of a plain value passed to it (for the host's leniency on validation order)."""
    seed_keys: dict[str, str]
    """The same for the seed call."""
    stream: int | str | None = None
    """Where the call passes a stream (``STREAM``): the index in ``args`` or the name in ``kwargs``; None: nowhere."""
    stand_ins: tuple[tuple[int | str, ...], ...] = ()
    """Where the call passes stand-ins (``STAND_IN``): each an index in ``args`` or a name in ``kwargs``, then the
    index or key in that list, tuple or dict when the function is an item of it."""


def keys_of(arguments: dict) -> dict[str, str]:
    return {name: _key(v) for name, v in arguments.items() if _plain(v)}


def generate(
    seeds: list[tuple[int, tuple, dict, bool]],
    fns: dict[int, Callable],
    rng: random.Random,
    per_target: int,
) -> list[Fresh]:
    """Up to ``per_target`` fresh calls per target from the seed calls ``(target, args, kwargs, is_method)``."""
    sigs = {t: _signature(fn) for t, fn in fns.items()}
    pools = _Pools()
    bound: list[dict] = []
    for target, args, kwargs, method in seeds:
        sig = sigs.get(target)
        b = _bind(sig, args, kwargs) if sig is not None else None
        bound.append(b or {})
        if b is None or sig is None:
            continue
        names = list(sig.parameters)
        for name, value in b.items():
            if method and names and name == names[0]:
                pools.add_receiver(value)
            else:
                pools.add(target, name, value)
    built = pools.build(rng)
    declared = {t: declared_none(fn, sig) for t, fn in fns.items() if (sig := sigs.get(t)) is not None}
    groups: dict[int, dict[str, list[tuple[int, str, dict, bool]]]] = {}
    for i, (target, _args, _kwargs, method) in enumerate(seeds):
        sig, b = sigs.get(target), bound[i]
        if sig is None or not b:
            continue
        for group, arguments, keywords in _candidates(target, sig, b, method, pools, rng, built, declared.get(target)):
            groups.setdefault(target, {}).setdefault(group, []).append((i, group, arguments, keywords))
    out: list[Fresh] = []
    for target, by_group in sorted(groups.items()):
        target_sig = sigs[target]
        if target_sig is None:  # never: only targets with a signature have groups
            continue
        queues = [by_group[g] for g in sorted(by_group)]
        for q in queues:
            rng.shuffle(q)
        rng.shuffle(queues)
        picked: list[tuple[int, str, dict, bool]] = []
        while len(picked) < per_target and any(queues):
            for q in queues:
                if q and len(picked) < per_target:
                    picked.append(q.pop())
        picked += _probes(target, picked, seeds, bound)
        for i, group, arguments, keywords in picked:
            args, kwargs = _unbind(target_sig, arguments, keywords=keywords, method=seeds[i][3])
            args, kwargs, stream = _placed(args, kwargs)
            args, kwargs, stand_ins = _stand_ins_placed(args, kwargs)
            varied, _, operator = group.rpartition(":")
            out.append(
                Fresh(
                    i,
                    target,
                    args,
                    kwargs,
                    seeds[i][3],
                    varied,
                    operator,
                    keys_of(arguments),
                    keys_of(bound[i]),
                    stream,
                    stand_ins,
                )
            )
    return out


def _placed(args: tuple, kwargs: dict) -> tuple[tuple, dict, int | str | None]:
    """``args`` and ``kwargs`` with a :class:`Stream`'s items in its place, and that place (None: no stream)."""
    for i, value in enumerate(args):
        if type(value) is Stream:
            return (*args[:i], value.items, *args[i + 1 :]), kwargs, i
    for name, value in kwargs.items():
        if type(value) is Stream:
            return args, {**kwargs, name: value.items}, name
    return args, kwargs, None


def _stand_ins_placed(args: tuple, kwargs: dict) -> tuple[tuple, dict, tuple[tuple[int | str, ...], ...]]:
    """``args`` and ``kwargs`` with each :class:`StandIn`'s function back in its place, and those places."""
    places: list[tuple[int | str, ...]] = []

    def put_back(where: int | str, value):
        if type(value) is StandIn:
            places.append((where,))
            return value.original
        if type(value) in (list, tuple) and any(type(x) is StandIn for x in value):
            places.extend((where, i) for i, x in enumerate(value) if type(x) is StandIn)
            return type(value)(x.original if type(x) is StandIn else x for x in value)
        if type(value) is dict and any(type(x) is StandIn for x in value.values()):
            places.extend((where, k) for k, x in value.items() if type(x) is StandIn)
            return {k: x.original if type(x) is StandIn else x for k, x in value.items()}
        return value

    args = tuple(put_back(i, v) for i, v in enumerate(args))
    kwargs = {name: put_back(name, v) for name, v in kwargs.items()}
    return args, kwargs, tuple(places)


def followup_variations(
    followups: list[bytes], rng: random.Random, dumps: Callable, limit: int = FOLLOWUPS
) -> list[bytes]:
    """New inputs for a returned callable: one argument of a recorded follow-up call varied (``variations``), so a
    callable that answers only the inputs the tests gave it is caught. Pickled with ``dumps``."""
    out: list[bytes] = []
    for data in followups:
        try:
            args, kwargs = pickle.loads(data)
        except Exception:
            continue
        slots = [("a", i) for i in range(len(args))] + [("k", k) for k in kwargs]
        for kind, key in slots:
            for new in variations(args[key] if kind == "a" else kwargs[key], rng)[:2]:
                a, kw = list(args), dict(kwargs)
                if kind == "a":
                    a[key] = new
                else:
                    kw[key] = new
                try:
                    out.append(dumps((tuple(a), kw), protocol=4))
                except Exception:
                    continue
    rng.shuffle(out)
    return out[:limit]
