"""Feature Deletion replay driver: runs INSIDE the replay box, with only the standard library and cloudpickle.

Copied into the box next to cloudpickle and run as ``python -S -E -s replay_box.py CONFIG.json``; it never imports
crf_prime, pytest or any test file. For every call input (pickled at generation from the gold run of the target tests,
or derived from one) it forks a child, calls the target's underlying function with the recorded arguments (the
receiver first, for methods), and writes the canonical outcome: return value or exception type, the arguments (and
so the receiver) after the call, and, when the result is callable, the outcomes of calling it on the recorded
follow-up inputs. Expected outcomes are never here: they are compared on the host (crf_prime/featdel/replay.py).

The same module serves the generator's recorder (``canonical`` on in-test return values) and ``derive`` mode (new
type-preserving variations of recorded arguments, pickled back for gold and agent alike).
"""

from __future__ import annotations

import importlib
import json
import math
import os
import pickle
import random
import select
import signal
import sys
import time
import types

MAX_NODES = 5000
"""Canonical trees are cut (with a marker) beyond this many nodes; both sides are cut the same way."""
MAX_ITEMS = 200
"""Items taken from a returned iterator (an infinite one is fine)."""
MAX_DEPTH = 40

_PRIMITIVES = (type(None), bool, int, str, bytes)


class Opaque(Exception):
    """Raised by ``canonical(..., consume=False)`` for a value it may not look into (an iterator or a callable)."""


def _qual(t: type) -> str:
    return f"{t.__module__}.{t.__qualname__}"


def canonical(value, *, consume: bool = True):
    """JSON-able, type-strict tree of ``value``: ``[type, payload]``; never calls the value's ``__eq__``/``__hash__``.

    Exact builtin types keep their values (floats as ``repr``), containers recurse (sets and dict items sorted by
    their canonical text, so hash order does not matter), iterators are consumed up to ``MAX_ITEMS`` (their type is
    not compared: a generator and ``map`` yielding the same items agree), other objects are their type plus the
    state in ``__dict__`` and ``__slots__``. With ``consume=False`` iterators and callables raise :class:`Opaque`.
    """
    budget = [MAX_NODES]
    return _canon(value, budget, (), consume)


def _canon(v, budget: list[int], stack: tuple[int, ...], consume: bool):
    budget[0] -= 1
    if budget[0] < 0:
        return ["cut", None]
    t = type(v)
    if t in _PRIMITIVES:
        return [t.__name__, v if t is not bytes else v.hex()]
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
        return _canon(x, budget, inner, consume)

    if t in (list, tuple):
        return [t.__name__, [rec(x) for x in v]]
    if t in (set, frozenset):
        return [t.__name__, sorted((rec(x) for x in v), key=_text)]
    if t is dict:
        return ["dict", sorted(([rec(k), rec(x)] for k, x in v.items()), key=_text)]
    if isinstance(v, type):
        return ["type", _qual(v)]
    if t is types.ModuleType:
        return ["module", v.__name__]
    if t in (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.BuiltinMethodType):
        if not consume:
            raise Opaque("callable")
        return ["function", getattr(v, "__qualname__", "?")]
    if _is_iterator(t):
        if not consume:
            raise Opaque("iterator")
        items, error = [], None
        try:
            for _ in range(MAX_ITEMS):
                items.append(rec(next(v)))
        except StopIteration:
            pass
        except Exception as e:
            error = _qual(type(e))
        return ["iterator", [items, error]]
    return ["object", [_qual(t), _state(v, rec)]]


def _is_iterator(t: type) -> bool:
    return hasattr(t, "__next__") and hasattr(t, "__iter__")


_BASES = (str, bytes, bool, int, float, complex, tuple, list, dict, set, frozenset)


def _base_view(v):
    """The builtin content of an instance of a builtin's subclass, read with the builtin's own (C) methods."""
    for base in _BASES:
        if isinstance(v, base):
            break
    else:
        return None
    if base is str:
        return str.__str__(v)
    if base is bytes:
        return bytes(memoryview(v))
    if base in (bool, int):
        return int.__index__(v)
    if base is float:
        return float.__float__(v)
    if base is complex:
        return complex.__complex__(v)
    if base is dict:
        return dict(
            dict.items(v)
        )  # an exact dict: compared like one (order-free); OrderedDict order is in its reduction
    return base(base.__iter__(v))  # tuple/list/set/frozenset: the builtin's iterator, not an override


def _stdlib(t: type) -> bool:
    module = t.__module__.split(".")[0]
    return module in sys.stdlib_module_names or module == "builtins"


def _state(v, rec):
    """An object's own state, read without calling its methods: ``__dict__``, ``__slots__``, the builtin content of
    a builtin's subclass, and for standard-library types their reduction (OrderedDict order, defaultdict factory)."""
    state = []
    try:
        d = object.__getattribute__(v, "__dict__")
    except AttributeError:
        d = None
    if type(d) is dict:
        state.append(["dict", sorted(([k, rec(x)] for k, x in d.items()), key=_text)])
    slots = [
        s for c in type(v).__mro__ for s in c.__dict__.get("__slots__", ()) if s not in ("__dict__", "__weakref__")
    ]
    for name in sorted(set(slots) if not isinstance(slots, str) else {slots}):
        try:
            state.append(["slot", name, rec(object.__getattribute__(v, name))])
        except AttributeError:
            state.append(["slot", name, None])
    base = _base_view(v)
    if base is not None:
        state.append(["base", rec(base)])
    if _stdlib(type(v)) or not state:
        try:
            reduced = v.__reduce_ex__(4) if _stdlib(type(v)) else object.__reduce_ex__(v, 4)
            state.append(["reduce", rec(tuple(reduced[1:]) if isinstance(reduced, tuple) else reduced)])
        except Exception as e:
            state.append(["unreducible", _qual(type(e))])
    return state


def _text(tree) -> str:
    return json.dumps(tree, sort_keys=True, separators=(",", ":"))


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


# -- deriving fresh calls ------------------------------------------------------------------------------------------


def variations(value, rng: random.Random) -> list:
    """Type-preserving variations of one argument (same exact type; empty for types we do not vary)."""
    t = type(value)
    out: list = []
    if t is int:
        out = [value + 1, value - 1, value * 2 + rng.randint(1, 3)]
    elif t is float and math.isfinite(value):
        out = [value + 0.5, -value, value * 2]
    elif t is str:
        out = [value[:-1], value + value[:1], value[::-1]] if value else ["a", "ab"]
    elif t is bytes:
        out = [value[:-1], value[::-1]] if value else [b"a"]
    elif t in (list, tuple):
        if value:
            out = [t(value[::-1]), t(value[:-1]), t(value[1:])]
            if len(value) > 2:
                items = list(value)
                rng.shuffle(items)
                out.append(t(items))
    elif t is dict and value:
        keys = list(value)
        out = [{k: v for k, v in value.items() if k != keys[-1]}, {k: value[k] for k in reversed(keys)}]
        if len(keys) > 1:
            out.append({k: v for k, v in value.items() if k != keys[0]})
    elif t in (set, frozenset) and value:
        ordered = sorted(value, key=lambda x: _text(canonical(x)))
        out = [t(ordered[1:]), t(ordered[:-1])]
    return [v for v in out if type(v) is t]


def derive(payload: tuple, rng: random.Random, per_call: int) -> list[tuple]:
    """Up to ``per_call`` fresh (args, kwargs) pairs, each varying one argument of a recorded call (not the receiver)."""
    args, kwargs, method = payload
    slots = [("a", i) for i in range(1 if method else 0, len(args))] + [("k", k) for k in kwargs]
    candidates = []
    for kind, key in slots:
        for new in variations(args[key] if kind == "a" else kwargs[key], rng):
            a, kw = list(args), dict(kwargs)
            if kind == "a":
                a[key] = new
            else:
                kw[key] = new
            candidates.append((tuple(a), kw, method))
    rng.shuffle(candidates)
    return candidates[:per_call]


# -- running one call ---------------------------------------------------------------------------------------------


def outcome(fn, payload_bytes: bytes, followups: list[bytes], loads) -> dict:
    """Call ``fn`` on one pickled input and return its canonical outcome (in the forked child)."""
    try:
        args, kwargs, _method = loads(payload_bytes)
    except Exception as e:
        return {"load_error": _qual(type(e))}
    result: dict = {}
    try:
        value = fn(*args, **kwargs)
    except BaseException as e:  # SystemExit/KeyboardInterrupt from the code under test are outcomes too
        result["raised"] = _qual(type(e))
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
        return {"load_error": _qual(type(e))}
    try:
        value = fn(*args, **kwargs)
    except BaseException as e:
        return {"raised": _qual(type(e))}
    return {"returned": _safe(value)}


def _safe(value):
    try:
        return canonical(value)
    except BaseException as e:  # a value whose inspection fails is an outcome, not a crash
        return ["uninspectable", _qual(type(e))]


def _run_child(fn, call: dict, loads, write_fd: int) -> None:
    try:
        data = json.dumps(outcome(fn, call["payload"], call.get("followups", []), loads), sort_keys=True)
    except BaseException as e:
        data = json.dumps({"driver_error": _qual(type(e))})
    view = memoryview(data.encode())
    while view:
        view = view[os.write(write_fd, view) :]


def run_one(fn, call: dict, loads, timeout_s: float) -> dict:
    """Fork, run one call in the child, read its JSON back; timeout / crash / early exit are outcomes."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        try:
            random.seed()
            _run_child(fn, call, loads, w)
        finally:
            os._exit(0)
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
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if timed_out:
        return {"timeout": timeout_s}
    if os.WIFSIGNALED(status):
        return {"crashed": f"signal {os.WTERMSIG(status)}"}
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        return {"no_result": f"exit {os.waitstatus_to_exitcode(status)}"}


def main(config_path: str) -> int:
    with open(config_path) as fh:
        cfg = json.load(fh)
    for p in reversed(cfg["paths"]):
        sys.path.insert(0, p)
    import cloudpickle  # noqa: F401 - registers nothing; plain pickle.loads reads its output

    with open(cfg["calls"], "rb") as fh:
        calls = pickle.load(fh)
    loads = pickle.loads
    targets = cfg["targets"]
    out_path = cfg["out"]
    if cfg["mode"] == "derive":
        return _derive_main(cfg, calls, out_path)
    fns: dict[int, object] = {}
    results: dict[str, dict] = {}
    order = list(range(len(calls)))
    random.Random(cfg.get("seed", 0)).shuffle(order)
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
            results[call["id"]] = {"unresolvable": _qual(type(fn))}
            continue
        results[call["id"]] = got = run_one(fn, call, loads, cfg["timeout_s"])
        if "timeout" in got and cfg.get("stop_on_timeout", True):
            break  # gold finished every kept call in time: the attempt has failed, stop spending time
    tmp = out_path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(results, fh, sort_keys=True)
    os.replace(tmp, out_path)
    return 0


def _derive_main(cfg: dict, calls: list[dict], out_path: str) -> int:
    import cloudpickle

    rng = random.Random(cfg.get("seed", 0))
    fresh = []
    for call in calls:
        try:
            payload = pickle.loads(call["payload"])
        except Exception:
            continue
        for j, (args, kwargs, method) in enumerate(derive(payload, rng, cfg["per_call"])):
            try:
                data = cloudpickle.dumps((args, kwargs, method), protocol=4)
            except Exception:
                continue
            fresh.append({**call, "id": f"{call['id']}~{j}", "payload": data, "derived": True})
    with open(out_path, "wb") as fh:
        pickle.dump(fresh, fh, protocol=4)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
