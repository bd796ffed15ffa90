"""Where teacher clients run: in this event loop (asyncio) or in one Ray async actor per teacher.

Both backends expose ``await backend.ask(teacher_name, payload) -> JournalRecord`` and never raise for API errors.
The Ray backend creates each actor with ``num_cpus=0`` (it only waits on HTTP), a high ``max_concurrency`` (the
teacher's own semaphore inside the actor is the real cap) and ``max_restarts`` so a dead actor process comes back
with a fresh client. A call whose actor died under it may have reached the provider: it comes back as a failed,
possibly paid record (booked at its reservation, re-asked only with ``--pool.resend-lost``), never silently re-sent
-- unless it carries an idempotency key (the teacher's ``idempotency_header``): then it is re-sent with that key
once the actor is back, and the provider answers it without a second charge. HTTP retries stay in the client. After
a death, the teacher admits nothing (:meth:`RayBackend.ready`) and submits nothing until its restarted actor has
answered a health call (a call submitted to an actor that is not there would be one more possibly paid failure);
an actor that does not come back raises :class:`ActorGone`, an infrastructure error. Ray is imported lazily (extra
``ray``).

Only the asyncio backend ``reports_wire``: its client runs in the pool's task, so the pool can mark a call "sent"
at the moment its request is about to be written. A Ray actor cannot reach the driver's ledger, so a Ray call
counts as sent from its admission on (a crash books it at its reservation even if the actor had not sent it yet).

Both backends ``queue``: each teacher's client caps its concurrency itself, so the pool admits a few calls per
teacher beyond ``max_concurrency`` (``PoolOptions.queue``) and they wait for a slot in the client (in the actor, on
Ray). When a request finishes, the next one starts at once: its admission (the durable call-log row that must
precede it) and, on Ray, the driver-actor round trip were spent while it waited, not while a provider slot sat idle.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from typing import Any, Protocol

from crf_prime.errors import InfraError
from crf_prime.rayinit import init_ray
from crf_prime.records.journal import JournalRecord
from crf_prime.records.models import TeacherRequest
from crf_prime.teachers.client import WIRE, TeacherClient
from crf_prime.teachers.config import TeacherConfig


class Backend(Protocol):
    teachers: dict[str, TeacherConfig]

    async def ask(self, teacher: str, payload: Any, key: str = "") -> JournalRecord:
        """The teacher's answer; ``key``: the idempotency key, passed only by a pool whose backend does not report
        the wire (``reports_wire`` false: Ray); one that does reads it from the ledger's wire hook."""
        ...

    async def lookup(self, teacher: str, generation_id: str) -> float | None:
        """What the teacher's provider charged for a generation (None: it cannot say, yet)."""
        ...

    def prepare(self, request: TeacherRequest) -> Any:
        """What to pass to ``ask`` for this request (Ray: the request, or one object-store ref shared by all
        teachers)."""
        ...

    async def close(self) -> None: ...


class AsyncioBackend:
    """Every teacher client in the caller's event loop."""

    reports_wire = True
    queues = True
    """Each client caps its teacher's concurrency: calls admitted beyond it wait for a slot in the client."""

    def __init__(self, teachers: Sequence[TeacherConfig], *, api_keys: dict[str, str] | None = None) -> None:
        keys = api_keys or {}
        self.teachers = {t.name: t for t in teachers}
        self._clients = {t.name: TeacherClient(t, api_key=keys.get(t.name)) for t in teachers}

    def prepare(self, request: TeacherRequest) -> TeacherRequest:
        return request

    async def ask(self, teacher: str, payload: TeacherRequest, key: str = "") -> JournalRecord:
        return await self._clients[teacher].ask(payload)  # key: never passed (reports_wire), see Backend.ask

    async def lookup(self, teacher: str, generation_id: str) -> float | None:
        return await self._clients[teacher].lookup_cost(generation_id)

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self._clients.values()))


class _KeyWire:
    """The wire of a call in an actor: carries the call's idempotency key to the client; the driver's ledger counts
    a Ray call as sent from its admission, so there is nothing to tell it."""

    __slots__ = ("key",)

    def __init__(self, key: str) -> None:
        self.key = key

    async def sent(self) -> None:
        return None

    async def refused(self) -> None:
        return None


class TeacherActor:
    """Body of a Ray teacher actor: a :class:`TeacherClient` built inside the actor process."""

    def __init__(self, config: dict[str, Any], api_key: str | None = None) -> None:
        self.config = TeacherConfig.model_validate(config)
        self.client = TeacherClient(self.config, api_key=api_key)

    async def ask(self, request: TeacherRequest, key: str = "") -> JournalRecord:
        """Ask the teacher; ``key``: the idempotency key its requests carry (the teacher's ``idempotency_header``)."""
        token = WIRE.set(_KeyWire(key)) if key else None
        try:
            return await self.client.ask(request)
        finally:
            if token is not None:
                WIRE.reset(token)

    async def lookup_cost(self, generation_id: str) -> float | None:
        return await self.client.lookup_cost(generation_id)

    async def pid(self) -> int:
        return os.getpid()


INLINE_LIMIT = 100 * 1024
"""Ray's default ``max_direct_call_object_size`` (bytes): task arguments below it travel inline in the task."""


def approx_size(request: TeacherRequest) -> int:
    """Rough serialised size of a request in bytes (characters of its messages and tools): cheap, no
    serialisation."""
    return sum(len(str(m)) for m in request.messages) + sum(len(str(t)) for t in request.tools)


def actor_name(prefix: str, teacher: str) -> str:
    return f"{prefix}:teacher:{teacher}"


RESTART_WAIT_S = 120.0
"""How long a teacher's calls wait for its actor to come back after a death before :class:`ActorGone`."""


class NotSubmitted(InfraError):
    """The backend gave up on a call before submitting it: nothing of it can have reached the provider."""


class ActorGone(NotSubmitted):
    """A teacher's actor died and did not come back: the call was never submitted."""


class ActorGoneWithCall(InfraError):
    """A teacher's actor died under a call (sent with an idempotency key) and did not come back to have it re-sent:
    the call may have been paid."""


class RayBackend:
    """One async Ray actor per teacher; a call lost to an actor's death is a possibly paid failure."""

    reports_wire = False
    queues = True
    """Each actor's client caps its teacher's concurrency: calls admitted beyond it wait in the actor."""

    def __init__(
        self,
        teachers: Sequence[TeacherConfig],
        *,
        api_keys: dict[str, str] | None = None,
        max_restarts: int = 3,
        name_prefix: str | None = None,
        detached: bool = False,
        namespace: str | None = None,
        actors: dict[str, Any] | None = None,
    ) -> None:

        self._ray = init_ray(include_dashboard=False, log_to_driver=False, namespace=namespace)
        self.teachers = {t.name: t for t in teachers}
        self.actor_deaths = 0
        self.resent = 0
        """Calls re-sent with their idempotency key after their actor died under them."""
        self._max_restarts = max_restarts if actors is None else None
        self._deaths: dict[str, int] = {}
        """Per teacher: the deaths seen (each one a restart, while restarts last)."""
        self._back: dict[str, asyncio.Future[None]] = {}
        """Per teacher, after a death: done once its restarted actor answered (or with :class:`ActorGone`)."""
        if actors is not None:  # attach to existing (live-mode) actors
            self._actors = dict(actors)
            return
        keys = api_keys if api_keys is not None else {t.name: t.api_key() for t in teachers}
        remote_cls = self._ray.remote(TeacherActor)
        self._actors = {}
        for t in teachers:
            opts: dict[str, Any] = {
                "num_cpus": 0,
                "max_restarts": max_restarts,
                "max_task_retries": 0,
                "max_concurrency": max(64, 4 * t.max_concurrency),
            }
            if name_prefix is not None:
                opts.update(name=actor_name(name_prefix, t.name), get_if_exists=True)
                if namespace is not None:
                    opts["namespace"] = namespace
            if detached:
                opts["lifetime"] = "detached"
            self._actors[t.name] = remote_cls.options(**opts).remote(t.model_dump(), keys.get(t.name))

    @property
    def actors(self) -> dict[str, Any]:
        return dict(self._actors)

    def prepare(self, request: TeacherRequest) -> Any:
        """The request itself when it is small (Ray inlines it in each task: no object-store put on the event loop,
        no fetch in the actor; ~half the round trip), else one object-store ref shared by every teacher's call."""
        if approx_size(request) < INLINE_LIMIT:
            return request
        return self._ray.put(request)

    async def ask(self, teacher: str, payload: Any, key: str = "") -> JournalRecord:
        """Submit one call to the teacher's actor. A call with an idempotency ``key`` whose actor died under it is
        re-sent with that key once the actor is back (the provider answers it without a second charge); one without
        a key comes back as a failed, possibly paid record."""
        start = time.perf_counter()
        submitted = False
        while True:
            back = self._back.get(teacher)
            if back is not None:  # the actor died: submit only once it is back (a done future returns at once)
                try:
                    await asyncio.shield(back)
                except ActorGone as e:
                    if submitted:
                        raise ActorGoneWithCall(str(e)) from e
                    raise
            try:
                submitted = True
                return await self._actors[teacher].ask.remote(payload, key)
            except self._ray.exceptions.RayActorError as e:  # the process died with the call: it may have been sent
                self.actor_deaths += 1
                error = e
                if self._back.get(teacher) is back:  # the first failure seen of this death: from now on, wait for it
                    self._back[teacher] = back = asyncio.ensure_future(self._come_back(teacher))
                    back.add_done_callback(lambda f: f.cancelled() or f.exception())  # read by the calls that wait
                if not key:
                    break
                self.resent += 1
        cfg = self.teachers[teacher]
        request = await payload if isinstance(payload, self._ray.ObjectRef) else payload
        return JournalRecord(
            state_id=request.key,
            teacher=teacher,
            model=cfg.model,
            model_family=cfg.model_family,
            ok=False,
            action=None,
            error=f"teacher actor died during the call (possibly paid): {type(error).__name__}: {error}"[:2000],
            error_type="actor_died",
            input_tokens=0,
            output_tokens=0,
            cost_usd=0.0,
            possibly_paid=True,
            latency_s=time.perf_counter() - start,
            attempt=1,
            ts=time.time(),
            trace_id=request.trace_id,
        )

    async def ready(self, teacher: str) -> None:
        """Return once the teacher's actor takes calls: at once, or, after a death, once the restarted actor has
        answered its health call (:class:`ActorGone` when it does not come back). The pool admits the teacher's
        calls only then: a Ray call counts as sent from its admission, so one admitted while its actor restarts
        would be booked as possibly paid by a crash of the driver although it never left."""
        back = self._back.get(teacher)
        if back is not None:
            await asyncio.shield(back)

    async def lookup(self, teacher: str, generation_id: str) -> float | None:
        """The generation lookup, in the teacher's actor (its client and key); None when the actor is down."""
        back = self._back.get(teacher)
        if back is not None:
            await asyncio.shield(back)
        try:
            return await self._actors[teacher].lookup_cost.remote(generation_id)
        except self._ray.exceptions.RayActorError:
            return None

    async def _come_back(self, teacher: str) -> None:
        """Return once the teacher's restarted actor answers; :class:`ActorGone` when its restarts are spent or it
        is not back within :data:`RESTART_WAIT_S`. Calls submitted while it restarts wait in Ray for it; a call
        that fails to reach it (unavailable, not restarted yet) is retried here, never a teacher call."""
        deaths = self._deaths[teacher] = self._deaths.get(teacher, 0) + 1
        if self._max_restarts is not None and deaths > self._max_restarts:
            raise ActorGone(
                f"teacher {teacher}: its Ray actor died {deaths} times; max_restarts is {self._max_restarts}"
            )
        deadline = time.monotonic() + RESTART_WAIT_S
        while True:
            try:
                await self._actors[teacher].pid.remote()
                return
            except self._ray.exceptions.RayActorError as e:
                if time.monotonic() > deadline:
                    raise ActorGone(
                        f"teacher {teacher}: its Ray actor died and was not back within {RESTART_WAIT_S:g} s: {e}"
                    ) from e
                await asyncio.sleep(0.1)  # polling Ray's actor state; no test waits on this

    async def pids(self) -> dict[str, int]:
        return {name: await a.pid.remote() for name, a in self._actors.items()}

    async def close(self, *, kill: bool = True) -> None:
        if kill:
            for a in self._actors.values():
                self._ray.kill(a, no_restart=True)
