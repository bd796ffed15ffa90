"""The collection check of a candidate's snapshot is skipped only when it cannot fail: no deleted line ran outside a
test in the coverage baseline and no target is a generator or coroutine function (crf_prime/featdel/generate.py,
``collection_untouched``)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import featdel_support  # noqa: F401  (one temporary cache per session)
import pytest
from corpus_support import write

from crf_prime.featdel import generate as gen
from crf_prime.featdel.generate import GenerateConfig, generate

LIB = textwrap.dedent(
    '''\
    """Helpers whose deletion breaks collection, or does not."""


    def table():
        """Rows the tests build their parameters from at import."""
        rows = [(1, 2), (2, 4)]
        return rows


    def pairs():
        """Pairs, lazily: the tests make the generator at import and iterate it in a test."""
        yield (1, 2)
        yield (3, 4)


    def double(x):
        """Twice ``x``."""
        out = x * 2
        return out


    def halve(x):
        """Half of ``x``."""
        out = x / 2
        return out
    '''
)
TESTS = textwrap.dedent(
    """\
    import pytest

    from collib import double, halve, pairs, table

    LAZY = pairs()


    @pytest.mark.parametrize(("x", "y"), table())
    def test_double(x, y):
        assert double(x) == y


    def test_table():
        assert table()[0] == (1, 2)


    def test_pairs():
        assert list(LAZY) == [(1, 2), (3, 4)]


    def test_halve():
        assert halve(4) == 2
    """
)


def test_only_snapshots_that_may_not_collect_are_collected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = write(
        tmp_path / "collib",
        {
            "pyproject.toml": '[project]\nname = "collib"\nversion = "0.1"\n',
            "collib/__init__.py": LIB,
            "tests/test_collib.py": TESTS,
        },
    )
    collected: list[str] = []
    real = gen.run_pytest
    monkeypatch.setattr(
        gen,
        "run_pytest",
        lambda *a, **k: collected.append(k["pytest_args"]) or real(*a, **k) if k.get("collect_only") else real(*a, **k),
    )
    cfg = GenerateConfig(
        source=str(src),
        out=tmp_path / "out",
        unsandboxed=True,
        max_tasks=10,
        workers=1,
        replay=False,
        mutants_per_task=0,
        granularities=["function"],
    )
    tasks, summary = generate(cfg)
    assert sorted(t.targets[0].qualname for t in tasks) == ["double", "halve"]
    broke = sorted(r.candidate.rsplit(".", 1)[1] for r in summary.rejections if r.reason == "collection-breaks")
    assert broke == ["pairs", "table"]  # table runs at import; pairs is a generator made at import
    assert len(collected) == 2  # double and halve ran at no import: their snapshots were not collected
