"""A task whose every replayed call gives gold's one result is not written (``constant-outcome``): ``return VALUE``
would score 1.0 without the work (crf_prime/featdel/constant.py)."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from crf_prime.featdel.constant import RAISE, constant_body, constant_statements, literal
from crf_prime.featdel.generate import GenerateConfig, generate
from crf_prime.featdel.models import FeatdelTask, Target


def test_a_literal_writes_each_primitive_result_and_a_raise_but_not_an_object() -> None:
    assert literal({"returned": ["NoneType", None], "args_after": []}) == "return None"
    assert literal({"returned": ["bool", True]}) == "return True"
    assert literal({"returned": ["int", 2]}) == "return 2"
    assert literal({"returned": ["str", "a'b"]}) == 'return "a\'b"'
    assert literal({"returned": ["float", "0.5"]}) == "return float('0.5')"
    assert literal({"returned": ["float", "nan"]}) == "return float('nan')"
    assert literal({"returned": ["bytes", "ff00"]}) == "return bytes.fromhex('ff00')"
    assert literal({"raised": "ValueError", "args_after": []}) == RAISE
    assert literal({"returned": ["object", ["m.C", []]]}) is None
    assert literal({"returned": ["int", True]}) is None  # a payload of another type than its tag
    assert literal({"callable": []}) is None and literal(None) is None


def _task(*qualnames: str) -> FeatdelTask:
    targets = [Target(path="m.py", qualname=q, lineno=1) for q in qualnames]
    return FeatdelTask.model_construct(targets=tuple(targets))


def test_every_target_needs_one_result_a_literal_writes() -> None:
    two = _task("f", "C.g")
    calls = [{"id": "1", "target": 0}, {"id": "2", "target": 0}, {"id": "3", "target": 1}]
    same = {"1": {"returned": ["int", 2]}, "2": {"returned": ["int", 2]}, "3": {"raised": "KeyError"}}
    assert constant_statements(two, calls, same) == ["return 2", RAISE]
    assert constant_statements(two, calls, {**same, "2": {"returned": ["int", 3]}}) is None  # two results
    assert constant_statements(two, calls[:2], same) is None  # a target without a replayed call
    assert constant_statements(two, calls, {**same, "3": {"returned": ["list", []]}}) is None  # no literal


def test_the_constant_body_replaces_each_target_s_whole_body_in_gold_s_file() -> None:
    gold = textwrap.dedent(
        '''\
        import os


        def f(x):
            """Doc."""
            y = x * 2
            return y - x - x + 2


        class C:
            def g(self, key):
                return {"a": 1}[key]

            def h(self):
                return 5
        '''
    )
    calls = [{"id": "1", "target": 0}, {"id": "2", "target": 1}]
    expected = {"1": {"returned": ["int", 2]}, "2": {"raised": "KeyError"}}
    body, said = constant_body(_task("f", "C.g"), {"m.py": gold}, calls, expected) or (None, "")
    assert body is not None and said == f"f: return 2; C.g: {RAISE}"
    tree = ast.parse(body.text)
    f = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    assert ast.unparse(f.body) == "return 2"
    assert ast.unparse(next(n for n in tree.body if isinstance(n, ast.ClassDef))) == textwrap.dedent(
        f"""\
        class C:

            def g(self, key):
                {RAISE}

            def h(self):
                return 5"""
    )
    assert body.text.startswith("import os\n") and body.path == "m.py"
    generator = gold.replace("return y - x - x + 2", "yield 2")
    assert constant_body(_task("f"), {"m.py": generator}, calls[:1], expected) is None  # a generator: not a literal
    assert constant_body(_task("f", "C.g"), {"m.py": gold}, calls[:1], expected) is None  # C.g has no call


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_generation_rejects_a_task_whose_calls_all_give_one_result(tmp_path: Path) -> None:
    """``imbalance`` counts ``(`` twice, so it returns 0 on every input: ``return 0`` passes its replay and its tests,
    and the task is rejected as ``constant-outcome``; ``initials``, whose results differ, is written."""
    module = textwrap.dedent(
        '''\
        def imbalance(text):
            """Opening minus closing parentheses in ``text``."""
            opened = text.count("(")
            closed = text.count("(")
            return opened - closed


        def initials(name, sep=" "):
            """The first letter of each word of ``name``, upper-cased."""
            words = [w for w in name.split(sep) if w]
            letters = [w[0].upper() for w in words]
            return "".join(letters)
        '''
    )
    tests = textwrap.dedent(
        """\
        from levels import imbalance, initials


        def test_imbalance():
            assert imbalance("(()") == 0
            assert imbalance("") == 0


        def test_initials():
            assert initials("ada lovelace") == "AL"
            assert initials("grace--hopper", sep="-") == "GH"
        """
    )
    src = _tree(
        tmp_path / "levels",
        {
            "pyproject.toml": '[project]\nname = "levels"\nversion = "0.1"\n',
            "levels/__init__.py": module,
            "tests/test_levels.py": tests,
        },
    )
    tasks, summary = generate(GenerateConfig(source=str(src), out=tmp_path / "out", granularities=["function"]))
    assert [t.task_id for t in tasks] == ["levels-local__levels.initials"]
    assert tasks[0].mutation is not None and tasks[0].mutation.constant == ""
    [rejected] = summary.rejections
    assert (rejected.candidate, rejected.reason) == ("levels-local__levels.imbalance", "constant-outcome")
    assert rejected.detail.endswith("imbalance: return 0")
    assert summary.rejected == {"constant-outcome": 1}
