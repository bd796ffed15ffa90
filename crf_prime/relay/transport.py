"""The relay's HTTP transport: a threaded stdlib server with ranged ``sendfile`` GETs and a long-polled index.

Routes (GET only):

- ``/crf-relay.json[?after=<step>&wait=<seconds>]``: the index file. With ``after``, the answer is held until a step newer
  than ``after`` is advertised or ``wait`` seconds pass (at most :data:`MAX_WAIT_S`), so nodes learn of a new step
  the moment it is published without polling.
- ``/v<k>/<path>`` with ``Range: bytes=<a>-<b>``: bytes of a published file, sent with ``sendfile(2)`` (zero
  copy from the page cache to the socket).

HTTP/1.1 keep-alive, one thread per connection; nothing is served outside ``v<k>/`` folders and the index.
"""

from __future__ import annotations

import contextlib
import fcntl
import http.client
import logging
import os
import re
import select
import socket
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from crf_prime.relay.manifest import INDEX_NAME, RelayIndex, safe_relpath

log = logging.getLogger(__name__)

MAX_WAIT_S = 60.0
"""Longest a long-poll on the index is held (in seconds)."""

RequestHook = Callable[[str, str, int, int], None]
"""Called before a file range is sent: (version, path, offset, length)."""

_FILE_ROUTE = re.compile(r"^/(v\d+)/(.+)$")
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


class RelayHTTPServer:
    """Serve ``root`` (a relay data directory) and the in-memory index on ``host:port`` from a daemon thread."""

    def __init__(self, root: Path, host: str, port: int, *, on_request: RequestHook | None = None) -> None:
        self.root = Path(root)
        self.on_request = on_request
        self._cond = threading.Condition()
        self._newest = -1
        self._closed = False
        server_cls = _IPv6Server if ":" in host else _Server
        self._httpd = server_cls((host, port), _handler(self))
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True, name="relay-http")
        self._thread.start()

    def set_index(self, index: RelayIndex) -> None:
        """Note that ``index`` was written to ``<root>/crf-relay.json`` and wake every long-poll it satisfies."""
        newest = index.newest()
        with self._cond:
            self._newest = newest.step if newest else -1
            self._cond.notify_all()

    def index_after(self, after: int | None, wait: float) -> bytes:
        """The index file's bytes, once it advertises a step newer than ``after`` or ``wait`` seconds have passed."""
        with self._cond:
            if after is not None:
                self._cond.wait_for(lambda: self._newest > after or self._closed, timeout=min(wait, MAX_WAIT_S))
        return (self.root / INDEX_NAME).read_bytes()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._httpd.shutdown()
        self._httpd.server_close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """A node that goes away mid-transfer is routine (it fails over or retries): log it, don't print a trace."""
        log.debug("relay http: request from %s ended early", client_address, exc_info=True)


class _IPv6Server(_Server):
    address_family = socket.AF_INET6


def _handler(server: RelayHTTPServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # the small head of each answer must not wait for the node's delayed ACK

        def log_message(self, format: str, *args: object) -> None:
            log.debug("relay http %s - %s", self.address_string(), format % args)

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            if parts.path == f"/{INDEX_NAME}":
                self._send_index(parse_qs(parts.query))
                return
            match = _FILE_ROUTE.match(parts.path)
            if match is None:
                self._error(404, "not found")
                return
            version, rel = match.group(1), unquote(match.group(2))
            try:
                safe_relpath(rel)
            except ValueError:
                self._error(404, "not found")
                return
            self._send_file(version, rel)

        def _send_index(self, query: dict[str, list[str]]) -> None:
            try:
                after = int(query["after"][0]) if "after" in query else None
                wait = float(query.get("wait", ["0"])[0])
            except ValueError:
                self._error(400, "after must be an integer step and wait a number of seconds")
                return
            body = server.index_after(after, wait)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _send_file(self, version: str, rel: str) -> None:
            try:
                handle = open(server.root / version / rel, "rb")  # noqa: SIM115 - closed below
            except OSError:
                self._error(404, "not found")
                return
            with handle:
                size = handle.seek(0, 2)
                start, length, status = 0, size, 200
                header = self.headers.get("Range")
                if header is not None:
                    match = _RANGE.match(header.strip())
                    if match is None or int(match.group(1)) > size or (size and int(match.group(1)) == size):
                        self._error(416, f"bad range {header!r} for {size} bytes")
                        return
                    start = int(match.group(1))
                    end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
                    length, status = max(0, end - start + 1), 206
                if server.on_request is not None:
                    server.on_request(version, rel, start, length)
                self.send_response(status)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(length))
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{start + length - 1}/{size}")
                self.end_headers()
                if length:
                    self.connection.sendfile(handle, start, length)

        def _error(self, status: int, message: str) -> None:
            body = message.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


class ServerConnection:
    """A keep-alive HTTP/1.1 connection to one relay server (one per thread; not thread-safe).

    Small bodies (the index) are read into memory; a shard's byte range goes straight from the socket into its
    file with ``splice(2)`` (no copy through Python) where the OS has it, and through one reused buffer otherwise.
    """

    def __init__(self, base_url: str, timeout: float) -> None:
        parts = urlsplit(base_url)
        self.base_url = base_url
        self.https = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.https else 80)
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._pending = b""
        self._pipe: tuple[int, int] | None = None

    def _connect(self) -> socket.socket:
        if self._sock is None:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.https:
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self.host)
            self._sock, self._pending = sock, b""
        return self._sock

    def request(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, int]:
        """Send a GET; return (status, Content-Length). The caller then reads exactly that many body bytes.

        A kept-alive connection the server has dropped is reopened once.
        """
        lines = [f"GET {path} HTTP/1.1", f"Host: {self.host}:{self.port}", "Accept-Encoding: identity"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        payload = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        for first in (True, False):
            fresh = self._sock is None
            try:
                self._connect().sendall(payload)
                return self._read_head()
            except (ConnectionError, http.client.RemoteDisconnected):
                self.close()
                if fresh or not first:
                    raise
        raise AssertionError("unreachable")

    def _read_head(self) -> tuple[int, int]:
        assert self._sock is not None
        data = self._pending
        while b"\r\n\r\n" not in data:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise http.client.RemoteDisconnected("server closed the connection before answering")
            data += chunk
            if len(data) > 65536:
                raise http.client.HTTPException("response head too long")
        head, _, self._pending = data.partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        try:
            status = int(status_line.split()[1])
            fields = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
            length = int(fields["content-length"])
        except (IndexError, ValueError, KeyError) as e:
            raise http.client.HTTPException(f"malformed response head {status_line!r}: {e}") from e
        return status, length

    def read_body(self, length: int) -> bytes:
        """Read a small body of ``length`` bytes."""
        assert self._sock is not None
        data = self._pending
        while len(data) < length:
            chunk = self._sock.recv(min(1 << 20, length - len(data)))
            if not chunk:
                raise http.client.IncompleteRead(data, length - len(data))
            data += chunk
        body, self._pending = data[:length], data[length:]
        return body

    def read_into_file(self, length: int, fd: int, offset: int, stop: threading.Event | None = None) -> None:
        """Write the next ``length`` body bytes into ``fd`` at ``offset``."""
        assert self._sock is not None
        head = self._pending[:length]
        self._pending = self._pending[length:]
        if head:
            _pwrite_all(fd, memoryview(head), offset)
        done = len(head)
        if done < length and not self.https and hasattr(os, "splice"):
            self._splice(length - done, fd, offset + done, stop)
            return
        buffer = memoryview(bytearray(min(_PIECE, length - done) or 1))
        while done < length:
            if stop is not None and stop.is_set():
                raise ConnectionAbortedError("transfer stopped")
            n = self._sock.recv_into(buffer[: min(len(buffer), length - done)])
            if not n:
                raise http.client.IncompleteRead(b"", length - done)
            _pwrite_all(fd, buffer[:n], offset + done)
            done += n

    def _splice(self, length: int, fd: int, offset: int, stop: threading.Event | None) -> None:
        assert self._sock is not None
        if self._pipe is None:
            self._pipe = os.pipe()
            with contextlib.suppress(OSError):  # a bigger pipe means fewer system calls; the default 64 KiB works too
                fcntl.fcntl(self._pipe[1], _F_SETPIPE_SZ, _PIECE)
        read_end, write_end = self._pipe
        sock = self._sock
        sock_fd = sock.fileno()
        done, low = 0, 1
        try:
            while done < length:
                if stop is not None and stop.is_set():
                    raise ConnectionAbortedError("transfer stopped")
                if low != min(_PIECE, length - done):  # wake up once per piece, not once per packet
                    low = min(_PIECE, length - done)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, low)
                if not select.select([sock_fd], [], [], self.timeout)[0]:
                    raise TimeoutError(f"no data for {self.timeout} s")
                try:
                    moved = os.splice(sock_fd, write_end, min(_PIECE, length - done), flags=_SPLICE_F_NONBLOCK)
                except BlockingIOError:
                    continue
                if not moved:
                    raise http.client.IncompleteRead(b"", length - done)
                while moved:
                    written = os.splice(read_end, fd, moved, offset_dst=offset + done)
                    done, moved = done + written, moved - written
        finally:
            if low != 1:  # the next response head is short
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._pipe is not None:
            for end in self._pipe:
                os.close(end)
            self._pipe = None


_PIECE = 1 << 20
"""Bytes moved per system call: the largest pipe an unprivileged process may have (``/proc/sys/fs/pipe-max-size``)."""
_F_SETPIPE_SZ = 1031
_SPLICE_F_NONBLOCK = 2


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    while data:
        written = os.pwrite(fd, data, offset)
        data, offset = data[written:], offset + written
