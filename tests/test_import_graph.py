"""No import circle between the project's own files.

The graph is built from the ``import`` statements themselves (``ast``), function-local ones included, so a circle
hidden behind a late import still counts; imports under ``if TYPE_CHECKING:`` are left out (they never run). An edge
goes to the module named (``from pkg import name`` goes to ``pkg.name`` when that is a module, else to ``pkg``); the
parent packages a module's import also runs are not edges, so ``pkg/__init__.py`` re-exporting its children is no
circle.
"""

from __future__ import annotations

import ast
import graphlib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = [
    ROOT / "crf_prime",
    ROOT / "loss_fns",
    *sorted(p for p in (ROOT / "environments").glob("*/*") if (p / "__init__.py").is_file()),
]


def modules() -> dict[str, Path]:
    """Dotted module name → file, for every ``.py`` file of the project's packages."""
    found: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted(pkg.rglob("*.py")):
            parts = [pkg.name, *path.relative_to(pkg).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: all but those under ``if TYPE_CHECKING:``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules that module ``name`` (file ``path``) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            candidates = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        for dotted in candidates:
            while dotted and dotted not in known:
                dotted = dotted.rpartition(".")[0]
            if dotted and dotted != name:
                targets.add(dotted)
    return targets


def import_graph() -> dict[str, set[str]]:
    """Module → the project modules it imports."""
    found = modules()
    known = set(found)
    return {name: imported(name, path, known) for name, path in found.items()}


def test_the_graph_sees_the_packages_and_a_local_import() -> None:
    graph = import_graph()
    assert {"crf_prime.cli", "loss_fns", "feature_deletion", "swebench_lite", "trace_replay"} <= set(graph)
    # crf_prime.cli imports its errors at the top and loads commands by name: the edge is there, the commands are not
    assert "crf_prime.errors" in graph["crf_prime.cli"]
    assert "crf_prime.featdel.cli" not in graph["crf_prime.cli"]


def test_a_function_local_import_is_an_edge(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    a = tmp_path / "pkg" / "a.py"
    a.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import c\ndef f():\n    from . import b\n"
    )
    assert imported("pkg.a", a, {"pkg", "pkg.a", "pkg.b", "pkg.c"}) == {"pkg.b"}


def test_no_import_circle() -> None:
    graph = import_graph()
    edges = sum(len(t) for t in graph.values())
    print(f"import graph: {len(graph)} modules, {edges} edges")
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as e:
        raise AssertionError(f"import circle: {' -> '.join(e.args[1])}") from None
