"""Central candidates (covered by more than ``max_target_tests`` tests or a quarter of the suite) are validated after
all the others instead of being left out: a small library whose every test calls its one function (termcolor's
``colored``, xmltodict's ``parse``) gave no task before."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from corpus_support import write

from crf_prime.cli import main
from crf_prime.featdel.generate import GenerateConfig, central_limit, load_tasks, validation_order
from crf_prime.featdel.granularity import Candidate

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


def _cand(key: str, tests: int) -> Candidate:
    return Candidate(key, "function", (), tuple(f"t{i}" for i in range(tests)))


def test_central_candidates_come_after_the_others_in_the_seeded_order() -> None:
    cfg = GenerateConfig(seed=3)
    assert central_limit(cfg, 1000) == 40 and central_limit(cfg, 100) == 25 and central_limit(cfg, 6) == 5
    cands = [_cand(f"c{i}", n) for i, n in enumerate([1, 41, 3, 40, 99, 2, 7, 60])]
    got = validation_order(cands, cfg, 1000)
    shuffled = list(cands)
    random.Random(3).shuffle(shuffled)  # the seeded order, then the central ones (over 40 tests) moved last
    assert got == [c for c in shuffled if len(c.tests) <= 40] + [c for c in shuffled if len(c.tests) > 40]
    assert {c.key for c in got[5:]} == {"c1", "c4", "c7"}
    assert validation_order(cands, cfg, 1000) == got  # deterministic for a seed


def test_a_library_whose_every_test_calls_its_one_function_gives_a_task(tmp_path: Path) -> None:
    src = write(
        tmp_path / "onefn",
        {
            "pyproject.toml": '[project]\nname = "onefn"\nversion = "0.1"\n',
            "onefn/__init__.py": LIB,
            "tests/test_onefn.py": TESTS,
        },
    )
    out = tmp_path / "out"
    assert main(["featdel", "generate", "--source", str(src), "--out", str(out), "--workers", "1"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["suite_tests"] == 6 and summary["filtered"] == {}  # 6 tests > 5: central, not left out
    tasks = load_tasks(out)
    assert tasks and {t.granularity for t in tasks} >= {"function"}
    assert all(len(t.target_tests) == 6 for t in tasks if t.granularity == "function")
