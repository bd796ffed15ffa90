"""``crf-prime loopback serve``: the scripted OpenAI-compatible stand-in as a command, for offline runs of the docs.

A teacher pool, vf-eval or a harness can then run end to end on a CPU box against ``http://127.0.0.1:PORT/v1``.
With ``-- CMD ARGS`` the server lives exactly as long as the command, which finds its URL in ``OPENAI_BASE_URL``.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
from pathlib import Path
from typing import Annotated

from pydantic import Field, ValidationError
from pydantic_config import BaseConfig

from crf_prime.errors import InfraError, InputError
from crf_prime.loopback.server import Billing, LoopbackOpenAI, Reply


class ServeConfig(BaseConfig):
    host: str = "127.0.0.1"
    """Bind address."""
    port: Annotated[int, Field(ge=0, le=65535)] = 0
    """TCP port (0 picks a free one; the URL is printed and written to ``ready_file``)."""
    replies: Path | None = None
    """JSONL file, one reply per line, played in request order (fields of ``crf_prime.loopback.Reply``:
    ``content``, ``tool_calls``, ``reasoning``, ``status``, ``delay_s``, ...). Without it every request gets
    ``content``."""
    content: str = "ok"
    """The answer to every request when no ``replies`` file is given."""
    cycle: bool = False
    """Start the replies over after the last one (otherwise a request past the end gets HTTP 500)."""
    model: str = "scripted"
    """Model id listed by ``GET /v1/models``."""
    billing: Billing | None = None
    """Bill like a provider (``--billing.price-in-per-mtok 3``): each answer reports ``usage.cost`` in USD."""
    ready_file: Path | None = None
    """Write the base URL (``http://HOST:PORT/v1``) here once the server listens."""
    argv: list[str] = []
    """``-- CMD ARGS``: run CMD with ``OPENAI_BASE_URL`` set to the server, stop the server when it exits and exit
    with its code. Without it the server runs until SIGINT or SIGTERM."""


def read_replies(path: Path) -> list[Reply]:
    """The replies of a JSONL file; a bad line is named by ``file:line``."""
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise InputError.field("replies", f"cannot read {path}: {e.strerror or e}") from e
    replies = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                replies.append(Reply.model_validate_json(line))
            except ValidationError as e:
                raise InputError.at(path, number, f"not a reply: {e.errors()[0]['msg']}") from e
    if not replies:
        raise InputError.at(path, None, "no replies")
    return replies


def script(config: ServeConfig):
    """The server's script: the replies file in order (cycled on request), or ``content`` for every request."""
    if config.replies is None:
        reply = Reply(content=config.content)
        return lambda body: reply
    replies = read_replies(config.replies)
    if not config.cycle:
        return replies
    count = itertools.count()
    return lambda body: replies[next(count) % len(replies)]


def serve(config: ServeConfig) -> int:
    """Serve scripted OpenAI-compatible chat completions on loopback (an offline teacher or policy server)."""
    server = LoopbackOpenAI(
        script(config), model=config.model, host=config.host, port=config.port, billing=config.billing
    )
    try:
        server.start()
    except OSError as e:  # port in use, address not available
        raise InfraError(f"cannot serve on {config.host}:{config.port}: {e.strerror or e}") from e
    try:
        if config.ready_file is not None:
            tmp = config.ready_file.with_name(config.ready_file.name + ".tmp")
            tmp.write_text(server.base_url + "\n")
            tmp.replace(config.ready_file)
        print(f"loopback serving {server.base_url}", flush=True)
        if config.argv:
            return _run(config.argv, server.base_url)
        _wait_for_signal()
        return 0  # pragma: no cover (only a signal ends the wait)
    finally:
        server.stop()


def _run(argv: list[str], base_url: str) -> int:
    env = {**os.environ, "OPENAI_BASE_URL": base_url}
    env.setdefault("OPENAI_API_KEY", "loopback")
    try:
        return subprocess.run(argv, env=env, check=False).returncode
    except OSError as e:
        raise InputError.field("argv", f"cannot run {argv[0]}: {e.strerror or e}") from e


def _wait_for_signal() -> None:
    """Sleep until a signal: the CLI's handler turns SIGTERM / SIGINT into KeyboardInterrupt, so the server stops in
    ``serve``'s ``finally`` and the command exits 130 (interrupted, docs/cli.md) like every other."""

    while True:
        signal.pause()
