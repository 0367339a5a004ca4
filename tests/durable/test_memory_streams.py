"""``eventbus.testing.MemoryStreams`` alone: ``drain()`` without a running transport, and
scheduled events and retries on a virtual clock (what the conformance suite cannot share
with ``RedisStreams``, which runs on the real clock)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from eventbus import EventBus, FailureStatus, MemoryFailureStore
from eventbus.durable import create_durable_tables
from eventbus.durable._tables import outbox
from eventbus.testing import MemoryStreams, VirtualClock
from tests.durable.conftest import FAST, orphaned_closes, wait_until
from tests.durable.events import REG, OrderPaid


@pytest.fixture
async def tables(engine: AsyncEngine) -> AsyncEngine:
    await create_durable_tables(engine)
    return engine


async def test_a_scheduled_event_waits_for_the_virtual_clock(tables: AsyncEngine) -> None:
    clock = VirtualClock(datetime(2030, 1, 1, tzinfo=UTC))
    streams = MemoryStreams(tables, service="svc", registry=REG, clock=clock)
    got: list[int] = []
    streams.subscribe(OrderPaid, lambda e: got.append(e.order_id), name="remind")
    async with tables.begin() as conn:
        await streams.publish(OrderPaid(order_id=1), conn, delay=timedelta(hours=24))
        cancelled = await streams.publish(OrderPaid(order_id=2), conn, delay=timedelta(hours=24))
        await streams.publish(OrderPaid(order_id=3), conn)
    async with tables.begin() as conn:
        assert await streams.cancel_scheduled(cancelled, conn)
    assert await streams.drain() == 1 and got == [3]
    assert [r.due_at for r in await streams.scheduled()] == [datetime(2030, 1, 2, tzinfo=UTC)]
    clock.advance(timedelta(hours=23, minutes=59))
    assert await streams.drain() == 0
    clock.advance(timedelta(minutes=1))
    assert await streams.drain() == 1 and got == [3, 1]
    assert await streams.drain() == 0


async def test_retries_wait_for_their_delay_then_the_event_dies(tables: AsyncEngine) -> None:
    clock = VirtualClock()
    failures = MemoryFailureStore()
    streams = MemoryStreams(
        tables, service="svc", registry=REG, options=FAST, clock=clock, failures=failures
    )
    calls: list[datetime] = []

    async def broken(e: OrderPaid) -> None:
        calls.append(clock())
        raise RuntimeError("down")

    streams.subscribe(OrderPaid, broken, name="broken")
    async with tables.begin() as conn:
        await streams.publish(OrderPaid(order_id=1), conn)
    start = clock()
    assert await streams.drain() == 1  # the retry waits 0.1 s (FAST.retry_backoff)
    clock.advance(timedelta(seconds=0.1))
    assert await streams.drain() == 1
    clock.advance(timedelta(seconds=0.2))
    assert await streams.drain() == 1
    assert calls == [start, start + timedelta(seconds=0.1), start + timedelta(seconds=0.3)]
    [rec] = await failures.query()
    assert (rec.status, rec.attempts, rec.durable_group) == (FailureStatus.DEAD, 3, "svc:broken")
    assert streams.dead == [rec]


def test_a_naive_start_or_a_backward_step_is_refused() -> None:
    with pytest.raises(ValueError, match="start=2030-01-01T00:00:00 is naive"):
        VirtualClock(datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="by=.* is negative"):
        VirtualClock().advance(timedelta(seconds=-1))


async def test_a_listener_declared_with_trip_on_subscribes_and_its_failures_retry(
    tables: AsyncEngine,
) -> None:
    clock = VirtualClock()
    streams = MemoryStreams(tables, service="svc", registry=REG, options=FAST, clock=clock)
    bus = EventBus(REG, MemoryFailureStore(), durable=streams)
    calls: list[int] = []

    @bus.on(OrderPaid, durable=True, name="grant", trip_on=(ConnectionError,))
    async def grant(e: OrderPaid) -> None:
        calls.append(e.order_id)
        if len(calls) == 1:
            raise ConnectionError("the API is down")

    async with tables.begin() as conn:
        await bus.publish(OrderPaid(order_id=1), conn)
    assert await streams.drain() == 1 and calls == [1]
    clock.advance(timedelta(seconds=1))
    assert await streams.drain() == 1 and calls == [1, 1]
    with pytest.raises(TypeError, match="trip_on"):
        bus.on(OrderPaid, print, durable=True, name="bad", trip_on=("not an exception",))  # type: ignore[call-overload]


async def test_a_stop_during_the_relays_statement_returns_its_connection(
    tables: AsyncEngine,
) -> None:
    """Leaving the bus while the background relay waits on SQLite's lock lets the statement
    finish: cancelled, it got its connection invalidated, whose close task never ends and
    hung the event loop's shutdown."""
    pool = tables.pool
    assert isinstance(pool, sa.pool.QueuePool)
    streams = MemoryStreams(tables, service="svc", registry=REG, options=FAST, create_tables=False)
    bus = EventBus(REG, MemoryFailureStore(), durable=streams)
    bus.on(OrderPaid, print, durable=True, name="p")
    async with tables.connect() as holder, anyio.create_task_group() as tg:
        await holder.begin()
        await holder.execute(sa.delete(outbox))  # SQLite's write lock, till the rollback

        async def release() -> None:
            await anyio.sleep(0.2)
            await holder.rollback()

        async with bus:
            await wait_until(lambda: pool.checkedout() == 2, what="the relay's claim")
            tg.start_soon(release)
    assert pool.checkedout() == 0
    assert orphaned_closes() == []


async def test_a_stop_during_a_listeners_transaction_returns_its_connection(
    tables: AsyncEngine,
) -> None:
    """A listener taking ``tx``, cancelled by the stop, leaves its rollback and its
    connection's return to the pool unharmed."""
    streams = MemoryStreams(tables, service="svc", registry=REG, options=FAST)
    bus = EventBus(REG, MemoryFailureStore(), durable=streams)
    inside = anyio.Event()

    @bus.on(OrderPaid, durable=True, name="slow")
    async def slow(e: OrderPaid, tx: AsyncConnection) -> None:
        await tx.execute(sa.select(1))
        inside.set()
        await anyio.sleep_forever()

    async with bus:
        async with tables.begin() as conn:
            await bus.publish(OrderPaid(order_id=1), conn)
        with anyio.fail_after(10):
            await inside.wait()
    assert orphaned_closes() == []
