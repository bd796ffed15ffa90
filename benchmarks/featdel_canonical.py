"""What the replay box pays to put a deep object's state in canonical form.

``replay_box.canonical`` orders every dict's entries (an object's ``__dict__`` included) as by their whole JSON text.
The baseline sorts by that text (each value serialized again at every level above it); the new way sorts by the
key's text when the keys' texts differ (the same order). Measured on a parsed-document-like tree (nodes holding
their parent, children and attributes, as a BeautifulSoup tree does) and on nested plain dicts, the two ways
alternating per round so that the machine's load hits both alike; every tree is checked to come out the same both
ways. Prints per-shape medians and the ratio new/baseline.

``--baseline FILE`` compares instead the whole ``canonical`` of another ``replay_box.py`` (e.g. the commit before's:
``git show HEAD~1:crf_prime/featdel/replay_box.py > /tmp/box.py``) with this one, on the same shapes and on a
parsed-catalog-like state (a few classes, thousands of instances: ``__dict__`` objects, slotted ones, a dict
subclass, datetimes), where each instance's class was read anew.

    .venv/bin/python benchmarks/featdel_canonical.py [--rounds 5] [--depth 12] [--baseline FILE]
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import statistics
import time
from collections import OrderedDict
from pathlib import Path

from crf_prime.featdel import replay_box


class Node:
    def __init__(self, name: str, parent: Node | None) -> None:
        self.name = name
        self.parent = parent
        self.attrs = {"class": [name], "id": f"{name}-{id(self) % 97}"}
        self.contents: list[Node | str] = []


def document(depth: int, fanout: int = 2) -> Node:
    root = Node("html", None)
    level = [root]
    for d in range(depth):
        nxt = []
        for node in level:
            for i in range(fanout if d % 3 else 1):
                child = Node(f"n{d}_{i}", node)
                node.contents.append(child)
                node.contents.append(f"text {d} {i}")
                nxt.append(child)
        level = nxt
    return root


def nested(depth: int) -> dict:
    tree: dict = {"leaf": list(range(5))}
    for d in range(depth):
        tree = {f"k{d}": tree, f"v{d}": d, "s": "x" * d}
    return tree


class Entry:
    def __init__(self, i: int) -> None:
        self.msgid = f"message {i}"
        self.msgstr = f"texte {i}"
        self.flags = ["fuzzy"] if i % 3 == 0 else []
        self.occurrences = [(f"src/m{i % 7}.py", str(i))]
        self.when = datetime.datetime(2024, 1, 1 + i % 28, i % 24)


class Pos:
    __slots__ = ("col", "line")

    def __init__(self, line: int, col: int) -> None:
        self.line, self.col = line, col


class Meta(OrderedDict):
    pass


def catalog(n: int) -> dict:
    entries = [Entry(i) for i in range(n)]
    return {"entries": entries, "positions": [Pos(i, i % 80) for i in range(n)], "meta": Meta(lang="fr", n=str(n))}


def baseline(entries: list[list]) -> list[list]:
    return sorted(entries, key=replay_box._text)


def load_box(path: Path):
    spec = importlib.util.spec_from_file_location("baseline_replay_box", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compare(shapes: dict[str, object], ways: dict[str, object], rounds: int) -> None:
    """Each shape through each of ``ways`` (name -> a no-argument setup returning the canonical function),
    alternating per round; the trees must be equal."""
    for name, value in shapes.items():
        times: dict[str, list[float]] = {w: [] for w in ways}
        trees: dict[str, object] = {}
        for r in range(rounds):
            for way in list(ways) if r % 2 == 0 else list(ways)[::-1]:
                canonical = ways[way]()  # type: ignore[operator]
                t = time.perf_counter()
                trees[way] = canonical(value)
                times[way].append(time.perf_counter() - t)
            assert trees["baseline"] == trees["new"], f"{name}: the canonical trees differ"
        b, n = statistics.median(times["baseline"]), statistics.median(times["new"])
        print(f"{name:14} baseline {1000 * b:8.1f} ms  new {1000 * n:8.1f} ms  new/baseline {n / b:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--depth", type=int, default=12)
    ap.add_argument("--baseline", type=Path, help="another replay_box.py whose canonical is the baseline")
    args = ap.parse_args()
    shapes = {"document tree": document(args.depth), "nested dicts": nested(40 * args.depth)}
    if args.baseline is not None:
        other = load_box(args.baseline)
        shapes["catalog"] = catalog(1000)
        compare(shapes, {"baseline": lambda: other.canonical, "new": lambda: replay_box.canonical}, args.rounds)
        return
    new = replay_box._by_first_text

    def ordered(order):
        def setup():
            replay_box._by_first_text = order
            return replay_box.canonical

        return setup

    compare(shapes, {"baseline": ordered(baseline), "new": ordered(new)}, args.rounds)
    replay_box._by_first_text = new


if __name__ == "__main__":
    main()
