"""pytest's rewritten test modules, made once per base and copied into each grading tree
(crf_prime/featdel/pycache.py): pytest reads them, and only where they match the source beside them."""

from __future__ import annotations

import marshal
from pathlib import Path

import pytest
from corpus_support import write
from test_featdel_hacks_testfiles import reg_tasks

from crf_prime.featdel import pycache
from crf_prime.featdel.grader import Grader

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


def test_grading_reads_the_rewritten_modules_only_where_they_match(tmp_path: Path) -> None:
    out = tmp_path / "out"
    grader = Grader(reg_tasks(tmp_path, out, max_tasks=1)[0], out)
    assert grader.score_run(grader.run_tests({}), {}).score == 0.0
    entry = pycache.cache_dir() / pycache.entry_key(grader.task, grader.env)
    (pyc,) = (entry / "tests" / "__pycache__").glob("test_reg.*-pytest-*.pyc")
    made = pyc.read_bytes()

    # a file whose recorded source hash matches is used as it is: here one whose tests never fail
    forged = compile("def test_register_and_lookup():\n    pass\n\n\ndef test_duplicate():\n    pass\n", "x", "exec")
    pyc.write_bytes(made[:16] + marshal.dumps(forged))
    assert grader.score_run(grader.run_tests({}), {}).score == 1.0

    # the same file recorded for another source is rewritten from the real one: the verdict is the source's
    pyc.write_bytes(made[:8] + bytes(8) + marshal.dumps(forged))
    assert grader.score_run(grader.run_tests({}), {}).score == 0.0
    pyc.write_bytes(made)
    assert grader.score_run(grader.run_tests({}), {}).score == 0.0


def test_install_copies_only_the_protected_modules_files(tmp_path: Path) -> None:
    from crf_prime.featdel.models import FeatdelTask

    entry = write(
        tmp_path / "entry",
        {
            "tests/__pycache__/test_a.cpython-312-pytest-9.2.0.pyc": "a",
            "tests/__pycache__/helper.cpython-312-pytest-9.2.0.pyc": "h",
            "pkg/__pycache__/mod.cpython-312-pytest-9.2.0.pyc": "m",
        },
    )
    task = FeatdelTask.model_construct(protected_files={"tests/test_a.py": "x", "setup.cfg": "y"})
    got = pycache.install(entry, tmp_path / "repo", task)
    assert got == ("tests/__pycache__/test_a.cpython-312-pytest-9.2.0.pyc",)
    assert sorted(p.relative_to(tmp_path / "repo").as_posix() for p in (tmp_path / "repo").rglob("*.pyc")) == list(got)
    assert pycache.install(None, tmp_path / "none", task) == ()
