"""``MemoryStreams``: the durable transport without Redis, for users' unit tests.

The outbox and the inbox are the real ones, on the test's own SQLAlchemy engine: ``publish``
writes the same row in the caller's transaction, ``cancel_scheduled`` deletes it, a listener
taking ``tx`` inserts the same inbox row in its transaction. Only the streams are in memory:
a committed row that is due is handed to every listener's group (its own queue), and each
entry is delivered one at a time, in order, until it succeeds, or is dead after
``max_deliveries`` (a failure row in the bus's store, ``DeadLettered`` emitted). Payloads are
read as ``RedisStreams`` reads them (:func:`eventbus._stored.decode_stored`: the stored
version upcast, unknown fields ignored where the type says so); one that cannot be decoded is
dead at once, and a newer version the type cannot read stays queued, never delivered nor dead.

Time comes from a clock: the real one by default, or a :class:`VirtualClock` that the test
moves (``clock.advance(timedelta(hours=24))``) to make scheduled events and retries due.
:meth:`MemoryStreams.drain` delivers everything due now and returns; while the transport runs
(``EventBus(durable=...)``, or ``async with streams:``) a background task does the same.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Self

import anyio
from anyio.abc import TaskGroup
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from .._events import Event, EventRegistry, default_registry
from .._exceptions import DuplicateListenerError, UnknownEventError
from .._failures import FailureRecord, FailureStatus, safe_str
from .._stored import decode_stored, readable
from ..abc import FailureStore
from ..backends.memory import MemoryFailureStore
from ..backends.sql import make_engine
from ._context import Delivery, delivery_var
from ._envelope import Envelope
from ._events import DeadLettered, register_durable_events
from ._inbox import Inbox
from ._link import DurableLink, failure_id
from ._listener import DurableListener, Start, TripOn, make_listener
from ._options import DurableOptions
from ._outbox import NOT_CANCELLED, Outbox, ScheduledRow
from ._schedule import due_time
from ._streams import _check_durable, _check_publishable
from ._tables import (
    DEFAULT_INBOX,
    DEFAULT_OUTBOX,
    create_durable_tables,
    inbox,
    inbox_table,
    outbox,
    outbox_table,
)

__all__ = ["MemoryStreams", "VirtualClock"]

logger = logging.getLogger("eventbus.durable")

#: how often the background task looks at the clock (a virtual one moves without telling)
TICK = 0.01


class VirtualClock:
    """A clock a test moves by hand: ``MemoryStreams(..., clock=VirtualClock())``."""

    def __init__(self, start: datetime | None = None) -> None:
        if start is not None and start.tzinfo is None:
            raise ValueError(f"VirtualClock: start={start.isoformat()} is naive; give an aware one")
        self._now = (start or datetime.now(UTC)).astimezone(UTC)

    def __call__(self) -> datetime:
        return self._now

    def __repr__(self) -> str:
        return f"VirtualClock({self._now.isoformat()})"

    def advance(self, by: timedelta) -> datetime:
        """Move the clock *by* forward; return the new time.

        :raises ValueError: if *by* is negative (time does not go back)
        """
        if by < timedelta(0):
            raise ValueError(f"VirtualClock.advance: by={by!r} is negative")
        self._now += by
        return self._now


@dataclasses.dataclass
class _Entry:
    """One event in one group's queue."""

    id: str
    env: Envelope
    deliveries: int = 0
    not_before: datetime | None = None  #: a retry's time
    dead_failure: str | None = None  #: a dead event handed back: the failure row it resolves


@dataclasses.dataclass
class _Group:
    listener: DurableListener
    queue: list[_Entry] = dataclasses.field(default_factory=list)
    #: stored versions this group's type cannot read, warned about once each
    unreadable: set[int] = dataclasses.field(default_factory=set)


class MemoryStreams:
    """The durable transport of one service, in memory (see the module docstring).

    :param engine: the test's database (an ``AsyncEngine``, a URL or a SQLite path): the
        outbox and inbox tables live there, as with ``RedisStreams``
    :param service: the service's name: each durable listener's group is ``service:name``
    :param registry: where events are decoded (default: the default registry; a bus gives its)
    :param failures: where dead deliveries are recorded (the bus's store once attached)
    :param options: ``max_deliveries`` and ``retry_backoff`` / ``visibility`` (retry delays)
        apply; Redis' and the relay's options do not
    :param clock: returns the current aware UTC time (default: the real clock); a
        :class:`VirtualClock` makes scheduled events and retries due when the test says
    """

    active = True

    def __init__(
        self,
        engine: AsyncEngine | str,
        *,
        service: str,
        registry: EventRegistry | None = None,
        failures: FailureStore | None = None,
        options: DurableOptions | None = None,
        clock: Callable[[], datetime] | None = None,
        outbox_name: str = DEFAULT_OUTBOX,
        inbox_name: str = DEFAULT_INBOX,
        create_tables: bool = True,
    ) -> None:
        self._owns_engine = not isinstance(engine, AsyncEngine)
        self.engine = engine if isinstance(engine, AsyncEngine) else make_engine(engine)
        self.service = service
        self.registry = registry if registry is not None else default_registry
        self.failures: FailureStore = failures if failures is not None else MemoryFailureStore()
        self.options = options if options is not None else DurableOptions()
        self.clock: Callable[[], datetime] = clock or (lambda: datetime.now(UTC))
        out = outbox if outbox_name == DEFAULT_OUTBOX else outbox_table(outbox_name)
        inn = inbox if inbox_name == DEFAULT_INBOX else inbox_table(inbox_name)
        self.outbox, self.inbox = Outbox(out), Inbox(inn)
        self._tables = (out, inn)
        self._create_tables = create_tables
        self._groups: dict[str, _Group] = {}
        self._claims = itertools.count(1)
        self._lock = anyio.Lock()
        self._wakeup = anyio.Event()
        self._scope: anyio.CancelScope | None = None
        self._stack: AsyncExitStack | None = None
        self._record: Callable[[FailureRecord, BaseException], None] = self._store_failure
        self.notify: Callable[[Event], None] = _no_notify
        #: events that died, as the failure rows recorded for them
        self.dead: list[FailureRecord] = []
        #: stored fields the tolerant reader ignored, per (event, field)
        self.ignored: Counter[tuple[str, str]] = Counter()

    def _wake(self) -> None:
        self._wakeup.set()

    def __repr__(self) -> str:
        return f"MemoryStreams(service={self.service!r}, groups={list(self._groups)!r})"

    @property
    def running(self) -> bool:
        return self._scope is not None

    def listeners(self) -> list[DurableListener]:
        return [g.listener for g in self._groups.values()]

    # -- the RedisStreams API --------------------------------------------------------------------

    def subscribe(
        self,
        event_type: type[Event],
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        start: Start = "first",
        trip_on: type[BaseException] | TripOn | None = None,
    ) -> DurableListener:
        """Add a durable listener: its own group ``service:name``, which gets the events
        committed from now on. *trip_on* is checked as ``RedisStreams`` checks it, so an
        application's listeners subscribe here unchanged; there is no kill switch in memory
        (every failure is retried, then dead, as a failure ``trip_on`` does not name).

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
        if listener.group in self._groups:
            raise DuplicateListenerError(listener.name)
        self._groups[listener.group] = _Group(listener)
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
        """As ``RedisStreams.publish``: one outbox row in *conn*'s open transaction."""
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
        now = self.clock()
        return await self.outbox.write(
            conn,
            events,
            now=now,
            aggregate_key=aggregate_key,
            causation_id=causation_id,
            correlation_id=correlation_id,
            headers=headers,
            available_at=due_time(deliver_at, delay, now=now),
            wake=self._wake,
        )

    async def cancel_scheduled(self, event_id: str, conn: AsyncConnection | AsyncSession) -> bool:
        """As ``RedisStreams.cancel_scheduled``."""
        removed = await self.outbox.cancel(conn, event_id)
        if not removed:
            logger.info("cancel_scheduled(%r): %s", event_id, NOT_CANCELLED)
        return removed

    async def scheduled(self, *, limit: int = 100) -> list[ScheduledRow]:
        """Events published for later and not yet due, soonest first."""
        return await self.outbox.scheduled(self.engine, now=self.clock(), limit=limit)

    async def redeliver(self, failure: FailureRecord) -> str:
        """Hand one dead failure back to its group (``bus.retry_failures()``).

        :raises ValueError: if it is not a dead failure of a group of this transport, or its
            outbox row is gone
        """
        group = self._groups.get(failure.durable_group or "")
        if failure.status is not FailureStatus.DEAD or group is None:
            raise ValueError(f"failure {failure.id!r} is not a dead failure of a group here")
        env = await self.outbox.envelope(self.engine, failure.event_id)
        if env is None:
            raise ValueError(f"failure {failure.id!r}: the outbox row of its event is gone")
        entry = _Entry(f"{env.seq}-{next(self._claims)}", env, dead_failure=failure.id)
        group.queue.append(entry)
        await self.failures.update(failure.replace(status=FailureStatus.PENDING))
        self._wakeup.set()
        return entry.id

    # -- running ---------------------------------------------------------------------------------

    async def drain(self) -> int:
        """Deliver every committed event that is due now (and retries that are due), until
        none is left; return how many deliveries were made. Events due later, and retries
        waiting for their time, stay (advance the clock, then drain again)."""
        total = 0
        async with self._lock:
            while True:
                # shielded: a statement cancelled by a stop would leave its connection to close in a
                # task that never ends (see _transaction)
                with anyio.CancelScope(shield=True):
                    await self._relay()
                n = 0
                for group in list(self._groups.values()):
                    n += await self._deliver_due(group)
                if not n:
                    return total
                total += n

    async def start(self, task_group: TaskGroup) -> None:
        """Create the tables (unless told not to), then drain in the background until
        :meth:`aclose`."""
        if self.running:
            raise RuntimeError(f"{self!r} is already started")
        if self._create_tables:
            await create_durable_tables(self.engine, tables=self._tables)
        self._scope = anyio.CancelScope()
        task_group.start_soon(self._run, self._scope)

    async def _run(self, scope: anyio.CancelScope) -> None:
        with scope:
            while True:
                self._wakeup = anyio.Event()
                try:
                    await self.drain()
                except Exception:  # the database went away: the test sees it in its own calls
                    logger.exception("MemoryStreams: delivering failed; trying again")
                with anyio.move_on_after(TICK):
                    await self._wakeup.wait()

    async def aclose(self) -> None:
        """Stop the background task (an entry being delivered is left undelivered)."""
        if self._scope is not None:
            self._scope.cancel()
            self._scope = None
        if self._stack is not None:
            stack, self._stack = self._stack, None
            await stack.aclose()
        if self._owns_engine:
            await self.engine.dispose()

    async def __aenter__(self) -> Self:
        stack = AsyncExitStack()
        tg = await stack.enter_async_context(anyio.create_task_group())
        try:
            await self.start(tg)
        except BaseException:
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
        await self.aclose()

    def bind(
        self,
        *,
        registry: EventRegistry,
        failures: FailureStore,
        record: Callable[..., None],
        notify: Callable[[Event], None],
    ) -> None:
        """Work for a bus: decode with its registry, record dead deliveries through its
        failure sink, emit lifecycle events on it."""
        self.registry = registry
        self.failures = failures
        self._record = functools.partial(_through_sink, record)
        self.notify = notify
        register_durable_events(registry)

    # -- inside ----------------------------------------------------------------------------------

    async def _relay(self) -> None:
        """Hand the due, committed outbox rows to every group of their event."""
        token = f"memory:{self.service}:{next(self._claims)}"
        now = self.clock()
        rows = await self.outbox.claim(self.engine, token=token, limit=1000, lease=3600, now=now)
        if not rows:
            return
        ids: dict[int, str] = {}
        for row in rows:
            ids[row.id] = entry_id = f"{row.id}-0"
            for group in self._groups.values():
                if group.listener.event_name == row.name:
                    group.queue.append(_Entry(entry_id, row.envelope()))
        await self.outbox.mark(self.engine, token=token, stream_ids=ids, now=now)

    async def _deliver_due(self, group: _Group) -> int:
        now = self.clock()
        due = [
            e
            for e in group.queue
            if (e.not_before is None or e.not_before <= now) and self._readable(group, e.env)
        ]
        for entry in due:
            await self._deliver(group, entry)
        return len(due)

    def _readable(self, group: _Group, env: Envelope) -> bool:
        """Whether *group*'s type reads *env*'s version; a newer one it cannot read stays
        queued, as ``RedisStreams`` leaves it pending (one WARNING per group and version)."""
        if readable(self.registry, env.name, env.version):
            return True
        if env.version not in group.unreadable:
            group.unreadable.add(env.version)
            logger.warning(
                "durable listener %r (group %r): event %r (%s) is stored at version %d, but "
                "this process declares version %d with unknown_fields='reject'; left pending, "
                "not dead (logged once per group and version)",
                group.listener.name,
                group.listener.group,
                env.name,
                env.event_id,
                env.version,
                self.registry.get(env.name).__event_version__,
            )
        return False

    async def _deliver(self, group: _Group, entry: _Entry) -> None:
        listener, opts = group.listener, self.options
        entry.deliveries += 1
        env = entry.env
        delivery = Delivery.of(
            env, group=listener.group, entry_id=entry.id, deliveries=entry.deliveries
        )
        try:
            stored = decode_stored(self.registry, env.name, env.payload, env.version)
        except Exception as exc:  # the same bytes fail the same way every time: no retry
            group.queue.remove(entry)
            await self._dead(group, entry, None, exc)
            return
        for field in stored.ignored:
            self.ignored[env.name, field] += 1
        event = stored.event
        token = delivery_var.set(delivery)
        try:
            await self._call(listener, event, env)
        except Exception as exc:
            if entry.deliveries >= opts.max_deliveries:
                group.queue.remove(entry)
                await self._dead(group, entry, event, exc)
                return
            delay = opts.retry_delay(entry.deliveries)
            entry.not_before = self.clock() + timedelta(seconds=delay)
            logger.warning(
                "durable listener %r failed for %r (event %s, delivery %d of %d): %s: %s; "
                "retrying in %.2f s",
                listener.name,
                env.name,
                env.event_id,
                entry.deliveries,
                opts.max_deliveries,
                type(exc).__name__,
                safe_str(exc),
                delay,
            )
            return
        finally:
            delivery_var.reset(token)
        group.queue.remove(entry)
        if entry.dead_failure is not None:
            old = await self.failures.get(entry.dead_failure)
            if old is not None:
                await self.failures.update(
                    old.replace(status=FailureStatus.RESOLVED, resolved_at=self.clock())
                )

    async def _call(self, listener: DurableListener, event: Event, env: Envelope) -> None:
        if listener.takes_tx:
            async with _transaction(self.engine) as conn:
                if not await self.inbox.claim(
                    conn, group=listener.group, event_id=env.event_id, now=self.clock()
                ):
                    return
                if listener.tx_positional:
                    await listener.fn(event, conn)
                else:
                    await listener.fn(event, tx=conn)
            return
        if listener.is_async:
            await listener.fn(event)
            return
        await anyio.to_thread.run_sync(listener.fn, event)

    async def _dead(
        self, group: _Group, entry: _Entry, event: Event | None, exc: Exception
    ) -> None:
        listener, env = group.listener, entry.env
        stream = f"memory:{env.name}"
        fid = entry.dead_failure or failure_id(listener.group, stream, entry.id)
        correlation = env.correlation_id or env.event_id
        if event is not None:
            base = FailureRecord.from_exception(
                event=event,
                event_id=env.event_id,
                listener=listener.name,
                exc=exc,
                causation_id=env.causation_id,
                correlation_id=correlation,
            )
        else:
            base = FailureRecord.minimal(
                event_name=env.name,
                event_id=env.event_id,
                listener=listener.name,
                exc=exc,
                attempts=entry.deliveries,
                causation_id=env.causation_id,
                correlation_id=correlation,
            )
        link = DurableLink(
            listener.group,
            stream,
            entry.id,
            entry.deliveries,
            env.seq,
            occurred_at=env.occurred_at,
            version=env.version,
        )
        rec = base.replace(
            id=fid,
            payload=env.payload,
            attempts=entry.deliveries,
            status=FailureStatus.DEAD,
            note=link.note(),
            **link.columns(),
        )
        old = await self.failures.get(fid) if entry.dead_failure else None
        if old is not None:
            rec = rec.replace(attempts=old.attempts + rec.attempts)
            await self.failures.update(rec)
        else:
            self._record(rec, exc)
        await self.failures.flush()
        self.dead.append(rec)
        error = f"{rec.error_type}: {rec.message}"
        logger.error(
            "durable listener %r: event %r (%s) is dead after %d deliveries in group %r: %s",
            listener.name,
            env.name,
            env.event_id,
            entry.deliveries,
            listener.group,
            error,
        )
        try:
            self.notify(
                DeadLettered(
                    event_name=env.name,
                    event_id=env.event_id,
                    group=listener.group,
                    deliveries=entry.deliveries,
                    error=error,
                    failure_id=fid,
                )
            )
        except Exception:
            logger.warning("could not emit the dead-lettered event", exc_info=True)

    def _store_failure(self, rec: FailureRecord, exc: BaseException) -> None:
        self.failures.record(rec)


@contextlib.asynccontextmanager
async def _transaction(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """``engine.begin()`` whose own statements (begin, commit, rollback, the return to the
    pool) are shielded from a stop that cancels the listener inside it: SQLAlchemy
    invalidates a connection whose statement is cancelled, and on aiosqlite the close it
    starts then waits forever, hanging the event loop's shutdown."""
    with anyio.CancelScope(shield=True):
        conn = await engine.connect()
        await conn.begin()
    try:
        yield conn
        with anyio.CancelScope(shield=True):
            await conn.commit()
    finally:
        with anyio.CancelScope(shield=True):
            await conn.close()  # rolls back what was not committed


def _through_sink(record: Callable[..., None], rec: FailureRecord, exc: BaseException) -> None:
    record(rec, exc, log=False)  # logged here already


def _no_notify(_event: Event) -> None:
    return None
