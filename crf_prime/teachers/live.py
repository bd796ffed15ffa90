"""Live mode: the teacher pool as named, detached Ray actors that other processes attach to.

prime-rl runs each environment in its own env-server process; with live mode they all talk to one pool: one actor
per teacher (``<name>:teacher:<teacher>``) and one ledger actor (``<name>:ledger``) that owns the journal and the
budget, so every process shares one spend cap (reservations included) and one journal, and no question is paid
for twice, whichever process asks it.
``serve`` is called once (it is idempotent: existing actors are reused); ``attach`` from any process connected to the
same Ray cluster; ``shutdown`` kills the actors (the journal stays on disk).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crf_prime.errors import InfraError
from crf_prime.extras import require
from crf_prime.records.journal import JournalRecord
from crf_prime.teachers.backends import RayBackend, actor_name
from crf_prime.teachers.config import PoolConfig
from crf_prime.teachers.ledger import Admission, Ledger
from crf_prime.teachers.money import Ask
from crf_prime.teachers.pool import TeacherPool

DEFAULT_NAMESPACE = "crf-prime"


class LedgerActor(Ledger):
    """The ledger inside a Ray actor; it also hands the pool config to attaching processes."""

    def __init__(self, journal_path: str, config: dict[str, Any]) -> None:
        self._config = PoolConfig.model_validate(config)
        super().__init__(journal_path, self._config.budget, self._config.pool)

    async def pool_config(self) -> dict[str, Any]:
        return self._config.model_dump()


class RemoteLedger:
    """Driver-side proxy with the ledger's coroutine interface (the caps and the reservations live in the actor)."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    async def admit(self, ask: Ask, *, sent: bool = False) -> Admission:
        return await self.handle.admit.remote(ask, sent=sent)

    async def mark_sent(self, question: str) -> None:
        await self.handle.mark_sent.remote(question)

    async def mark_refused(self, question: str) -> None:
        await self.handle.mark_refused.remote(question)

    async def commit(self, ask: Ask, record: JournalRecord) -> JournalRecord:
        return await self.handle.commit.remote(ask, record)

    async def release(self, ask: Ask) -> None:
        await self.handle.release.remote(ask)

    async def resolve(self, generation_id: str, cost_usd: float, via: str = "generation") -> bool:
        return await self.handle.resolve.remote(generation_id, cost_usd, via)

    async def lookups(self) -> list[tuple[str, str]]:
        return await self.handle.lookups.remote()

    async def snapshot(self) -> dict:
        return await self.handle.snapshot.remote()


def _ray() -> Any:
    ray = require("ray", "ray")
    if not ray.is_initialized():
        raise InfraError("live mode needs a Ray connection: call ray.init(address=...) first")
    return ray


def serve(
    config: PoolConfig,
    journal_path: str | Path,
    *,
    name: str = "crf-teachers",
    namespace: str = DEFAULT_NAMESPACE,
    api_keys: dict[str, str] | None = None,
) -> TeacherPool:
    """Start (or reuse) the detached actors of a live pool and return a pool attached to them."""
    ray = _ray()
    ray.remote(LedgerActor).options(
        name=f"{name}:ledger",
        namespace=namespace,
        lifetime="detached",
        get_if_exists=True,
        num_cpus=0,
        max_restarts=-1,  # a restarted ledger re-reads the fsynced journal
        max_concurrency=1000,
    ).remote(str(Path(journal_path).resolve()), config.model_dump(include=set(PoolConfig.model_fields)))
    RayBackend(config.teachers, api_keys=api_keys, name_prefix=name, detached=True, namespace=namespace)
    return attach(name, namespace=namespace)


def attach(name: str = "crf-teachers", *, namespace: str = DEFAULT_NAMESPACE) -> TeacherPool:
    """A pool over an already served live pool (from any process connected to the same Ray cluster)."""
    ray = _ray()
    try:
        ledger = ray.get_actor(f"{name}:ledger", namespace=namespace)
    except ValueError as e:
        raise InfraError(f"no live teacher pool named {name!r} in Ray namespace {namespace!r}: serve it first") from e
    config = PoolConfig.model_validate(ray.get(ledger.pool_config.remote(), timeout=60))
    actors = {t.name: ray.get_actor(actor_name(name, t.name), namespace=namespace) for t in config.teachers}
    backend = RayBackend(config.teachers, actors=actors)
    return TeacherPool(config, backend, RemoteLedger(ledger))


def shutdown(name: str = "crf-teachers", *, namespace: str = DEFAULT_NAMESPACE) -> int:
    """Kill the live pool's actors; returns how many were killed."""
    ray = _ray()
    killed = 0
    try:
        ledger = ray.get_actor(f"{name}:ledger", namespace=namespace)
    except ValueError:
        return 0
    config = PoolConfig.model_validate(ray.get(ledger.pool_config.remote(), timeout=60))
    for t in config.teachers:
        try:
            ray.kill(ray.get_actor(actor_name(name, t.name), namespace=namespace), no_restart=True)
            killed += 1
        except ValueError:
            pass
    ray.kill(ledger, no_restart=True)
    return killed + 1
