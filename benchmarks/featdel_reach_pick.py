"""Pick packages for the Feature Deletion reach measurement by a rule fixed before any corpus run.

Walk a PyPI download ranking (``name<TAB>version<TAB>month<TAB>rank``; rank 1 = most downloaded) in rank order (curated
packages skipped) and keep a package when all of these hold for the sdist of the listed version:
  - it is not on the curated list (configs/featdel/sources.txt);
  - the sdist is at most ``--max-kib`` KiB (small projects);
  - it holds no extension sources (``*.c``, ``*.h``, ``*.cpp``, ``*.pyx``, ``*.rs``, ``Cargo.toml``): pure Python;
  - its metadata declares a permissive licence (MIT, BSD, Apache, ISC, PSF, Unlicense, 0BSD);
  - it ships tests (a ``.py`` file under a ``tests``/``test`` directory or named ``test*.py`` / ``*_test.py``).
The first ``--count`` kept are printed as a sources file (``pypi:NAME==VERSION`` lines) on stdout.

    .venv/bin/python benchmarks/featdel_reach_pick.py RANKING.tsv [--count 20] [--max-kib 200] > picked.txt
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from crf_prime.featdel.source import SourceError, _unpack, download_sdist, license_of

ROOT = Path(__file__).resolve().parents[1]
PERMISSIVE = re.compile(r"\b(MIT|BSD|Apache|ISC|PSF|Python Software Foundation|Unlicense|0BSD)\b", re.I)
NATIVE = (".c", ".h", ".cpp", ".pyx", ".rs")


def curated() -> set[str]:
    text = (ROOT / "configs" / "featdel" / "sources.txt").read_text()
    return {re.sub(r"[-_.]+", "-", m).lower() for m in re.findall(r"^pypi:([^=\s]+)==", text, re.M)}


def why_not(name: str, version: str, max_kib: int, cache: Path) -> str:
    """ "" when the package is kept, else the first rule it fails."""
    try:
        sdist = download_sdist(name, version, cache)
    except SourceError:
        return "no sdist"
    if sdist.stat().st_size > max_kib * 1024:
        return f"sdist {sdist.stat().st_size // 1024} KiB"
    with tempfile.TemporaryDirectory() as tmp:
        root = _unpack(sdist, Path(tmp))
        files = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
        if any(f.endswith(NATIVE) or f.endswith("Cargo.toml") for f in files):
            return "extension sources"
        if not PERMISSIVE.search(license_of(root)):
            return f"licence {license_of(root)[:40]!r}"
        tests = [
            f
            for f in files
            if f.endswith(".py")
            and (
                {"tests", "test"} & set(f.split("/")[:-1])
                or re.fullmatch(r"test.*\.py|.*_test\.py", f.rsplit("/", 1)[-1])
            )
        ]
        return "" if tests else "no tests in the sdist"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ranking", type=Path)
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--max-kib", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=8, help="downloads at once")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "featdel-reach-pick")
    args = ap.parse_args()
    rows = []
    for line in args.ranking.read_text().splitlines()[1:]:
        parts = line.split("\t")
        if len(parts) >= 4 and parts[3].strip().isdigit() and parts[1]:
            rows.append((int(parts[3]), parts[0], parts[1]))
    skip = curated()
    todo = [r for r in sorted(rows) if re.sub(r"[-_.]+", "-", r[1]).lower() not in skip]
    kept = 0
    with ThreadPoolExecutor(args.jobs) as pool:  # downloads wait on the network; the order stays the ranking's
        for start in range(0, len(todo), args.jobs):
            batch = todo[start : start + args.jobs]
            reasons = pool.map(lambda r: why_not(r[1], r[2], args.max_kib, args.cache), batch)
            for (rank, name, version), reason in zip(batch, reasons, strict=True):
                print(f"# rank {rank} {name}=={version}: {reason or 'KEPT'}", file=sys.stderr, flush=True)
                if not reason:
                    print(f"pypi:{name}=={version}  # download rank {rank}", flush=True)
                    kept += 1
                    if kept == args.count:
                        return


if __name__ == "__main__":
    main()
