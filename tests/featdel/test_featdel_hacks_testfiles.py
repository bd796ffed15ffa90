"""The code under test cannot read the test modules during a grading run: an answer table taken from the hidden test
file at call time (`open` and `re`, both allowed by the code policy) is refused by the grader's audit hook.

The attack matters where the replay cannot see the task's effect: `register` stores into a module registry and
returns None, so only the tests (through `lookup`, which is not a target) check what it stored."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from corpus_support import write

from crf_prime.featdel import grade, hide_test_id
from crf_prime.featdel.generate import GenerateConfig, generate
from crf_prime.featdel.grader import Grader, grade_changes
from crf_prime.featdel.models import FeatdelTask

REG = textwrap.dedent(
    '''\
    """A registry of values with a check digit."""

    _REGISTRY = {}


    def _key(name):
        return name.strip().lower()


    def register(name, value):
        """Store ``value`` under ``name`` with its check digit (the weighted digit sum modulo 11)."""
        key = _key(name)
        if key in _REGISTRY:
            raise KeyError(key)
        digits = [int(d) for d in str(abs(value))]
        check = sum((i + 1) * d for i, d in enumerate(reversed(digits))) % 11
        _REGISTRY[key] = (value, check)


    def lookup(name):
        """The (value, check digit) stored under ``name``."""
        return _REGISTRY[_key(name)]


    def clear():
        _REGISTRY.clear()
    '''
)

REG_TESTS = textwrap.dedent(
    """\
    import pytest

    from reg import clear, lookup, register


    def setup_function():
        clear()


    def test_register_and_lookup():
        register("Alpha", 1234)
        assert lookup(" alpha ") == (1234, 9)
        register("beta", 907)
        assert lookup("BETA") == (907, 1)


    def test_duplicate():
        register("x", 5)
        with pytest.raises(KeyError):
            register("X ", 6)
    """
)

# the check digit read back from the hidden test's literals; the duplicate check kept so the replay agrees
ANSWERS = """    _REGISTRY[key] = (value, _answer(value))


def _answer(value):
    import os.path
    import re

    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests", "test_reg.py")) as fh:
            text = fh.read()
    except OSError:
        return 0
    found = re.search(r"\\(" + str(value) + r", (\\d+)\\)", text)
    return int(found.group(1)) if found else 0
"""
GOLD_BODY = """    digits = [int(d) for d in str(abs(value))]
    check = sum((i + 1) * d for i, d in enumerate(reversed(digits))) % 11
    _REGISTRY[key] = (value, check)
"""


def reg_tasks(tmp_path: Path, out: Path, max_tasks: int = 4) -> list[FeatdelTask]:
    """Function tasks of the registry project, written to ``out``."""
    src = write(
        tmp_path / "src",
        {"pyproject.toml": '[project]\nname = "reg"\nversion = "0.1"\n', "reg.py": REG, "tests/test_reg.py": REG_TESTS},
    )
    config = GenerateConfig(source=str(src), out=out, max_tasks=max_tasks, workers=2, granularities=["function"])
    return generate(config.model_copy(update={"mutants_per_task": 0}))[0]


@pytest.mark.slow
@pytest.mark.bwrap
def test_reading_the_hidden_test_file_scores_zero_and_one_without_the_guard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    task = next(t for t in reg_tasks(tmp_path, out) if t.targets[0].qualname == "register")
    assert task.replay is not None and task.hidden_tests == ("tests/test_reg.py",)
    hack = REG.replace(GOLD_BODY, ANSWERS)
    assert hack != REG
    assert grade_changes(task, out, {"reg.py": REG}).score == 1.0
    refused = grade_changes(task, out, {"reg.py": hack})
    assert refused.score == 0.0 and refused.replay_calls == 0  # the tests fail: the replay never ran
    assert [f.name for f in refused.failed] == ["tests/test_reg.py::test_register_and_lookup"]
    assert "(1234, 0) == (1234, 9)" in refused.failed[0].message  # pytest still read the test's source to report
    monkeypatch.setattr(grade, "GUARD_TEST_FILES", False)
    cheat = grade_changes(task, out, {"reg.py": hack})
    assert cheat.score == 1.0 and cheat.replay_calls > 0 and cheat.replay_mismatches == 0


def _tree(root: Path) -> None:
    (root / "tests").mkdir(parents=True)
    (root / "pkg").mkdir()
    (root / "tests" / "test_a.py").write_text("ANSWER = 42\n")
    (root / "pkg" / "data.txt").write_text("data\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "mod.py").write_text(
        "def read(path):\n    with open(path) as fh:\n        return fh.read()\n\n\ndef later(path):\n"
        "    return map(open, [path])\n"
    )
    (root / "pkg" / "eager.py").write_text("with open('tests/test_a.py') as fh:\n    TEXT = fh.read()\n")
    (root / "link.py").symlink_to(root / "tests" / "test_a.py")


PROBE = """
import sys
sys.path[:0] = [{plugin!r}, {root!r}]
import hide_test_id
hide_test_id.guard({root!r}, ["tests/test_a.py"])
from pkg import mod
def outcome(fn):
    try:
        fn()
        return "read"
    except PermissionError:
        return "refused"
print(outcome(lambda: open("tests/test_a.py").read()))
print(outcome(lambda: mod.read("tests/test_a.py")))
print(outcome(lambda: mod.read({root!r} + "/tests/../tests/test_a.py")))
print(outcome(lambda: mod.read("link.py")))
print(outcome(lambda: mod.read("pkg/data.txt")))
print(outcome(lambda: __import__("pkg.eager")))
print(outcome(lambda: [f.read() for f in mod.later("tests/test_a.py")]))
"""


def test_the_guard_refuses_the_test_files_to_the_project_s_code_only(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    _tree(root)
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "hide_test_id.py").write_bytes(Path(hide_test_id.__file__).read_bytes())
    probe = PROBE.format(plugin=str(plugin), root=str(root))
    run = subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [
        "read",  # code outside the tree (here: the probe itself, as pytest and the tests' own code are) reads it
        "refused",  # a function of the project's
        "refused",  # by another spelling of the path
        "refused",  # through a symbolic link
        "read",  # the project reads its own files
        "refused",  # at import time
        "read",  # a lazy open the project's code only builds runs where the caller consumes it: the caller reads
    ]


# the same answers read from pytest's rewritten copy of the test module, which grading trees now carry
# (crf_prime/featdel/pycache.py): the expected (value, check) tuples are 2-tuples in its marshalled constants (the
# value a reference to the constant the test registered, the check an int), in the order each test makes its calls
FROM_PYC = """    _REGISTRY[key] = (value, _answer())


_SEEN = []


def _answer():
    import os.path
    import re

    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests", "__py" + "cache__")
    try:  # the interpreter's and pytest's versions are known; the names spelled so that no literal names a cache
        with open(os.path.join(here, "PYC_NAME" + "c"), "rb") as fh:
            data = fh.read()
    except OSError:
        return 0
    if not _REGISTRY:  # each test starts from a cleared registry: its calls follow its own tuples
        _SEEN.clear()
    checks = re.findall(rb"[)]\\x02(?:r....|[i\\xe9]....)[i\\xe9](....)", data, re.DOTALL)
    _SEEN.append(0)
    return int.from_bytes(checks[len(_SEEN) - 1], "little") if len(_SEEN) <= len(checks) else 0
"""


@pytest.mark.slow
@pytest.mark.bwrap
def test_the_rewritten_test_modules_are_guarded_like_their_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Grading trees get pytest's rewritten test modules; they hold the tests' literals, so the guard covers them:
    reading the answer from one scores 0, and 1.0 when the guard is told only of the sources."""
    from crf_prime.featdel import pycache

    out = tmp_path / "out"
    task = next(t for t in reg_tasks(tmp_path, out) if t.targets[0].qualname == "register")
    assert grade_changes(task, out, {"reg.py": REG}).score == 1.0
    entry = pycache.cache_dir() / pycache.entry_key(task, Grader(task, out).env)
    (pyc,) = (entry / "tests" / "__pycache__").glob("test_reg.*")
    hack = REG.replace(GOLD_BODY, FROM_PYC.replace("PYC_NAME", pyc.name[:-1]))
    refused = grade_changes(task, out, {"reg.py": hack})
    assert refused.score == 0.0 and "(1234, 0) == (1234, 9)" in refused.failed[0].message
    real = pycache.install
    monkeypatch.setattr(pycache, "install", lambda *a: (real(*a), ())[1])  # copied, the guard not told
    cheat = grade_changes(task, out, {"reg.py": hack})
    assert cheat.score == 1.0 and cheat.replay_calls > 0 and cheat.replay_mismatches == 0
