"""What the replay box pays to put a deep object's state in canonical form.

``replay_box.canonical`` orders every dict's entries (an object's ``__dict__`` included) as by their whole JSON text.
The baseline sorts by that text (each value serialized again at every level above it); the new way sorts by the
key's text when the keys' texts differ (the same order). Measured on a parsed-document-like tree (nodes holding
their parent, children and attributes, as a BeautifulSoup tree does) and on nested plain dicts, the two ways
alternating per round so that the machine's load hits both alike; every tree is checked to come out the same both
ways. Prints per-shape medians and the ratio new/baseline.

    .venv/bin/python benchmarks/featdel_canonical.py [--rounds 5] [--depth 12]
"""

from __future__ import annotations

import argparse
import statistics
import time

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


def baseline(entries: list[list]) -> list[list]:
    return sorted(entries, key=replay_box._text)


def timed(value: object, order) -> tuple[float, object]:
    replay_box._by_first_text = order
    t = time.perf_counter()
    tree = replay_box.canonical(value)
    return time.perf_counter() - t, tree


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--depth", type=int, default=12)
    args = ap.parse_args()
    new = replay_box._by_first_text
    shapes = {"document tree": document(args.depth), "nested dicts": nested(40 * args.depth)}
    for name, value in shapes.items():
        times: dict[str, list[float]] = {"baseline": [], "new": []}
        for r in range(args.rounds):
            ways = [("baseline", baseline), ("new", new)]
            for way, order in ways if r % 2 == 0 else ways[::-1]:
                s, tree = timed(value, order)
                times[way].append(s)
                if way == "baseline":
                    want = tree
                else:
                    got = tree
            assert got == want, f"{name}: the canonical trees differ"
        replay_box._by_first_text = new
        b, n = statistics.median(times["baseline"]), statistics.median(times["new"])
        print(f"{name:14} baseline {1000 * b:8.1f} ms  new {1000 * n:8.1f} ms  new/baseline {n / b:.3f}")


if __name__ == "__main__":
    main()
