"""Pick packages for the Feature Deletion reach measurement by a rule fixed before any corpus run.

Walk a PyPI download ranking (``name<TAB>version<TAB>month<TAB>rank``; rank 1 = most downloaded) in rank order and
keep a package when all of these hold for the sdist of the listed version:
  - it is not on the curated list (configs/featdel/sources.txt);
  - the listed version has an sdist of at most ``--max-kib`` KiB (small projects);
  - its metadata declares a permissive licence (MIT, BSD, Apache, ISC, PSF, Unlicense, 0BSD): the licence expression,
    else the licence trove classifiers, else a short ``License`` field (the order ``source.license_of`` reads);
  - the sdist holds no extension sources (``*.c``, ``*.h``, ``*.cpp``, ``*.pyx``, ``*.rs``, ``Cargo.toml``);
  - it ships tests (a ``.py`` file under a ``tests``/``test`` directory or named ``test*.py`` / ``*_test.py``).
Nothing else: a package the rule keeps stays in the measurement's denominator whatever the corpus makes of it.
Size and licence come from PyPI's JSON API (``/pypi/NAME/json``: one small request, no resolver, no build backend);
only sdists that pass both are streamed, into memory, to list their members. The first ``--count`` kept are printed
as a sources file (``pypi:NAME==VERSION`` lines) on stdout; every package looked at, with the rule it failed, goes
to stderr.

    .venv/bin/python benchmarks/featdel_reach_pick.py RANKING.tsv [--count 24] [--max-kib 200] > picked.txt
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import tarfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
PERMISSIVE = re.compile(r"\b(MIT|BSD|Apache|ISC|PSF|Python Software Foundation|Unlicense|0BSD)\b", re.I)
NATIVE = (".c", ".h", ".cpp", ".pyx", ".rs", "Cargo.toml")
TEST_FILE = re.compile(r"test.*\.py|.*_test\.py")


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def curated() -> set[str]:
    text = (ROOT / "configs" / "featdel" / "sources.txt").read_text()
    return {norm(m) for m in re.findall(r"^pypi:([^=\s]+)==", text, re.M)}


def licence(info: dict) -> str:
    """The declared licence, read in ``source.license_of``'s order (expression, classifiers, short field)."""
    if info.get("license_expression"):
        return str(info["license_expression"])
    classifiers = [c.rsplit("::", 1)[-1].strip() for c in info.get("classifiers") or [] if c.startswith("License ::")]
    if classifiers:
        return ", ".join(classifiers)
    value = (info.get("license") or "").strip()
    ok = value and value.upper() != "UNKNOWN" and len(value) <= 80 and not value.lower().startswith("copyright")
    return value if ok else ""


def members(data: bytes, filename: str) -> list[str]:
    """Member paths of an sdist archive, without its top-level directory."""
    if filename.endswith(".zip"):
        names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    else:
        with tarfile.open(fileobj=io.BytesIO(data)) as t:
            names = [m.name for m in t.getmembers() if m.isfile()]
    return [n.split("/", 1)[1] if "/" in n else n for n in names]


def ships_tests(files: list[str]) -> bool:
    return any(
        f.endswith(".py") and ({"tests", "test"} & set(f.split("/")[:-1]) or TEST_FILE.fullmatch(f.rsplit("/", 1)[-1]))
        for f in files
    )


def why_not(client: httpx.Client, name: str, version: str, max_kib: int) -> str:
    """ "" when the package is kept, else the first rule it fails."""
    resp = client.get(f"https://pypi.org/pypi/{name}/json")
    if resp.status_code == 404:
        return "not on PyPI"
    resp.raise_for_status()  # anything else is the network's failure, not the package's
    doc = resp.json()
    sdists = [f for f in doc.get("releases", {}).get(version, []) if f["packagetype"] == "sdist"]
    if not sdists:
        return "no sdist"
    sdist = sdists[0]
    if sdist["size"] > max_kib * 1024:
        return f"sdist {sdist['size'] // 1024} KiB"
    lic = licence(doc["info"])
    if not PERMISSIVE.search(lic):
        return f"licence {lic[:40]!r}"
    data = client.get(resp.url.join(sdist["url"])).raise_for_status().content  # a mirror may give relative URLs
    files = members(data, sdist["filename"])
    if any(f.endswith(NATIVE) for f in files):
        return "extension sources"
    return "" if ships_tests(files) else "no tests in the sdist"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ranking", type=Path)
    ap.add_argument("--count", type=int, default=24)
    ap.add_argument("--max-kib", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=16, help="requests at once")
    args = ap.parse_args()
    rows = []
    for line in args.ranking.read_text().splitlines()[1:]:
        parts = line.split("\t")
        if len(parts) >= 4 and parts[3].strip().isdigit() and parts[1]:
            rows.append((int(parts[3]), parts[0], parts[1]))
    skip = curated()
    todo = [r for r in sorted(rows) if norm(r[1]) not in skip]
    kept = 0
    with (
        httpx.Client(timeout=60, follow_redirects=True) as client,
        ThreadPoolExecutor(args.jobs) as pool,  # requests wait on the network; the order stays the ranking's
    ):
        for start in range(0, len(todo), args.jobs):
            batch = todo[start : start + args.jobs]
            reasons = pool.map(lambda r: why_not(client, r[1], r[2], args.max_kib), batch)
            for (rank, name, version), reason in zip(batch, reasons, strict=True):
                print(f"# rank {rank} {name}=={version}: {reason or 'KEPT'}", file=sys.stderr, flush=True)
                if not reason:
                    print(f"pypi:{name}=={version}  # download rank {rank}", flush=True)
                    kept += 1
                    if kept == args.count:
                        return


if __name__ == "__main__":
    main()
