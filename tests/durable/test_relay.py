"""The relay's fence: a relay that stalls after its claim (SIGSTOP, a VM pause, a long GC)
and resumes after its lease ran out adds nothing, whatever became of the publish keys."""

from __future__ import annotations

from dataclasses import replace

import anyio
import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import Event, EventBus, MemoryFailureStore
from eventbus.durable import (
    BacklogHigh,
    BacklogNormal,
    DurableOptions,
    RedisStreams,
    create_durable_tables,
)
from tests.durable.conftest import FAST, Factory, entries, wait_until
from tests.durable.events import REG, OrderPaid


async def test_f4_a_relay_stalled_before_its_xadd_past_its_lease_adds_nothing(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    """Regression test: relay A passed its lease check, stalled before its XADD for longer
    than lease + settle; relay B published and marked the row, its publish key expired, and
    A then added the event a second time (the reviewer's e1_relay_stall)."""
    opts = replace(FAST, lease=1.0)  # the publish key lives 2 s after B marks the row
    stalled, resume = anyio.Event(), anyio.Event()

    async def fault(point: str) -> None:
        if point == "adding":  # after the lease check, before the XADD
            stalled.set()
            await resume.wait()

    a = make_streams(options=opts, consumer="relay-a", _fault=fault)
    b = make_streams(options=opts, consumer="relay-b")
    assert a.relay is not None and b.relay is not None
    await create_durable_tables(engine)
    async with engine.begin() as conn:
        [event_id] = await a.publish_many([OrderPaid(order_id=1)], conn)
    key = a.keys.published("order.paid", event_id)
    claimed: list[int] = []

    async def run_a() -> None:
        assert a.relay is not None
        claimed.append(await a.relay.publish_batch())

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_a)
            with anyio.fail_after(5):
                await stalled.wait()
            async with b:  # claims once A's lease has run out, publishes, marks
                await wait_until(lambda: b.statistics().relay.published == 1, what="B's publish")
                await wait_until(lambda: _gone(client, key), what="the publish key to expire")
            resume.set()
    finally:
        await a.relay.aclose()
    found = await entries(client, a.keys.stream("order.paid"))
    assert [f[b"event_id"] for _, f in found] == [event_id.encode()]  # added once
    assert claimed == [1]
    assert (a.relay.counters.published, a.relay.counters.leases_lost) == (0, 1)


async def _gone(client: Redis, key: str) -> bool:
    return not await client.exists(key)


async def test_the_backlog_statistic_is_kept_fresh_while_the_relay_is_saturated(
    make_streams: Factory, engine: AsyncEngine
) -> None:
    """Review risk 10b: the backlog was counted only when a batch came back short, so a
    saturated relay (the moment it matters) reported none, or a stale count."""
    await create_durable_tables(engine)
    quiet = make_streams(options=replace(FAST, relay=False))
    async with engine.begin() as conn:
        await quiet.publish_many([OrderPaid(order_id=i) for i in range(3000)], conn)

    async def slow_batches(point: str) -> None:
        if point == "claimed":
            await anyio.sleep(0.01)

    streams = make_streams(options=replace(FAST, relay_batch=50), _fault=slow_batches)
    seen: list[int] = []
    async with streams:
        await wait_until(lambda: _backlog_seen(streams, seen), what="a backlog count under load")
        await wait_until(lambda: streams.statistics().relay.backlog == 0, what="the end")
    assert 0 < seen[0] < 3000


def _backlog_seen(streams: RedisStreams, seen: list[int]) -> bool:
    backlog = streams.statistics().relay.backlog
    if backlog:
        seen.append(backlog)
    return bool(seen)


async def test_leaving_at_once_publishes_every_row_this_process_committed(
    make_streams: Factory, engine: AsyncEngine
) -> None:
    """Regression test (a short-lived publisher on SQLite): ``async with bus:``, 5 events in
    5 transactions, leave. The stop came while the relay's first batch was in flight, and the
    loop returned without claiming the rows committed meanwhile: 1-5 rows stayed in the
    outbox in 6 of 6 runs."""
    await create_durable_tables(engine)
    left: list[int] = []
    for run in range(50):
        streams = make_streams(options=DurableOptions(shutdown_grace=5.0), check_server=False)
        bus = EventBus(REG, MemoryFailureStore(), durable=streams)
        async with bus:
            for i in range(5):
                async with engine.begin() as conn:
                    await bus.publish(OrderPaid(order_id=run * 5 + i), conn)
        left.append((await streams.rt.outbox.backlog(engine)).count)
    assert left == [0] * 50


async def test_rows_a_stop_could_not_publish_within_the_grace_are_logged_with_their_count(
    make_streams: Factory, engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    await create_durable_tables(engine)
    stuck = anyio.Event()

    async def hang(point: str) -> None:
        if point == "claimed":  # as a Redis that never answers the batch's XADD
            stuck.set()
            await anyio.sleep_forever()

    streams = make_streams(options=replace(FAST, shutdown_grace=0.3), _fault=hang)
    with anyio.fail_after(10):
        async with streams:
            async with engine.begin() as conn:
                await streams.publish_many([OrderPaid(order_id=i) for i in range(3)], conn)
            await stuck.wait()
    [line] = [r.getMessage() for r in caplog.records if "stopped after" in r.getMessage()]
    assert "shutdown_grace=0.3 s with 3 rows unpublished in the outbox" in line
    assert (await streams.rt.outbox.backlog(engine)).count == 3  # left for the next relay


async def test_a_backlog_past_its_bound_is_reported_once_per_episode(
    make_streams: Factory, engine: AsyncEngine
) -> None:
    """Backpressure: past ``backlog_high`` the statistics say so and one ``backlog-high``
    event fires; back at half the bound, one ``backlog-normal``. No publish is refused."""
    await create_durable_tables(engine)
    redis_down = True

    async def outage(point: str) -> None:
        if point == "claimed" and redis_down:  # the claim's rows come back after the lease
            raise RedisConnectionError("Redis is unreachable (a test's outage)")

    streams = make_streams(options=replace(FAST, backlog_high=20), _fault=outage)
    alarms: list[Event] = []
    streams.notify = alarms.append

    def high() -> bool:
        return streams.statistics().relay.backlog_high

    def episodes() -> list[str]:
        return [type(a).__name__ for a in alarms if isinstance(a, BacklogHigh | BacklogNormal)]

    async with streams:
        await _publish(streams, engine, 20)
        await wait_until(lambda: streams.statistics().relay.backlog == 20, what="a count")
        assert not high() and episodes() == []  # at the bound is not past it
        await _publish(streams, engine, 5)  # accepted while high, as every publish
        await wait_until(high, what="backlog_high")
        await _publish(streams, engine, 5)
        await wait_until(lambda: streams.statistics().relay.backlog == 30, what="30 counted")
        assert episodes() == ["BacklogHigh"]
        redis_down = False
        await wait_until(lambda: not high(), what="the end of the episode")
        assert episodes() == ["BacklogHigh", "BacklogNormal"]
        redis_down = True
        await _publish(streams, engine, 21)
        await wait_until(lambda: len(episodes()) == 3, what="a second episode")
    first = next(a for a in alarms if isinstance(a, BacklogHigh))
    assert (first.backlog, first.bound) == (25, 20)
    assert episodes() == ["BacklogHigh", "BacklogNormal", "BacklogHigh"]


async def _publish(streams: RedisStreams, engine: AsyncEngine, n: int) -> None:
    async with engine.begin() as conn:
        await streams.publish_many([OrderPaid(order_id=i) for i in range(n)], conn)
