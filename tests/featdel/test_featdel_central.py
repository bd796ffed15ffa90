"""The order candidates are validated in: central candidates (covered by more than ``max_target_tests`` tests or a
quarter of the suite) after all the others instead of being left out, private functions after the public ones. A
small library whose every test calls its one function (termcolor's ``colored``, xmltodict's ``parse``), or whose logic
is in private functions (u-msgpack-python), gave no task before."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
from corpus_support import write
from featdel_support import agent_tree, set_body

from crf_prime.cli import main
from crf_prime.featdel.generate import GenerateConfig, central_limit, load_tasks, validation_order
from crf_prime.featdel.grader import grade_tree
from crf_prime.featdel.granularity import Candidate
from crf_prime.featdel.models import Granularity

pytestmark = pytest.mark.bwrap

LIB = '''\
def render(text, width=10, fill="."):
    """``text`` centred in ``width`` columns of ``fill``."""
    pad = max(0, width - len(text))
    left = pad // 2
    return fill * left + text + fill * (pad - left)
'''
TESTS = "from onefn import render\n\n\n" + "".join(
    f"def test_render_{i}():\n    assert render({t!r}, {w}) == {want!r}\n\n\n"
    for i, (t, w, want) in enumerate(
        [("a", 3, ".a."), ("ab", 4, ".ab."), ("abc", 2, "abc"), ("", 2, ".."), ("x", 4, ".x.."), ("hi", 5, ".hi..")]
    )
)


def _generate(tmp_path: Path, name: str, lib: str, tests: str) -> Path:
    """``featdel generate`` on a one-package project ``name``; the task directory."""
    src = write(
        tmp_path / name,
        {
            "pyproject.toml": f'[project]\nname = "{name}"\nversion = "0.1"\n',
            f"{name}/__init__.py": lib,
            f"tests/test_{name}.py": tests,
        },
    )
    out = tmp_path / "out"
    assert main(["featdel", "generate", "--source", str(src), "--out", str(out), "--workers", "1"]) == 0
    return out


def _cand(key: str, tests: int, public: bool = True, granularity: Granularity = "function") -> Candidate:
    fn = SimpleNamespace(public=public)
    return Candidate(key, granularity, (fn,), tuple(f"t{i}" for i in range(tests)))  # type: ignore[arg-type]


def test_central_candidates_come_after_the_others_in_the_seeded_order() -> None:
    cfg = GenerateConfig(seed=3)
    assert central_limit(cfg, 1000) == 40 and central_limit(cfg, 100) == 25 and central_limit(cfg, 6) == 5
    cands = [_cand(f"c{i}", n) for i, n in enumerate([1, 41, 3, 40, 99, 2, 7, 60])]
    got = validation_order(cands, cfg, 1000)
    rng = random.Random(3)  # one generator: the others shuffled first, then the central ones (over 40 tests)
    others, central = [c for c in cands if len(c.tests) <= 40], [c for c in cands if len(c.tests) > 40]
    rng.shuffle(others)
    rng.shuffle(central)
    assert got == others + central
    assert {c.key for c in got[5:]} == {"c1", "c4", "c7"}
    assert validation_order(cands, cfg, 1000) == got  # deterministic for a seed


def test_a_library_whose_every_test_calls_its_one_function_gives_a_task(tmp_path: Path) -> None:
    out = _generate(tmp_path, "onefn", LIB, TESTS)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["suite_tests"] == 6 and summary["filtered"] == {}  # 6 tests > 5: central, not left out
    tasks = load_tasks(out)
    assert tasks and {t.granularity for t in tasks} >= {"function"}
    assert all(len(t.target_tests) == 6 for t in tasks if t.granularity == "function")


def test_private_functions_come_after_the_public_ones_and_before_the_central_ones() -> None:
    cfg = GenerateConfig(seed=1)
    cands = [_cand("pub", 3), _cand("_priv", 3, public=False), _cand("central", 50), _cand("_pc", 50, public=False)]
    for seed in range(5):
        got = validation_order(cands, cfg.model_copy(update={"seed": seed}), 1000)
        assert [c.key for c in got] == ["pub", "_priv", "central", "_pc"]


def test_a_private_functions_blocks_and_tails_are_validated_with_the_private_functions() -> None:
    cands = [
        _cand("pub_block", 3, granularity="block"),
        _cand("_priv_block", 3, public=False, granularity="block"),
        _cand("_priv_tail", 3, public=False, granularity="tail"),
        _cand("class", 3, public=False, granularity="class"),  # a public class's, whatever its first method is
        _cand("central", 50),
    ]
    for seed in range(5):
        got = validation_order(cands, GenerateConfig(seed=seed), 1000)
        assert {c.key for c in got[:2]} == {"pub_block", "class"}
        assert {c.key for c in got[2:4]} == {"_priv_block", "_priv_tail"} and got[4].key == "central"


PACK = """\
def pack(x):
    return _pack(x)


def _pack(x):
    if isinstance(x, int):
        out = b"i" + str(x).encode()
    else:
        out = b"s" + x.encode()
    return out
"""
PACK_TESTS = """\
from packlib import pack


def test_int():
    assert pack(12) == b"i12"


def test_str():
    assert pack("ab") == b"sab"
"""


def test_a_private_function_holding_the_logic_gives_a_function_task(tmp_path: Path) -> None:
    """u-msgpack-python's one public function dispatches to private ones: the private one is a candidate too."""
    out = _generate(tmp_path, "packlib", PACK, PACK_TESTS)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["functions"] == 1 and summary["filtered"] == {"trivial-body": 1}  # pack: one statement
    got = {(t.granularity, tuple(x.qualname for x in t.targets)) for t in load_tasks(out)}
    assert ("function", ("_pack",)) in got


def test_a_private_task_answered_in_its_public_caller_scores_0(tmp_path: Path) -> None:
    """The attack on a private-function task: leave ``_pack`` deleted and put the logic in ``pack``, the function
    every test calls. The tests pass; the replay calls ``_pack`` itself (its recorded calls) and it still raises: 0.
    Honest re-implementations of ``_pack`` score 1.0."""
    out = _generate(tmp_path, "packlib", PACK, PACK_TESTS)
    task = next(t for t in load_tasks(out) if t.granularity == "function" and t.targets[0].qualname == "_pack")
    assert task.replay is not None and task.replay.recorded >= 2

    caller = agent_tree(task, out, tmp_path / "caller")
    init = caller / "packlib" / "__init__.py"
    inlined = "    if isinstance(x, int):\n        return b'i' + str(x).encode()\n    return b's' + x.encode()\n"
    init.write_text(init.read_text().replace("    return _pack(x)\n", inlined, 1))
    got = grade_tree(task, out, caller)
    assert got.passed_fraction == 1.0 and got.score == 0.0 and got.replay_mismatches > 0

    for name, body in {
        "table": "kind = {int: b'i', str: b's'}[type(x)]\nreturn kind + str(x).encode()",
        "bytes": "if type(x) is int:\n    return bytes('i%d' % x, 'ascii')\nreturn ('s' + x).encode()",
    }.items():
        honest = agent_tree(task, out, tmp_path / name)
        set_body(honest, task, body)
        assert grade_tree(task, out, honest).score == 1.0, name
