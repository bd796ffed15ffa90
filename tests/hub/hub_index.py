"""A PEP 503 simple index on 127.0.0.1 serving locally built wheels (what hub.primeintellect.ai/<owner>/simple/ is)."""

from __future__ import annotations

import functools
import html
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENVIRONMENTS = REPO / "environments"
OURS = ("crf-prime", "feature-deletion", "swebench-lite", "trace-replay")
"""Distributions this repo builds; everything else a fresh venv needs is a third-party dependency."""


def normalize(name: str) -> str:
    """PEP 503 project-name normalization."""
    return re.sub(r"[-_.]+", "-", name).lower()


def env_projects() -> dict[str, Path]:
    """Distribution name -> project dir of every environments/*/pyproject.toml."""
    out = {}
    for pyproject in sorted(ENVIRONMENTS.glob("*/pyproject.toml")):
        out[tomllib.loads(pyproject.read_text())["project"]["name"]] = pyproject.parent
    return out


def build_wheel(project: Path, out_dir: Path) -> Path:
    """One wheel with the current interpreter's hatchling (no isolated build env, so no index is needed)."""
    before = set(out_dir.glob("*.whl"))
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out_dir), str(project)],
        check=True,
        capture_output=True,
        text=True,
    )
    (wheel,) = set(out_dir.glob("*.whl")) - before
    return wheel


def write_simple_index(wheels: list[Path], root: Path) -> None:
    """root/simple/<project>/index.html linking each wheel (PEP 503), root/simple/index.html listing projects."""
    simple = root / "simple"
    projects: dict[str, list[Path]] = {}
    for wheel in wheels:
        projects.setdefault(normalize(wheel.name.split("-")[0]), []).append(wheel)
    for project, files in projects.items():
        d = simple / project
        d.mkdir(parents=True, exist_ok=True)
        links = []
        for f in files:
            shutil.copy2(f, d / f.name)
            links.append(f'<a href="{html.escape(f.name)}">{html.escape(f.name)}</a><br/>')
        (d / "index.html").write_text("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    listing = "".join(f'<a href="{p}/">{p}</a><br/>\n' for p in sorted(projects))
    (simple / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{listing}</body></html>\n")


class LoopbackIndex:
    """Serve a directory over HTTP on 127.0.0.1 (ephemeral port) from a background thread."""

    def __init__(self, root: Path) -> None:
        handler = functools.partial(_QuietHandler, directory=str(root))
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.requests = _QuietHandler.paths

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/simple/"

    def __enter__(self) -> LoopbackIndex:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


class _QuietHandler(SimpleHTTPRequestHandler):
    paths: list[str] = []

    def log_message(self, format: str, *args: object) -> None:
        _QuietHandler.paths.append(self.path)


def third_party_overlay(site_packages: Path, overlay: Path) -> None:
    """Symlink every entry of ``site_packages`` except this repo's own distributions (and their editable hooks) into
    ``overlay``, so a fresh venv sees the already-installed third-party packages but must get ours from the index."""
    ours = tuple(normalize(n).replace("-", "_") for n in OURS)
    overlay.mkdir(parents=True)
    for entry in site_packages.iterdir():
        key = normalize(entry.name).replace("-", "_")
        if key.startswith(ours) or key.startswith(tuple(f"_editable_impl_{o}" for o in ours)):
            continue
        if entry.name in {"__pycache__"}:
            continue
        (overlay / entry.name).symlink_to(entry)
