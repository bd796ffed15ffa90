"""Every ```bash block of README.md and docs/*.md runs here, on CPU, or says why it cannot.

A block runs in a temporary directory that sees the checkout's read-only inputs (``configs/``, ``tests/``,
``environments/``; ``$CRF_PRIME_DIR`` is the checkout) with the repo's venv first on ``PATH``, and must exit 0. A
block that cannot run here carries an HTML comment on the line before its fence:

- ``<!-- doc-test: skip (REASON) -->``: needs what this machine lacks (a GPU, a prime-rl checkout, Docker, a paid
  API, the network);
- ``<!-- doc-test: slow -->``: takes a minute (it fetches a PyPI package or runs an environment); it runs by default
  with pytest's ``slow`` mark (``-m 'not slow'`` leaves it out).

A block that needs a model starts one with ``crf-prime loopback serve`` itself, as a reader would.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from vf_cli_support import VALIDATE_HAS_NOOP

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
INPUTS = ("configs", "tests", "environments")
"""Checkout directories a block may read by relative path, as from the checkout's root."""
TIMEOUT_S = 300
MARK = re.compile(r"^<!--\s*doc-test:\s*(?P<kind>skip|slow)\s*(?:\((?P<reason>[^()]+)\))?\s*-->$")
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced shell block of a page and its doc-test mark."""

    where: str
    """``page:line`` of the opening fence."""
    code: str
    kind: str
    """``run``, ``skip`` or ``slow``."""
    reason: str = ""


def parse_blocks(text: str, page: str) -> list[Block]:
    """The ``bash`` blocks of a markdown text; a ``doc-test`` comment that marks no bash block is an error."""
    lines = text.splitlines()
    blocks: list[Block] = []
    marks_used: set[int] = set()
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise ValueError(f"{page}:{i + 1}: code fence never closed")
        if fence["lang"] == "bash":
            indent = len(fence["indent"])
            code = "\n".join(line[indent:] for line in lines[i + 1 : end]) + "\n"
            kind, reason = "run", ""
            above = next((j for j in range(i - 1, -1, -1) if lines[j].strip()), None)
            if above is not None and "doc-test" in lines[above]:
                mark = MARK.match(lines[above].strip())
                if mark is None:
                    raise ValueError(f"{page}:{above + 1}: unreadable doc-test mark {lines[above].strip()!r}")
                kind, reason = mark["kind"], (mark["reason"] or "").strip()
                if kind != "slow" and not reason:
                    raise ValueError(f"{page}:{above + 1}: a {kind} mark needs a reason in parentheses")
                marks_used.add(above)
            blocks.append(Block(f"{page}:{i + 1}", code, kind, reason))
        i = end + 1
    stray = [n + 1 for n, line in enumerate(lines) if re.match(r"\s*<!--\s*doc-test", line) and n not in marks_used]
    if stray:
        raise ValueError(f"{page}:{stray[0]}: doc-test mark not right above a ```bash block")
    return blocks


def all_blocks() -> list[Block]:
    return [b for page in PAGES for b in parse_blocks(page.read_text(), str(page.relative_to(REPO)))]


BLOCKS = all_blocks()
RUNNABLE = [
    pytest.param(b, id=b.where, marks=[pytest.mark.slow] if b.kind == "slow" else [])
    for b in BLOCKS
    if b.kind != "skip"
]


def test_parser_reads_marks_indentation_and_other_fences() -> None:
    text = (
        "intro\n```\nplain fence\n```\n"
        "<!-- doc-test: skip (needs a GPU) -->\n```bash\nuv run rl\n```\n"
        "1. step\n   ```bash\n   echo one \\\n       two\n   ```\n"
        "<!-- doc-test: slow -->\n\n```bash\nsleep 1\n```\n```toml\na = 1\n```\n"
    )
    assert parse_blocks(text, "p.md") == [
        Block("p.md:6", "uv run rl\n", "skip", "needs a GPU"),
        Block("p.md:10", "echo one \\\n    two\n", "run"),
        Block("p.md:16", "sleep 1\n", "slow"),
    ]
    with pytest.raises(ValueError, match=r"p.md:1: a skip mark needs a reason"):
        parse_blocks("<!-- doc-test: skip -->\n```bash\nx\n```\n", "p.md")
    with pytest.raises(ValueError, match=r"p.md:1: doc-test mark not right above"):
        parse_blocks("<!-- doc-test: skip (x) -->\ntext\n```toml\nx\n```\n", "p.md")
    with pytest.raises(ValueError, match=r"p.md:1: unreadable doc-test mark"):
        parse_blocks("<!-- doc-test: skipp (x) -->\n```bash\nx\n```\n", "p.md")


def test_every_block_runs_or_is_marked(capsys: pytest.CaptureFixture[str]) -> None:
    counts = collections.Counter((b.kind, b.reason) for b in BLOCKS)
    with capsys.disabled():
        print(f"\ndoc-command blocks: {len(BLOCKS)}, run by default: {counts['run', '']}")
        for (kind, reason), n in sorted(counts.items()):
            if kind != "run":
                print(f"  {n:3d} {kind}{f' ({reason})' if reason else ''}")
    assert sum(counts.values()) == len(BLOCKS) > 0
    assert counts["run", ""] >= 3, "the docs must keep blocks that run here"


def workdir(tmp_path: Path) -> Path:
    """A fresh directory that sees the checkout's inputs; what a block writes stays here."""
    tmp_path.mkdir()
    for name in INPUTS:
        (tmp_path / name).symlink_to(REPO / name, target_is_directory=True)
    return tmp_path


def block_env() -> dict[str, str]:
    venv_bin = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}  # a block starts its own model
    env.update(PATH=f"{venv_bin}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv_bin.parent))
    env["CRF_PRIME_DIR"] = str(REPO)
    return env


def _swebench_offline_claims(cwd: Path) -> None:
    """docs/swebench.md's offline block: vf-validate finds gold valid (and, on verifiers 0.4.0, the untouched repo
    scoring 0: "noop valid"); the scripted no-change rollout scores 0 with a hint naming the failing test. The
    suite's only vf-validate run on the mini fixture (tests/swe rely on it)."""
    (summary_path,) = cwd.glob("outputs/*validate*/summary.json")
    summary = json.loads(summary_path.read_text())
    assert summary["outcomes"]["valid"] == 1 and summary["total"] == 1
    assert summary["checks"]["gold"]["valid"] == 1
    (row,) = [json.loads(line) for line in (summary_path.parent / "results.jsonl").read_text().splitlines()]
    assert row["gold"]["valid"] is True
    if VALIDATE_HAS_NOOP:  # verifiers 0.4.0 also scores the untouched repo
        assert summary["checks"]["noop"]["valid"] == 1
        assert row["noop"]["reward"] == 0.0 and row["noop"]["rewards"] == {"resolved": 0.0}
    (traces,) = [p for p in cwd.glob("outputs/*/traces.jsonl") if "validate" not in p.parent.name]
    (line,) = traces.read_text().splitlines()
    (trace,) = json.loads(line)["traces"]
    assert trace["ok"], trace["errors"]
    assert trace["rewards"]["resolved"]["score"] == 0.0 and trace["metrics"]["f2p_pass"] == 0.0
    assert "tests/test_stats.py::test_median_even" in trace["info"]["hint"]


CLAIMS: dict[tuple[str, str], Callable[[Path], None]] = {
    ("docs/swebench.md", "vf-validate swebench-lite"): _swebench_offline_claims,
}
"""What a block's comments promise, checked on what it left in its directory: (page, text in the block) -> check."""


def _claims_of(block: Block) -> list[Callable[[Path], None]]:
    return [
        check for (page, text), check in CLAIMS.items() if block.where.startswith(f"{page}:") and text in block.code
    ]


def test_every_claim_check_has_one_block() -> None:
    for page, text in CLAIMS:
        assert len([b for b in BLOCKS if b.kind != "skip" and b.where.startswith(f"{page}:") and text in b.code]) == 1


@pytest.mark.parametrize("block", RUNNABLE)
def test_block_runs(block: Block, tmp_path: Path) -> None:
    cwd = workdir(tmp_path / "work")
    log = tmp_path / "output.log"  # a file, not a pipe: a server the block left behind cannot hold the test open
    with open(log, "w") as out:
        proc = subprocess.Popen(
            ["bash", "-e", "-o", "pipefail", "-c", block.code],
            cwd=cwd,
            env=block_env(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=TIMEOUT_S)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # whatever the block started and left running
            proc.wait()
    assert code == 0, f"{block.where} exited {code}\n{block.code}\n{log.read_text()}"
    for check in _claims_of(block):
        check(cwd)


LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s#]+)(?:#[^)\s]*)?\)")
NAMED_PAGE = re.compile(r"`(?P<target>docs/[\w./-]+\.md)`")


def test_pages_the_docs_link_or_name_exist() -> None:
    missing = []
    for page in PAGES:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            targets = [(page.parent / m["target"], m["target"]) for m in LINK.finditer(line)]
            targets += [(REPO / m["target"], m["target"]) for m in NAMED_PAGE.finditer(line)]
            missing += [
                f"{page.relative_to(REPO)}:{number}: {name}"
                for path, name in targets
                if not re.match(r"[a-z]+:", name) and not path.exists()
            ]
    assert missing == []
