"""Tiny local projects on disk for the corpus and reach tests (no download; the test venv is the session's)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

LIB = textwrap.dedent(
    '''\
    """Tiny text utilities."""


    def slugify(text, sep="-"):
        """Lower-case words of ``text`` joined by ``sep``."""
        words = [w for w in text.lower().split() if w]
        out = sep.join(words)
        return out


    def clamp(x, lo, hi):
        """Limit ``x`` to [lo, hi]."""
        if x < lo:
            x = lo
            return x
        if x > hi:
            x = hi
            return x
        return x


    def tally(xs):
        """Occurrences of each item."""
        counts = {}
        for x in xs:
            counts.setdefault(x, 0)
            counts[x] += 1
        return counts


    class Queue:
        """FIFO with a size."""

        def __init__(self):
            self.head = []
            self.size = 0

        def put(self, x):
            self.head.insert(0, x)
            self.size += 1
            return self.size

        def take(self):
            self.size -= 1
            return self.head.pop()
    '''
)

TESTS = textwrap.dedent(
    """\
    from {pkg} import Queue, clamp, slugify, tally


    def test_slugify():
        assert slugify("Hello  World") == "hello-world"


    def test_clamp_low():
        assert clamp(-1, 0, 3) == 0


    def test_clamp_high():
        assert clamp(5, 0, 3) == 3


    def test_tally():
        assert tally("abca") == {{"a": 2, "b": 1, "c": 1}}


    def test_queue():
        q = Queue()
        assert q.put("a") == 1 and q.put("b") == 2
        assert q.take() == "a" and q.size == 1
    """
)

# ``while n > 0``, not ``while n``: on the negative numbers the recording derives from the tests' calls, ``while n``
# never ends (-1 // 10 == -1), and each such gold call costs the recording's whole timeout (~70 s for the package)
GAMMA = textwrap.dedent(
    '''\
    """Number helpers."""


    def digits(n):
        """Decimal digits of ``n``, most significant first."""
        out = []
        while n > 0:
            out.append(n % 10)
            n //= 10
        return out[::-1] or [0]


    def mean(xs):
        """Arithmetic mean (0 for no values)."""
        total = 0
        for x in xs:
            total += x
        return total / len(xs) if xs else 0
    '''
)

GAMMA_TESTS = textwrap.dedent(
    """\
    from gamma import digits, mean


    def test_digits():
        assert digits(1203) == [1, 2, 0, 3] and digits(0) == [0]


    def test_mean():
        assert mean([1, 2, 3]) == 2 and mean([]) == 0
    """
)


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def project(root: Path, pkg: str, lib: str = LIB, tests: str | None = None, license: str = "MIT") -> Path:
    """A flat-layout project ``pkg`` whose suite passes as shipped."""
    return write(
        root,
        {
            "pyproject.toml": f'[project]\nname = "{pkg}"\nversion = "0.1"\nlicense = {{text = "{license}"}}\n',
            f"{pkg}/__init__.py": lib,
            f"tests/test_{pkg}.py": (tests if tests is not None else TESTS).format(pkg=pkg),
        },
    )


def renamed(lib: str) -> str:
    """The same code under other names (a near duplicate): every function and local renamed."""
    names = {"slugify": "to_slug", "words": "parts", "tally": "count_all", "counts": "seen", "clamp": "bound"}
    return re.sub(r"\b(" + "|".join(names) + r")\b", lambda m: names[m.group(1)], lib)
