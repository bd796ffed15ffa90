"""Cost of the Feature Deletion code policy on real code: the share of a package's own functions it would reject.

For every function and method of each package's non-test source (the candidates the generator deletes), the
snapshot is the file with that body replaced by ``raise NotImplementedError`` and the "agent's answer" is the
original file: a function whose own original body breaks the allow-list (``crf_prime/featdel/policy.py``) could
never be a task (``gold-violates-policy``). Judged as grading judges (with ``lookup_guard.ENABLED``, computed
``getattr``/``setattr``/``delattr`` are left to crf_prime/featdel/lookup_guard.py) and, as the baseline in the same
run, by the static rules alone. Prints one row per package and the most frequent rules. Target: <= 5 %.

    .venv/bin/python benchmarks/featdel_policy_cost.py [pypi:NAME==VERSION ...]
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from crf_prime.featdel import lookup_guard
from crf_prime.featdel.deletion import iter_functions
from crf_prime.featdel.policy import (
    project_gadgets,
    project_modules,
    project_own_modules,
    violations,
)
from crf_prime.featdel.source import load_project, source_files

PACKAGES = (
    "pypi:toolz==1.2.0",
    "pypi:inflection==0.5.1",
    "pypi:more-itertools==11.2.1",
    "pypi:sortedcontainers==2.4.0",
    "pypi:tabulate==0.10.0",
    "pypi:python-slugify==9.1.3",
    "pypi:six==1.17.0",
)


def cost(spec: str, workspace: Path, runtime_lookups: bool) -> tuple[int, list[tuple[str, str]]]:
    """(functions judged, [(qualified function, first violated rule) for each rejected one])."""
    project = load_project(spec, workspace)
    files = {rel: (project.root / rel).read_text() for rel in source_files(project.root, project.package_dirs)}
    roots = (".", *project.pythonpath)
    allowed = project_modules(files, roots)
    own = project_own_modules(files, roots)
    gadgets = project_gadgets(files, allowed)
    total, rejected = 0, []
    for rel, text in sorted(files.items()):
        # judged once per file: a function is rejected when one of the file's violations lies in its span (from its
        # decorators to its last body line). Anything outside the span is in the snapshot too (same rule, same
        # context), so it is excused; anything inside is not (its body is deleted, or its source, the context, changed)
        found = violations(text, allowed, gadgets, own_modules=own, runtime_lookups=runtime_lookups) or []
        for fn in iter_functions(rel, text):
            total += 1
            end = max(fn.body_lines, default=fn.lineno)
            inside = [v for v in found if fn.start_line <= v.line <= end]
            if inside:
                rejected.append((f"{rel}::{fn.qualname}", inside[0].rule))
    return total, rejected


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="*", default=list(PACKAGES))
    parser.add_argument("--show", type=int, default=0, help="list this many rejected functions per package")
    args = parser.parse_args()
    table = Table(title="featdel code policy: own functions the allow-list rejects")
    for col in ("package", "functions", "rejected", "share", "static rules alone", "top rules"):
        table.add_column(col)
    console = Console()
    for spec in args.sources:
        with tempfile.TemporaryDirectory(prefix="crf-featdel-cost-") as tmp:
            total, rejected = cost(spec, Path(tmp), runtime_lookups=lookup_guard.ENABLED)
        with tempfile.TemporaryDirectory(prefix="crf-featdel-cost-") as tmp:
            _, static = cost(spec, Path(tmp), runtime_lookups=False)
        rules = Counter(rule.split(" '")[0] for _, rule in rejected).most_common(3)
        top = "; ".join(f"{n}× {r}" for r, n in rules)
        share, static_share = len(rejected) / max(total, 1), len(static) / max(total, 1)
        table.add_row(spec, str(total), str(len(rejected)), f"{share:.1%}", f"{len(static)} ({static_share:.1%})", top)
        for name, rule in rejected[: args.show]:
            console.print(f"  {spec} {name}: {rule}")
        console.print(f"ROW {spec} functions={total} rejected={len(rejected)} static={len(static)}")  # as it ends
    console.print(table)


if __name__ == "__main__":
    main()
