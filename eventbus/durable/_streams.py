"""``RedisStreams``: durable events across processes, from a transactional outbox through
Redis Streams to one consumer group per listener.

Publishing writes an outbox row in the caller's transaction; the relay of any process adds
committed rows to the event's stream; each durable listener is a consumer group of its
service (``service:listener``), whose consumers in every replica share the events. See the
docs/durable.md for the guarantees and the failure modes.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Self

import anyio
from anyio.abc import TaskGroup
from redis.asyncio.cluster import RedisCluster
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from .._events import Event, EventRegistry, default_registry
from .._exceptions import DuplicateListenerError, DurableError, UnknownEventError
from .._failures import FailureRecord
from ..abc import FailureStore
from ..backends.memory import MemoryFailureStore
from ..backends.redis import check_async_redis
from ..backends.sql import check_async_engine, make_engine, redact_url
from ._events import DurableStarted, DurableStopped, register_durable_events
from ._handback import backfill, replay, republish
from ._inbox import Inbox
from ._keys import StreamKeys, consumer_name, validate_part
from ._listener import DurableListener, Start, TripOn, make_listener
from ._options import DurableOptions
from ._outbox import NOT_CANCELLED, Outbox, ScheduledRow
from ._pauses import request_resume
from ._redeliver import redeliver, redrive
from ._registry import forget_group, register_group
from ._relay import Relay
from ._runtime import AnyRedis, Fault, Runtime, logger, utcnow
from ._schedule import due_time
from ._server import check_pool, check_servers, client_from_url
from ._stats import DurableStatistics, IgnoredField, RelayCounters
from ._status import DeadLetter, StreamStatus, dead_letters, discover_events, stream_status
from ._tables import create_durable_tables, inbox, inbox_table, outbox, outbox_table
from ._tasks import Tasks

__all__ = ["RedisStreams"]


class RedisStreams:
    """The durable transport of one service (see the module docstring).

    Ownership: a Redis client or engine given as an object is the caller's and is never
    closed; one built from a URL is closed by :meth:`aclose`. Concurrency: asyncio only
    (redis-py's and SQLAlchemy's async APIs).

    :param redis: a client (ideally :func:`eventbus.backends.redis.make_redis_client`), a
        ``redis.asyncio.cluster.RedisCluster`` for a Redis Cluster, or a URL (a cluster's:
        ``redis+cluster://host:port``)
    :param engine: the application's database (the outbox and inbox live next to its tables),
        as an ``AsyncEngine``, a URL or a SQLite path
    :param service: this service's name: each durable listener's group is ``service:name``
    :param registry: where envelopes' event names are looked up (default: the default one)
    :param failures: where dead deliveries are recorded (the bus's store once attached)
    :param options: tunables (:class:`DurableOptions`)
    :param prefix: the Redis key prefix (several applications can share one Redis)
    :param consumer: this process's consumer name (default: ``host-pid-random``); give a
        stable one (a pod name) to have a restarted process take its own pending entries first
    :param outbox_name: the outbox table's name
    :param inbox_name: the inbox table's name
    :param create_tables: create the outbox and inbox at start if missing
    :param check_server: refuse an evicting Redis (any master of a cluster) at start (see
        ``check_redis_server``)
    """

    def __init__(
        self,
        redis: AnyRedis | str,
        engine: AsyncEngine | str | os.PathLike[str],
        *,
        service: str,
        registry: EventRegistry | None = None,
        failures: FailureStore | None = None,
        options: DurableOptions | None = None,
        prefix: str = "eventbus",
        consumer: str | None = None,
        outbox_name: str = "eventbus_outbox",
        inbox_name: str = "eventbus_inbox",
        create_tables: bool = True,
        check_server: bool = True,
        _fault: Fault | None = None,
    ) -> None:
        self.service = validate_part("service", service)
        self.options = options if options is not None else DurableOptions()
        self.registry = registry if registry is not None else default_registry
        self.keys = StreamKeys(prefix)
        self.client: AnyRedis
        check_async_redis(redis, "RedisStreams")
        if isinstance(redis, str):
            # Blocking reads hold a connection each: one per group, plus headroom.
            self.client = client_from_url(redis, block=self.options.block, connections=64)
            self._owns_client = True
        else:
            self.client, self._owns_client = redis, False
        check_async_engine(engine, "RedisStreams", url_ok=True)
        if isinstance(engine, AsyncEngine):
            self.engine, self._owns_engine = engine, False
        else:
            self.engine, self._owns_engine = make_engine(engine), True
        self.outbox_table = outbox if outbox_name == outbox.name else outbox_table(outbox_name)
        self.inbox_table = inbox if inbox_name == inbox.name else inbox_table(inbox_name)
        self.create_tables = create_tables
        self.check_server = check_server
        self.failures: FailureStore = failures if failures is not None else MemoryFailureStore()
        self.notify: Callable[[Event], None] = _no_notify
        self.rt = Runtime(
            options=self.options,
            client=self.client,
            engine=self.engine,
            keys=self.keys,
            outbox=Outbox(self.outbox_table),
            inbox=Inbox(self.inbox_table),
            registry=self.registry,
            service=self.service,
            consumer=validate_part("consumer", consumer) if consumer else consumer_name(),
            failures=self.failures,
            record_failure=self._record_failure,
            notify=self._notify,
            **({"fault": _fault} if _fault is not None else {}),
        )
        self.relay = Relay(self.rt) if self.options.relay else None
        self._listeners: dict[str, DurableListener] = {}
        self._tasks = Tasks(self.rt, self.relay)
        self._running = False
        self._stack: AsyncExitStack | None = None
        #: ``False``: ``start()`` runs nothing (a tool that only redelivers or republishes,
        #: such as ``python -m eventbus failures retry``, must not consume as a replica)
        self.active = True

    def __repr__(self) -> str:
        return (
            f"RedisStreams(service={self.service!r}, consumer={self.rt.consumer!r}, "
            f"prefix={self.keys.prefix!r}, db={redact_url(self.engine.url)!r}, "
            f"listeners={len(self._listeners)}, running={self._running})"
        )

    @property
    def running(self) -> bool:
        return self._running

    @property
    def consumer(self) -> str:
        return self.rt.consumer

    def listeners(self) -> list[DurableListener]:
        return list(self._listeners.values())

    # -- subscribing and publishing --------------------------------------------------------------

    def subscribe(
        self,
        event_type: type[Event],
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        start: Start = "first",
        trip_on: type[BaseException] | TripOn | None = None,
    ) -> DurableListener:
        """Add a durable listener: its own consumer group ``service:name`` on the event's stream.

        *trip_on*: the exceptions its group's kill switch counts (default: every one).

        Call before the transport starts (a listener added while it runs starts reading at
        once). See :func:`~eventbus.durable._listener.make_listener` for the checks.

        :raises DuplicateListenerError: if a durable listener of that name exists
        """
        listener = make_listener(
            self.service, event_type, fn, name=name, start=start, trip_on=trip_on
        )
        _check_durable("on", event_type)
        if listener.event_type not in self.registry:
            raise UnknownEventError(
                listener.event_name, "declare it in the registry the transport decodes with"
            )
        if listener.name in self._listeners:
            raise DuplicateListenerError(listener.name)
        if self._running:
            self._check_pool(len(self._listeners) + 1)
        self._listeners[listener.name] = listener
        if self._running:
            self._tasks.add_soon(listener)
        return listener

    async def publish(
        self,
        event: Event,
        conn: AsyncConnection | AsyncSession,
        *,
        aggregate_key: str | None = None,
        causation_id: str | None = None,
        correlation_id: str | None = None,
        headers: dict[str, str] | None = None,
        deliver_at: datetime | None = None,
        delay: timedelta | None = None,
    ) -> str:
        """Write *event* to the outbox in *conn*'s open transaction; return its event id.

        Committed, it is delivered at least once to every durable listener group of every
        service; rolled back, never. The local relay is woken when the transaction ends.
        With *deliver_at* (an aware datetime) or *delay*, it is delivered at or after that
        time, never before, unless :meth:`cancel_scheduled` removes it first.

        :raises NoTransactionError: if *conn* has no open transaction (or is autocommit)
        :raises UnknownEventError: if the event's type is not in the transport's registry
        :raises PayloadError: if the payload cannot be encoded as JSON
        :raises ValueError: naming the argument, for a naive *deliver_at*, one more than
            a few seconds in the past, a negative *delay*, or both given; if *causation_id* or
            *correlation_id* is longer than 64 characters, or an id holds a NUL character
            (every consumer would refuse the event)
        """
        [event_id] = await self.publish_many(
            [event],
            conn,
            aggregate_key=aggregate_key,
            causation_id=causation_id,
            correlation_id=correlation_id,
            headers=headers,
            deliver_at=deliver_at,
            delay=delay,
        )
        return event_id

    async def publish_many(
        self,
        events: Sequence[Event],
        conn: AsyncConnection | AsyncSession,
        *,
        aggregate_key: str | None = None,
        causation_id: str | None = None,
        correlation_id: str | None = None,
        headers: dict[str, str] | None = None,
        deliver_at: datetime | None = None,
        delay: timedelta | None = None,
    ) -> list[str]:
        """:meth:`publish` for several events, in one insert."""
        _check_publishable(self.registry, events)
        now = utcnow()
        due = due_time(deliver_at, delay, now=now)
        wake: Callable[[], None] | None = None
        if self.relay is not None:
            relay = self.relay
            wake = relay.wake if due is None else functools.partial(relay.wake_at, due)
        return await self.rt.outbox.write(
            conn,
            events,
            now=now,
            aggregate_key=aggregate_key,
            causation_id=causation_id,
            correlation_id=correlation_id,
            headers=headers,
            available_at=due,
            wake=wake,
        )

    async def cancel_scheduled(self, event_id: str, conn: AsyncConnection | AsyncSession) -> bool:
        """Remove a scheduled event that no relay has published yet, in *conn*'s open
        transaction (committed: it is never delivered; rolled back: it still is).

        :return: ``True`` if it was removed; ``False`` (and an INFO log line saying why) if no
            such cancellable event exists: not scheduled (published without a later due
            time), already published, or handed to a relay once (its publish may be in
            flight or may have reached Redis), cancelled before, purged, or never written to
            this outbox
        :raises NoTransactionError: if *conn* has no open transaction (or is autocommit)
        """
        removed = await self.rt.outbox.cancel(conn, event_id)
        if not removed:
            logger.info("cancel_scheduled(%r): %s", event_id, NOT_CANCELLED)
        return removed

    async def scheduled(self, *, limit: int = 100) -> list[ScheduledRow]:
        """Events published for later and not yet due, soonest first (at most *limit*)."""
        return await self.rt.outbox.scheduled(self.rt.engine, now=utcnow(), limit=limit)

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self, task_group: TaskGroup) -> None:
        """Check Redis, create the tables, then run the relay, the consumers and the janitor
        in *task_group* until :meth:`aclose`.

        :raises UnsafeRedisError: for an evicting ``maxmemory-policy`` (see docs/operations.md)
        :raises RuntimeError: if not on asyncio, or already started
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "RedisStreams needs asyncio (redis-py and SQLAlchemy async)"
            ) from None
        if self._running:
            raise RuntimeError(f"{self!r} is already started")
        if not self.active:
            return
        if isinstance(self.client, RedisCluster):
            await self.client.initialize()  # its nodes, for the checks
        self._check_pool(len(self._listeners))
        if self.check_server:
            await check_servers(self.client)
        if self.create_tables:
            await create_durable_tables(self.engine, tables=(self.outbox_table, self.inbox_table))
        register_durable_events(self.registry)
        await self._tasks.start(task_group, self._listeners.values())
        self._running = True
        self.rt.notify(
            DurableStarted(
                service=self.service,
                consumer=self.rt.consumer,
                groups=tuple(sorted(lst.group for lst in self._listeners.values())),
            )
        )

    async def aclose(self) -> None:
        """Stop: no more reads; calls in flight get ``shutdown_grace``, then are cancelled
        without acknowledgement; the relay finishes its batch and publishes what this process
        committed (within the same grace); then owned clients are closed."""
        with anyio.CancelScope(shield=True):
            if self._running:
                self._running = False
                unfinished = await self._tasks.stop(self.options.shutdown_grace)
                self.rt.limiter.summarize()
                self.rt.notify(
                    DurableStopped(
                        service=self.service, consumer=self.rt.consumer, unfinished=unfinished
                    )
                )
            if self.relay is not None:
                await self.relay.aclose()  # driven by hand, it may hold a connection
            if self._owns_client:
                await self.client.aclose()
            if self._owns_engine:
                await self.engine.dispose()

    async def __aenter__(self) -> Self:
        """Start in a task group of its own (without a bus)."""
        stack = AsyncExitStack()
        tg = await stack.enter_async_context(anyio.create_task_group())
        try:
            await self.start(tg)
        except BaseException:
            tg.cancel_scope.cancel()
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.aclose()
        finally:
            if self._stack is not None:
                stack, self._stack = self._stack, None
                await stack.aclose()

    # -- operations ------------------------------------------------------------------------------

    def statistics(self) -> DurableStatistics:
        groups = tuple(c.group.statistics() for c in self._tasks.consumers)
        return DurableStatistics(
            service=self.service,
            consumer=self.rt.consumer,
            running=self._running,
            relay=(self.relay.counters if self.relay else RelayCounters()).snapshot(),
            janitor=self._tasks.janitor.statistics(),
            groups=groups,
            ignored_fields=tuple(
                IgnoredField(event, field, n)
                for (event, field), n in sorted(self.rt.ignored.items())
            ),
        )

    def _check_pool(self, listeners: int) -> None:
        """:raises ValueError: if the client cannot serve *listeners* (see ``check_pool``)"""
        check_pool(
            self.client, listeners=listeners, block=self.options.block, owned=self._owns_client
        )

    # -- what operators do, whether or not the transport runs -----------------------------------

    async def status(self, events: Sequence[str] | None = None) -> list[StreamStatus]:
        """Length, groups (pending, lag) and dead letters of each event's stream (default:
        every stream under the prefix)."""
        names = (
            list(events) if events is not None else await discover_events(self.client, self.keys)
        )
        return [await stream_status(self.client, self.keys, n) for n in names]

    async def dead_letters(
        self, event: str, *, group: str | None = None, limit: int | None = 100
    ) -> list[DeadLetter]:
        """Dead letters of *event*, oldest first (of one *group* if given): what
        :meth:`replay` hands back, by their ``dead_id``."""
        return await dead_letters(self.client, self.keys, event, group=group, limit=limit)

    async def sweep(self, events: Sequence[str] | None = None) -> int:
        """Run the janitor once now, whoever's turn it is, over the streams of *events*
        (default: this process's listeners'); return the entries trimmed."""
        return await self._tasks.janitor.sweep(events, force=True)

    async def republish(self, *, since: datetime, events: Sequence[str] | None = None) -> int:
        """Publish again every retained outbox row published at or after *since*; see
        :func:`~eventbus.durable._handback.republish`."""
        n = await republish(self.rt, since=since, events=events)
        if self.relay is not None:
            self.relay.wake()
        return n

    async def declare_group(self, event: str | type[Event], group: str) -> bool:
        """Register *group* (``service:listener``) for *event*'s stream before its service
        first runs (a deployment step): until it exists, the janitor keeps ``retention`` of
        entries for it. Return whether it was new. See :mod:`~eventbus.durable._registry`."""
        return await register_group(self.rt, _event_name(event), group)

    async def forget_group(self, event: str | type[Event], group: str) -> bool:
        """Retire *group*: off the registry, destroyed on the stream, its redelivery stream
        deleted (its pending entries with it). Return whether there was anything to forget."""
        return await forget_group(self.rt, _event_name(event), group)

    async def backfill(self, event: str | type[Event], group: str, *, since: datetime) -> int:
        """Hand *group* alone the events since *since* its stream no longer holds, from the
        retained outbox rows; see :func:`~eventbus.durable._handback.backfill`."""
        return await backfill(self.rt, _event_name(event), group, since=since)

    async def replay(
        self, event: str, *, group: str | None = None, ids: Sequence[str] | None = None
    ) -> list[str]:
        """Hand dead letters back to their group; see :func:`~eventbus.durable._handback.replay`."""
        return await replay(self.rt, event, group=group, ids=ids)

    async def resume_group(self, event: str | type[Event], group: str) -> int:
        """Resume *group* now where its kill switch paused it: in this process at once, in
        the others at their next check (about a second). Return how many paused consumers
        were told (0: it was paused nowhere)."""
        name = _event_name(event)
        told = set()
        for consumer in self._tasks.consumers:
            g = consumer.group
            if g.name == group and g.listener.event_name == name and g.paused:
                g.resume_asked.set()
                told.add(self.rt.consumer)
        told.update(await request_resume(self.client, self.keys, name, group))
        return len(told)

    async def redeliver(self, failure: FailureRecord) -> str:
        """Hand one dead durable failure back to its group alone (``failures retry``); see
        :func:`~eventbus.durable._redeliver.redeliver`."""
        return await redeliver(self.rt, failure)

    async def redrive(self, failure: FailureRecord, *, force: bool = False) -> str:
        """Hand a pending durable failure whose redelivery was lost back once more
        (``streams redrive``); see :func:`~eventbus.durable._redeliver.redrive`."""
        return await redrive(self.rt, failure, force=force)

    # -- hooks -----------------------------------------------------------------------------------

    def _record_failure(self, rec: FailureRecord, exc: BaseException) -> None:
        self.failures.record(rec)

    def bind(
        self,
        *,
        registry: EventRegistry,
        failures: FailureStore,
        record: Callable[..., None],
        notify: Callable[[Event], None],
    ) -> None:
        """Work for a bus (``EventBus(durable=...)`` calls this): decode with its registry,
        record dead deliveries through its failure sink, emit lifecycle events on it."""

        def through_sink(rec: FailureRecord, exc: BaseException) -> None:
            record(rec, exc, log=False)  # the consumer logged it, with the dead letter's id

        self.registry = self.rt.registry = registry
        self.failures = self.rt.failures = failures
        self.rt.record_failure = through_sink
        self.notify = notify
        register_durable_events(registry)

    def _notify(self, event: Event) -> None:
        try:
            self.notify(event)
        except Exception:
            logger.warning("could not emit %r", event.event_name, exc_info=True)


def _no_notify(_event: Event) -> None:
    return None


def _check_durable(what: str, cls: type[Event]) -> None:
    """:raises DurableError: if *cls* was not declared ``durable=True``"""
    if not cls.__durable__:
        raise DurableError(
            what,
            cls.__event_name__,
            "its type is not declared durable; declare it with "
            "'class X(Event, name=..., durable=True)', or emit() it in-process",
        )


def _check_publishable(registry: EventRegistry, events: Sequence[Event]) -> None:
    """What a transport checks before writing outbox rows: each event's type is durable
    and declared in the registry it decodes with (a row nobody can read helps nobody).

    :raises DurableError: for a type not declared ``durable=True``
    :raises UnknownEventError: for a type the registry does not declare
    """
    for event in events:
        _check_durable("publish", type(event))
        if type(event) not in registry:
            raise UnknownEventError(
                getattr(event, "__event_name__", repr(event)),
                "declare it in the registry the transport decodes with",
            )


def _event_name(event: str | type[Event]) -> str:
    name = event if isinstance(event, str) else getattr(event, "__event_name__", "")
    return validate_part("event name", name)
