"""Channel 2's error-site detector on episodes with planted error sites: precision and recall per kind, how often the
distilled turns are exactly the planted ones, and one hint per kind.

The episodes (tests/hints/planted_sites.py) are real verifiers v1 traces carrying tokens; tests/hints/
test_hints_planted.py holds the same table as exact expectations.

    .venv/bin/python benchmarks/hint_detector.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "hints"))
from planted_sites import corpus, example_hints, score


def main() -> None:
    episodes = corpus()
    negatives = sum(not ep.kinds for ep in episodes)
    table = Table(title=f"error-site detector on {len(episodes)} planted episodes ({negatives} without an error site)")
    for column in ("kind", "planted", "found", "tp", "fp", "fn", "precision", "recall", "error turns exact"):
        table.add_column(column, justify="left" if column == "kind" else "right")
    for kind, s in score(episodes).items():
        planted = s.tp + s.fn
        table.add_row(
            kind,
            str(planted),
            str(s.tp + s.fp),
            str(s.tp),
            str(s.fp),
            str(s.fn),
            f"{s.precision:.2f}",
            f"{s.recall:.2f}",
            f"{s.turns_exact}/{s.tp}",
        )
    console = Console(width=120)
    console.print(table)
    for kind, hint in example_hints(episodes).items():
        console.print(f"[bold]{kind}[/bold]: {hint}", soft_wrap=True, markup=True, highlight=False)


if __name__ == "__main__":
    main()
