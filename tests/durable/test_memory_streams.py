"""``eventbus.testing.MemoryStreams`` alone: ``drain()`` without a running transport, and
scheduled events and retries on a virtual clock (what the conformance suite cannot share
with ``RedisStreams``, which runs on the real clock)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import EventBus, FailureStatus, MemoryFailureStore
from eventbus.durable import create_durable_tables
from eventbus.testing import MemoryStreams, VirtualClock
from tests.durable.conftest import FAST
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
