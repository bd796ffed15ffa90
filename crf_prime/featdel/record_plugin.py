"""pytest plugin loaded only in the Feature Deletion generator's recording run (never at grading).

Copied into the recording box next to ``replay_box.py`` and cloudpickle and loaded with ``-p crf_featdel_record``.
It watches calls with ``sys.setprofile`` instead of wrapping the targets, so the tests see the very objects they
always see (decorators, ``isinstance`` checks and identities are untouched). For each call of a target function
made while a test runs it pickles, at the moment of the call, the arguments as the function received them (the
receiver first for methods); for a callable result it also pickles the inputs the test later calls it with
(follow-ups); for a plain return value it keeps its canonical tree to check the out-of-process replay against.
Test modules are pickled by value (the replay box has no tests). What cannot be pickled is counted, not kept.
"""

from __future__ import annotations

import dis
import hashlib
import inspect
import json
import os
import pickle
import sys
import types

import cloudpickle
import pytest
from replay_box import Opaque, canonical, dumps, resolve

_HERE = os.path.dirname(os.path.abspath(__file__))


def _bound(code: types.CodeType, f_locals: dict, skip_first: bool) -> tuple[tuple, dict]:
    """The (args, kwargs) a frame was called with, rebuilt from its locals at the 'call' event."""
    n, k, names = code.co_argcount, code.co_kwonlyargcount, code.co_varnames
    pos = [f_locals[name] for name in names[:n]]
    kw = {name: f_locals[name] for name in names[n : n + k] if name in f_locals}
    i = n + k
    if code.co_flags & inspect.CO_VARARGS:
        pos += list(f_locals[names[i]])
        i += 1
    if code.co_flags & inspect.CO_VARKEYWORDS:
        kw.update(f_locals[names[i]])
    return tuple(pos[1:] if skip_first else pos), kw


def _first_resume(code: types.CodeType) -> int:
    """Offset of the first RESUME: a generator's frame starts there, later resumptions are elsewhere."""
    return next((ins.offset for ins in dis.get_instructions(code) if ins.opname == "RESUME"), 0)


class Recorder:
    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.codes: dict[types.CodeType, int] = {}
        self.starts: dict[types.CodeType, int] = {}
        self.methods: dict[int, bool] = {}
        self.calls: list[dict] = []
        self.seen: dict[str, int] = {}
        self.per_target: dict[int, int] = {}
        self.open: dict[int, int] = {}
        self.watch: dict[types.CodeType, list[tuple[object, int, bool]]] = {}
        self.unpicklable: dict[int, int] = {}
        self.too_large: dict[int, int] = {}
        self.unresolved: list[str] = []
        self.busy = False
        self.by_value: set[str] = set()
        self.test = ""
        self.patched = False

    def resolve_targets(self) -> None:
        for i, t in enumerate(self.cfg["targets"]):
            try:
                fn = resolve(t["module"], t["qualname"])
            except Exception as e:
                self.unresolved.append(f"{t['module']}.{t['qualname']}: {type(e).__name__}: {e}")
                continue
            self.codes[fn.__code__] = i
            self.starts[fn.__code__] = _first_resume(fn.__code__)
            self.methods[i] = _is_method(t["module"], t["qualname"])

    def register_tests_by_value(self) -> None:
        """Pickle functions and classes of test modules by value: the replay box cannot import them."""
        root, sources = self.cfg["root"], set(self.cfg["source_files"])
        for name, mod in list(sys.modules.items()):
            path = getattr(mod, "__file__", None)
            if name in self.by_value or not path or not os.path.abspath(path).startswith(root + os.sep):
                continue
            if os.path.relpath(os.path.abspath(path), root) in sources:
                continue
            try:
                cloudpickle.register_pickle_by_value(mod)
            except ValueError:
                continue
            self.by_value.add(name)

    def profile(self, frame, event, arg) -> None:
        if self.busy:
            return
        code = frame.f_code
        if event == "call":
            target = self.codes.get(code)
            watchers = self.watch.get(code)
            if target is None and not watchers:
                return
            self.busy = True
            try:
                if target is not None and frame.f_lasti == self.starts[code]:
                    self._record(target, code, frame)
                if watchers:
                    self._follow(code, frame, watchers)
            finally:
                self.busy = False
        elif event == "return" and id(frame) in self.open and code in self.codes:
            idx = self.open.pop(id(frame))
            if code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
                return
            self.busy = True
            try:
                self._returned(idx, arg)
            finally:
                self.busy = False

    def _record(self, target: int, code: types.CodeType, frame) -> None:
        caps = self.cfg.get("max_calls_by_target") or {}
        if self.per_target.get(target, 0) >= caps.get(str(target), self.cfg["max_calls"]):
            return
        method = self.methods[target]
        try:
            args, kwargs = _bound(code, frame.f_locals, False)
            data = dumps((args, kwargs, method))
        except Exception:
            self.unpicklable[target] = self.unpicklable.get(target, 0) + 1
            return
        if len(data) > self.cfg["max_bytes"]:
            self.too_large[target] = self.too_large.get(target, 0) + 1
            return
        digest = hashlib.sha256(data).hexdigest()
        if self.cfg.get("dedup_by_target", True):
            digest = f"{target}:{digest}"  # two targets called with the same arguments both keep the call
        if digest in self.seen:  # the same input again: remember which tests made it too
            seen = self.calls[self.seen[digest]]
            if self.test not in seen["tests"]:
                seen["tests"].append(self.test)
            seen["patched"] = seen["patched"] or self.patched
            return
        self.seen[digest] = len(self.calls)
        self.per_target[target] = self.per_target.get(target, 0) + 1
        self.open[id(frame)] = len(self.calls)
        self.calls.append(
            {
                "id": f"c{len(self.calls)}",
                "target": target,
                "payload": data,
                "followups": [],
                "test": self.test,
                "tests": [self.test],
                "patched": self.patched,
            }
        )

    def _returned(self, idx: int, value) -> None:
        call = self.calls[idx]
        if callable(value) and not isinstance(value, type):
            if isinstance(value, types.FunctionType):
                self.watch.setdefault(value.__code__, []).append((None, idx, False))
            elif isinstance(value, types.MethodType) and isinstance(value.__func__, types.FunctionType):
                self.watch.setdefault(value.__func__.__code__, []).append((value.__self__, idx, True))
            else:
                dunder = getattr(type(value), "__call__", None)  # noqa: B004 - the class attribute, not callable()
                if isinstance(dunder, types.FunctionType):
                    self.watch.setdefault(dunder.__code__, []).append((value, idx, True))
            return
        if value is None:  # also what a profiler sees when the call raised: unknown
            return
        try:
            call["in_test"] = canonical(value, consume=False)
        except Opaque:
            pass
        except Exception:
            call["in_test_error"] = True

    def _follow(self, code: types.CodeType, frame, watchers: list[tuple[object, int, bool]]) -> None:
        first = code.co_varnames[0] if code.co_argcount else None
        for owner, idx, skip_self in watchers:
            call = self.calls[idx]
            if len(call["followups"]) >= self.cfg["max_followups"]:
                continue
            if owner is not None and (first is None or frame.f_locals.get(first) is not owner):
                continue
            try:
                call["followups"].append(dumps(_bound(code, frame.f_locals, skip_self)))
            except Exception:
                continue

    def start(self, nodeid: str, patched: bool) -> None:
        self.test = nodeid
        self.patched = patched
        self.register_tests_by_value()
        self.open.clear()
        sys.setprofile(self.profile)

    def stop(self) -> None:
        sys.setprofile(None)
        self.watch.clear()
        self.open.clear()

    def dump(self) -> None:
        out = self.cfg["out"]
        report = {
            "calls": self.calls,
            "unpicklable": sum(self.unpicklable.values()),
            "too_large": sum(self.too_large.values()),
            "unpicklable_by_target": self.unpicklable,
            "too_large_by_target": self.too_large,
            "unresolved": self.unresolved,
        }
        with open(out + ".tmp", "wb") as fh:
            pickle.dump(report, fh, protocol=4)
        os.replace(out + ".tmp", out)


def _is_method(module: str, qualname: str) -> bool:
    """A function defined in a class and called with a receiver (not a staticmethod)."""
    if "." not in qualname:
        return False
    obj = sys.modules.get(module)
    for part in qualname.split(".")[:-1]:
        obj = getattr(obj, "__dict__", {}).get(part)
    entry = getattr(obj, "__dict__", {}).get(qualname.rsplit(".", 1)[-1])
    return not isinstance(entry, staticmethod)


PATCH_FIXTURES = frozenset({"monkeypatch", "mocker", "module_mocker", "class_mocker", "session_mocker"})
PATCH_NAMES = frozenset({"patch", "monkeypatch", "mocker", "mock", "setattr", "setitem", "setenv", "delattr"})


def _names(code: types.CodeType) -> set[str]:
    """Names a test's code (nested functions included) loads or calls."""
    out = set(code.co_names) | set(code.co_varnames)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out |= _names(const)
    return out


def _patches(item) -> bool:
    """The test may patch what the code under test sees (monkeypatch/mocker fixtures, ``mock.patch`` as decorator or
    context manager, ``setattr`` on a module): its calls cannot be replayed outside it."""
    if PATCH_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    fn = getattr(item, "function", None)
    if fn is None:
        return False
    if getattr(fn, "patchings", None):
        return True
    code = getattr(fn, "__code__", None)
    return code is not None and bool(PATCH_NAMES & _names(code))


_recorder: Recorder | None = None


def pytest_configure(config) -> None:
    global _recorder
    with open(os.path.join(_HERE, "record.json")) as fh:
        _recorder = Recorder(json.load(fh))


def pytest_collection_finish(session) -> None:
    if _recorder is not None:
        _recorder.resolve_targets()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if _recorder is None:
        yield
        return
    _recorder.start(item.nodeid, _patches(item))
    try:
        yield
    finally:
        _recorder.stop()


def pytest_unconfigure(config) -> None:
    if _recorder is not None:
        _recorder.dump()
