"""The records layer sits below traces, teachers and pairs: no package imports another in a cycle, and every
command reads a states file through the one reader, failing the same way."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from records_support import state

from crf_prime.cli import main
from crf_prime.records import StatesFileError, read_states

PACKAGE = Path(__file__).resolve().parents[2] / "crf_prime"
LAYERS = ("records", "traces", "pairs", "teachers")


def package_imports(name: str) -> set[str]:
    """The ``crf_prime`` packages that modules of ``crf_prime.<name>`` import, lazily inside functions included."""
    found: set[str] = set()
    for path in (PACKAGE / name).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            modules = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            for m in modules:
                parts = m.split(".")
                if parts[0] == "crf_prime" and len(parts) > 1 and parts[1] != name:
                    found.add(parts[1])
    return found


def test_records_is_the_bottom_layer_and_the_channel_3_packages_form_no_cycle() -> None:
    graph = {name: package_imports(name) & set(LAYERS) for name in LAYERS}
    assert graph["records"] == set()
    assert "teachers" not in graph["pairs"] and "teachers" not in graph["traces"]
    # depth-first search for a cycle over the package graph
    state: dict[str, str] = {}

    def visit(node: str, path: tuple[str, ...]) -> None:
        assert state.get(node) != "open", f"import cycle: {' -> '.join((*path, node))}"
        if state.get(node) == "done":
            return
        state[node] = "open"
        for nxt in graph[node]:
            visit(nxt, (*path, node))
        state[node] = "done"

    for name in LAYERS:
        visit(name, ())


@pytest.mark.parametrize(("module", "absent"), [("crf_prime.records", LAYERS[1:]), ("crf_prime.pairs", ("teachers",))])
def test_a_lower_layer_imports_alone_in_a_fresh_interpreter(module: str, absent: tuple[str, ...]) -> None:
    code = (
        f"import sys, {module}; print(sorted(m for m in sys.modules if m.split('.')[:2] in "
        + repr([["crf_prime", a] for a in absent])
        + "))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_read_states_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "states.jsonl"
    path.write_text(state(0).model_dump_json() + "\n\n" + '{"state_id": "x"}\n')
    rows = read_states(path)
    assert next(rows).state_id == "s0"
    with pytest.raises(StatesFileError, match=rf"^{path}:3: not a TraceState row: messages: Field required$"):
        next(rows)
    with pytest.raises(StatesFileError, match=rf"^{tmp_path}: not a file$"):
        list(read_states(tmp_path))
    assert StatesFileError.exit_code == 2


def test_every_command_fails_the_same_way_on_a_bad_states_file(tmp_path: Path, capsys) -> None:
    states = tmp_path / "states.jsonl"
    states.write_text(state(0).model_dump_json() + "\n" + '{"state_id": "x"}\n')
    journal = tmp_path / "journal.jsonl"
    journal.write_text("")
    teachers = tmp_path / "teachers.toml"
    teachers.write_text('[[teachers]]\nname = "a"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\napi_key_var = ""\n')
    replay = ["teachers", "replay", "@", str(teachers), "--states", str(states), "--out", str(tmp_path / "run")]
    pairs = ["pairs", "--journal", str(journal), "--states", str(states), "--out", str(tmp_path / "p.jsonl")]
    errors = []
    for argv in (replay, pairs):
        assert main(argv) == 2
        errors.append(capsys.readouterr().err.strip().splitlines())
    assert [e[0].split(": error: ", 1)[1] for e in errors] == [
        f"{states}:2: not a TraceState row: messages: Field required"
    ] * 2
    assert all(len(e) == 1 for e in errors)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal.jsonl", "states.jsonl", "teachers.toml"]
