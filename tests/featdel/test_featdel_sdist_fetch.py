"""Sdists come straight from PyPI's JSON API (one request, checked against its sha256), pip download only when the
API cannot name one; a loopback server stands in for PyPI."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from crf_prime.featdel import source
from crf_prime.featdel.source import SourceError, download_sdist


def sdist_bytes() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        body = b"def f():\n    return 1\n"
        info = tarfile.TarInfo("demo-1.0/demo.py")
        info.size = len(body)
        t.addfile(info, io.BytesIO(body))
    return buf.getvalue()


class Index:
    """What the loopback PyPI serves and the paths it was asked for."""

    def __init__(self) -> None:
        self.data = sdist_bytes()
        self.sha256 = hashlib.sha256(self.data).hexdigest()
        self.asked: list[str] = []


@pytest.fixture
def index(monkeypatch: pytest.MonkeyPatch) -> Iterator[Index]:
    state = Index()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.asked.append(self.path)
            if self.path == "/pypi/demo/json":
                release = [
                    {"packagetype": "bdist_wheel", "filename": "demo-1.0-py3-none-any.whl", "url": "x", "digests": {}},
                    {
                        "packagetype": "sdist",
                        "filename": "demo-1.0.tar.gz",
                        "url": "../../files/demo-1.0.tar.gz",  # relative, as a mirror serves it
                        "digests": {"sha256": state.sha256},
                    },
                ]
                body = json.dumps({"releases": {"1.0": release}}).encode()
            elif self.path == "/files/demo-1.0.tar.gz":
                body = state.data
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setattr(source, "PYPI_JSON", f"http://127.0.0.1:{server.server_address[1]}/pypi")
    try:
        yield state
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def test_sdist_comes_from_the_json_api_once(index: Index, tmp_path: Path) -> None:
    got = download_sdist("demo", "1.0", tmp_path)
    assert got.name == "demo-1.0.tar.gz" and got.read_bytes() == index.data
    assert download_sdist("demo", "1.0", tmp_path) == got  # cached: no second request
    assert index.asked == ["/pypi/demo/json", "/files/demo-1.0.tar.gz"]


def test_a_file_that_does_not_match_its_sha256_is_refused(index: Index, tmp_path: Path) -> None:
    index.data = index.data + b"tampered"
    with pytest.raises(SourceError, match="does not match the sha256"):
        download_sdist("demo", "1.0", tmp_path)
    assert not (tmp_path / "sdists" / "demo-1.0").exists()


def test_pip_download_when_the_api_does_not_know_the_release(
    index: Index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def pip_download(name: str, version: str, into: Path) -> None:
        calls.append((name, version))
        (into / f"{name}-{version}.tar.gz").write_bytes(b"from pip")

    monkeypatch.setattr(source, "_pip_download", pip_download)
    assert download_sdist("demo", "2.0", tmp_path).read_bytes() == b"from pip"  # no such release in the JSON
    assert download_sdist("other", "1.0", tmp_path).read_bytes() == b"from pip"  # 404
    assert calls == [("demo", "2.0"), ("other", "1.0")]
