"""A task whose deleted code the agent can read in another file of its tree is not written (``gold-in-tree``)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from crf_prime.featdel.copies import MIN_LINES, TreeLines, code_lines, deleted_lines, in_order
from crf_prime.featdel.generate import GenerateConfig, generate

BODY = """\
    parts = [p.strip() for p in text.split(sep) if p.strip()]
    counted = {p: parts.count(p) for p in parts}
    ordered = sorted(counted.items(), key=lambda kv: (-kv[1], kv[0]))
    return [name for name, _ in ordered[:limit]]
"""
"""A body of four lines long enough to tell a copy."""

PATCH = "--- a/lib/m.py\n+++ b/lib/m.py\n@@ -1,2 +1,5 @@\n" + "".join(f"+{line}\n" for line in BODY.splitlines())


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_the_deleted_lines_are_the_long_code_lines_the_patch_puts_back() -> None:
    assert deleted_lines(PATCH) == [line.strip() for line in BODY.splitlines()]
    assert code_lines(["    else:", "    # a comment that is long enough", "    return value.strip().lower()"]) == [
        "return value.strip().lower()"
    ]
    assert in_order(["a", "b", "c"], ["x", "a", "c", "b"]) == 2  # order counts: a, then c (b came before it)
    assert in_order(["a", "b"], []) == 0


def test_a_copy_in_another_file_is_found_and_siblings_skipped_hidden_tests_and_short_code_are_not(
    tmp_path: Path,
) -> None:
    copy = "def top(text, sep, limit):\n" + BODY
    tree = TreeLines(
        _tree(
            tmp_path,
            {
                "lib/m.py": "def top(text, sep, limit):\n    raise NotImplementedError\n" + "def other():\n" + BODY,
                "docs/recipe.md": f"Use this:\n\n```python\n{copy}```\n",
                "tests/test_m.py": copy,
            },
        )
    )
    (tmp_path / "data.bin").write_bytes(b"\xff\xfe" + BODY.encode())  # not UTF-8 text: not read
    assert "data.bin" not in TreeLines(tmp_path).files
    found = tree.copy_of(PATCH, skip=["lib/m.py", "tests/test_m.py"])
    assert found is not None and (found.path, found.found, found.lines) == ("docs/recipe.md", 4, 4)
    assert "4 of the 4 lines" in found.detail() and "docs/recipe.md" in found.detail()
    assert tree.copy_of(PATCH, skip=["lib/m.py", "tests/test_m.py", "docs/recipe.md"]) is None
    # found in the task's own module (a sibling with the same lines) only when it is not skipped: generation skips it
    assert TreeLines(tmp_path).copy_of(PATCH, skip=["docs/recipe.md", "tests/test_m.py"]) is not None
    short = "".join(PATCH.splitlines(keepends=True)[: 3 + MIN_LINES - 1])  # fewer lines than a copy needs
    assert tree.copy_of(short, skip=["lib/m.py", "tests/test_m.py"]) is None


def test_a_copy_with_other_quotes_and_blanks_is_still_a_copy(tmp_path: Path) -> None:
    body = (
        "    out = {'a': text.split(sep),   'b': limit}\n"
        "    picked = sorted(out['a'], key=len)[:limit]\n"
        "    return '-'.join(picked).strip()\n"
    )
    patch = "".join(f"+{line}\n" for line in body.splitlines())
    copy = body.replace("'", '"').replace("   ", " ")  # double quotes, one blank
    found = TreeLines(_tree(tmp_path, {"docs/copy.py": copy})).copy_of(patch, skip=[])
    assert found is not None and (found.found, found.lines) == (3, 3)


def test_three_of_four_lines_are_not_a_copy(tmp_path: Path) -> None:
    changed = BODY.replace("sorted(counted.items()", "sorted(list(counted.items())").replace("for p in", "for q in")
    tree = TreeLines(_tree(tmp_path, {"docs/near.py": changed}))
    assert tree.copy_of(PATCH, skip=[]) is None  # 2 of 4 lines (50 % < 80 %)


@pytest.mark.bwrap
@pytest.mark.slow
def test_generation_rejects_a_candidate_whose_code_the_agent_can_read_elsewhere(tmp_path: Path) -> None:
    module = (
        textwrap.dedent(
            '''\
        """Word counts."""


        def top(text, sep=" ", limit=2):
            """The ``limit`` most frequent parts of ``text``."""
        '''
        )
        + BODY
        + textwrap.dedent(
            '''\


        def spread(values, width=10):
            """``values`` scaled to ``width`` columns."""
            highest = max(values) if values else 0
            scaled = [round(v * width / highest) if highest else 0 for v in values]
            bars = ["#" * n + "." * (width - n) for n in scaled]
            return "\\n".join(bars)
        '''
        )
    )
    tests = textwrap.dedent(
        """\
        from wordy import spread, top


        def test_top():
            assert top("b a b c a b") == ["b", "a"]


        def test_spread():
            assert spread([1, 2], width=4) == "##..\\n####"
        """
    )
    reference = "def top(text, sep=' ', limit=2):\n" + BODY
    src = _tree(
        tmp_path / "wordy",
        {
            "pyproject.toml": '[project]\nname = "wordy"\nversion = "0.1"\n',
            "wordy/__init__.py": module,
            "tests/test_wordy.py": tests,
            "tools/reference.py": f'"""A frozen copy of the old implementation."""\n\n\n{reference}',
        },
    )
    tasks, summary = generate(GenerateConfig(source=str(src), out=tmp_path / "out", granularities=["function"]))
    assert [t.task_id for t in tasks] == ["wordy-local__wordy.spread"]
    [rejected] = summary.rejections
    assert (rejected.candidate, rejected.reason) == ("wordy-local__wordy.top", "gold-in-tree")
    assert "4 of the 4 lines of the deleted code are in tools/reference.py" in rejected.detail
    assert summary.rejected == {"gold-in-tree": 1}
