"""The relay's settings: ``relay serve`` (:class:`ServeConfig`), ``relay pull`` (:class:`PullConfig`, which a
:class:`crf_prime.relay.node.RelayNode` is built from) and the admin gate (:class:`GateConfig`); every default and
bound is declared here once, and checked when the config is parsed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field
from pydantic_config import BaseConfig

Port = Annotated[int, Field(ge=0, le=65535)]


class ServeConfig(BaseConfig):
    broadcast_dir: Path
    """prime-rl's ``<output_dir>/<run.name>/broadcasts``."""
    data_dir: Path
    """Where shards and the index are kept and served; on the broadcast dir's filesystem, publishing is hard links."""
    host: str = "127.0.0.1"
    """Bind address (``0.0.0.0`` for all interfaces)."""
    port: Port = 8765
    """HTTP port (0 picks a free one)."""
    keep: Annotated[int, Field(ge=1)] = 3
    """Published steps kept downloadable."""
    shard_size_mb: Annotated[float, Field(gt=0)] = 16.0
    """Shard size in MB; servers that nodes fail over between need the same one."""
    poll: Annotated[float, Field(gt=0)] = 0.5
    """Seconds between scans of the broadcast dir."""
    ready_file: Path | None = None
    """Write the server URL here once it listens."""


class GateConfig(BaseModel):
    """The admin gate in front of this node's inference engine: it holds a weight update until the step is here."""

    upstream: str
    """The vLLM engine's URL, ``http://127.0.0.1:8100`` with prime-rl's default ``inference.backend_port``. The
    engine, not the router (``server.port``, 8000): prime-rl sends admin calls to the engines' backend port too."""
    host: str = "127.0.0.1"
    """Gate bind address (``0.0.0.0`` for the orchestrator on another host)."""
    port: Port = 8190
    """Gate port: the port in ``orchestrator.client.admin_base_url`` (configs/multinode/decentralized.toml)."""
    wait: Annotated[float, Field(gt=0)] = 600.0
    """Seconds a held update waits for its step before the gate answers 504."""


def normalize_server(url: str) -> str:
    """``http(s)://host:port`` without a trailing slash; anything else is rejected with the offending value."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")) or len(url.split("://", 1)[1]) == 0:
        raise ValueError(f"relay server {url!r} must be an http:// or https:// URL")
    return url


class PullConfig(BaseConfig):
    """``crf-prime relay pull``, and what a :class:`crf_prime.relay.node.RelayNode` is built from."""

    server: Annotated[list[Annotated[str, AfterValidator(normalize_server)]], Field(min_length=1)]
    """Relay server URLs, tried in order with failover (``--server http://a:8765 http://b:8765``)."""
    broadcast_dir: Path
    """Local broadcast dir; the same absolute path as the orchestrator's ``<output_dir>/<run.name>/broadcasts``."""
    keep: Annotated[int, Field(ge=1)] = 2
    """Complete steps kept locally."""
    workers: Annotated[int, Field(ge=1)] = 4
    """Concurrent shard downloads."""
    attempts: Annotated[int, Field(ge=1)] = 3
    """Passes over all servers per shard."""
    timeout: Annotated[float, Field(gt=0)] = 30.0
    """HTTP timeout per request, in seconds."""
    poll: Annotated[float, Field(gt=0)] = 2.0
    """Seconds one long-poll on the servers' index waits (a publish answers at once)."""
    once: bool = False
    """Pull the newest step once and exit (4 when it fails)."""
    gate: GateConfig | None = None
    """Also run the admin gate (``--gate.upstream URL``); point ``orchestrator.client.admin_base_url`` at it."""
