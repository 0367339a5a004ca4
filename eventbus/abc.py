"""Protocols that storage backends implement; concrete classes need not inherit from them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from anyio.abc import TaskGroup

from ._events import Event, EventRegistry
from ._failures import FailureRecord, FailureStatus

__all__ = ["DurableTransport", "FailureStore"]


@runtime_checkable
class FailureStore(Protocol):
    """**Protocol:** durable home of listener failures.

    * ``record()`` is synchronous and never blocks the publisher; a store that writes to a
      server buffers and writes from a background task.
    * ``start(task_group)`` is called by the bus on ``async with bus:``; background work runs
      in that task group. ``aclose()`` flushes everything accepted so far, and releases what
      the store built (an engine from a URL), never what it was given. (The stores of this
      package are also async context managers that close on exit; the bus needs only
      ``aclose()``.)
    * ``flush()`` returns once every record accepted before the call is queryable.
    * Queries return newest first; ``since`` and ``until`` compare the last failure time
      (``since`` inclusive, ``until`` exclusive), and ``offset`` skips that many matching
      records (pagination: see :meth:`query`).
    * Keywords added after the first release (``query``'s ``correlation``, ``until`` and
      ``offset``; ``purge``'s ``ids``) are passed by the bus and the console only when they
      are used, so a store written before them keeps working until they are.
    * Every field of a record reads as its declared type; ``traceback`` is ``str``. A record
      the bus made renders that text on the first read (tens of µs, once), so a store that
      writes later should read it when it writes, not in ``record()``.
    """

    def record(self, failure: FailureRecord) -> None:
        """Accept *failure* for storing; never blocks, never raises for a full buffer."""
        ...

    async def start(self, task_group: TaskGroup) -> None:
        """Run the store's background work (a batch writer) in *task_group*, if any."""
        ...

    async def flush(self) -> None:
        """Return once every record accepted before the call is queryable."""
        ...

    async def aclose(self) -> None:
        """Flush, stop the background work, and release what the store built."""
        ...

    async def query(
        self,
        *,
        status: FailureStatus | None = None,
        event: str | None = None,
        listener: str | None = None,
        since: datetime | None = None,
        limit: int | None = 100,
        correlation: str | None = None,
        until: datetime | None = None,
        offset: int = 0,
    ) -> list[FailureRecord]:
        """Records matching every filter given, newest first (*correlation*: one chain),
        skipping the first *offset* of them.

        Pagination is by offset, not by a cursor: a page is a number a link can carry, any
        store can skip rows in its own order, and no row must still exist for the next page
        to be found; a page may repeat a row when newer failures arrive meanwhile.
        """
        ...

    async def get(self, failure_id: str) -> FailureRecord | None:
        """The record of *failure_id*, or ``None``."""
        ...

    async def update(self, failure: FailureRecord) -> None:
        """Replace the stored record of the same id (retry bookkeeping); ``KeyError`` if none."""
        ...

    async def purge(
        self,
        *,
        status: FailureStatus | None = None,
        before: datetime | None = None,
        ids: Sequence[str] | None = None,
    ) -> int:
        """Delete the matching records (all of them without filters; none for ``ids=[]``);
        how many."""
        ...


@runtime_checkable
class DurableTransport(Protocol):
    """**Protocol:** delivery of durable events across processes (``EventBus(durable=...)``);
    :class:`eventbus.durable.RedisStreams` is the implementation.

    * ``bind()`` is called once by the bus it is given to: the registry to decode with, the
      failure store, a callable that records a finished :class:`FailureRecord` through the
      bus's failure sink (``log=False`` when the transport logged it), and one that emits a
      lifecycle event.
    * ``publish()`` writes the event in the caller's open transaction (*conn*), never sends
      it outside one; ``subscribe()`` adds a durable listener (its own consumer group).
    * ``start(task_group)`` runs the background work in the bus's task group; ``aclose()``
      stops it without acknowledging unfinished deliveries. With ``active`` false, start
      runs nothing (a tool that only redelivers or republishes).
    * ``redeliver()`` hands one dead durable failure back to its consumer group.
    """

    active: bool

    def bind(
        self,
        *,
        registry: EventRegistry,
        failures: FailureStore,
        record: Callable[..., None],
        notify: Callable[[Event], None],
    ) -> None:
        """Take the bus's registry, failure store, failure sink and ``emit``."""
        ...

    def subscribe(
        self, event_type: type[Event], fn: Callable[..., Any], *, name: str | None = None
    ) -> object:
        """Add a durable listener of *event_type*."""
        ...

    async def publish(
        self,
        event: Event,
        conn: Any,
        *,
        aggregate_key: str | None = None,
        causation_id: str | None = None,
        correlation_id: str | None = None,
        headers: dict[str, str] | None = None,
        deliver_at: datetime | None = None,
        delay: timedelta | None = None,
    ) -> str:
        """Write *event* in *conn*'s open transaction, for delivery now or at *deliver_at*
        (or after *delay*); return its event id."""
        ...

    async def cancel_scheduled(self, event_id: str, conn: Any) -> bool:
        """Remove a scheduled event not yet published, in *conn*'s open transaction."""
        ...

    async def start(self, task_group: TaskGroup) -> None:
        """Run the background work (relay, consumers, janitor) in *task_group*."""
        ...

    async def aclose(self) -> None:
        """Stop the background work; unfinished deliveries stay unacknowledged."""
        ...

    async def redeliver(self, failure: FailureRecord) -> str:
        """Hand one dead durable failure back to its consumer group."""
        ...
