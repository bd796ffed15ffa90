"""Fresh replay inputs from the recorded calls: type-aware mutation and recombination (runs INSIDE the replay box).

Copied into the box next to ``replay_box.py`` and used by its ``derive`` mode on gold's tree, with only the standard
library (the box runs ``python -S``). The recorded calls are the seed corpus, as in EvalPlus (Liu et al., NeurIPS
2023: type-aware mutation of seed inputs plus differential testing against the reference). Each fresh call changes
one thing of one seed, bound to the target's parameters by name:

- a value: boundary and empty values, other container sizes, neighbours (``variations``);
- ``None`` <-> a value (one the same parameter had in another call, or its non-None default);
- default <-> given: an omitted parameter gets a value, a given one falls back to its default;
- recombination: the value another call passed for this parameter, or another parameter passed, of the same type;
- keyword <-> positional spelling of the same call;
- the receiver of a method: another recorded receiver of the same class (another state).

Candidates are grouped by (parameter, operator) and taken round-robin, so the rare operators that reach untested
branches (``None``, defaults) are not crowded out by the many value variations. Which inputs are kept is decided on
the host: gold must finish each one in time and give the same outcome twice (crf_prime/featdel/record.py).
"""

from __future__ import annotations

import inspect
import math
import pickle
import random
from collections.abc import Callable
from typing import NamedTuple

MAX_POOL = 12
"""Distinct values remembered per parameter (and per type) for recombination."""

FOLLOWUPS = 4
"""New follow-up inputs per generated call whose result is callable."""
PROBES = 2
"""Other seeds each changed value is also tried in (to tell an invalid value from a branch; see ``_probes``)."""

_P = inspect.Parameter


def variations(value, rng: random.Random) -> list:
    """Type-preserving variations of one argument: boundary, empty, neighbours, other sizes (same exact type)."""
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
            if len(value) > 2:
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
    return [v for v in out if type(v) is t]


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
    return type(value) in (type(None), bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset)


class _Pools:
    """Values seen per (target, parameter) and per exact type, across every recorded call."""

    def __init__(self) -> None:
        self.by_param: dict[tuple[int, str], dict[str, object]] = {}
        self.by_type: dict[type, dict[str, object]] = {}
        self.receivers: dict[type, dict[int, object]] = {}

    def add(self, target: int, name: str, value) -> None:
        for pool in (self.by_param.setdefault((target, name), {}), self.by_type.setdefault(type(value), {})):
            if len(pool) < MAX_POOL and _plain(value):
                pool.setdefault(_key(value), value)

    def add_receiver(self, value) -> None:
        pool = self.receivers.setdefault(type(value), {})
        if len(pool) < MAX_POOL:
            pool.setdefault(id(value), value)


def _candidates(
    target: int, sig: inspect.Signature, bound: dict, method: bool, pools: _Pools, rng: random.Random
) -> list[tuple[str, dict, bool]]:
    """(group, arguments, by-keyword) for every one-step change of one seed call."""
    names = list(sig.parameters)
    out: list[tuple[str, dict, bool]] = []
    receiver = names[0] if method and names else None

    def put(group: str, name: str, value) -> None:
        changed = dict(bound)
        changed[name] = value
        out.append((group, changed, False))

    for name, p in sig.parameters.items():
        if name == receiver:
            if name in bound:
                for other in pools.receivers.get(type(bound[name]), {}).values():
                    if other is not bound[name]:
                        put(f"{name}:receiver", name, other)
            continue
        if p.kind in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD):
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
        put(f"{name}:none", name, None)
        for v in variations(value, rng):
            put(f"{name}:vary", name, v)
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
        if ":" not in group or name not in arguments or not _plain(arguments[name]):
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
    keys: dict[str, str]
    """Parameter -> identity of a plain value passed to it (for the host's leniency on validation order)."""
    seed_keys: dict[str, str]
    """The same for the seed call."""


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
    groups: dict[int, dict[str, list[tuple[int, str, dict, bool]]]] = {}
    for i, (target, _args, _kwargs, method) in enumerate(seeds):
        sig, b = sigs.get(target), bound[i]
        if sig is None or not b:
            continue
        for group, arguments, keywords in _candidates(target, sig, b, method, pools, rng):
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
            varied = group.split(":", 1)[0] if ":" in group else ""
            out.append(Fresh(i, target, args, kwargs, seeds[i][3], varied, keys_of(arguments), keys_of(bound[i])))
    return out


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
