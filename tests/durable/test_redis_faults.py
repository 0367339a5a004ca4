"""What Redis does to durable events, on the real server: an outage under load (F5), trimming
(F12), a crash with AOF (F13), data loss (F14), an evicting policy (F15), a group destroyed
at run time (F20)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from eventbus import Event
from eventbus.backends.redis import UnsafeRedisError, make_redis_client
from eventbus.durable import EntriesLost, GroupRecreated, RedisStreams, StreamCapped
from tests.durable.conftest import FAST, App, Factory, effect_rows, entries, wait_until
from tests.durable.events import OrderPaid, effects
from tests.redis_server import RedisServer

STREAM = "eventbus:evt:{order.paid}"


async def publish(streams: RedisStreams, engine: AsyncEngine, *order_ids: int) -> list[str]:
    async with engine.begin() as conn:
        return await streams.publish_many([OrderPaid(order_id=i) for i in order_ids], conn)


async def effect_listener(e: OrderPaid, tx: AsyncConnection) -> None:
    await tx.execute(effects.insert().values(listener="grant", event_id="", order_id=e.order_id))


async def commands(client: Redis, name: str) -> int:
    """How many times the server ran command *name* (``INFO commandstats``)."""
    stats: Any = await client.info("commandstats")
    return int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))


# -- F15: an evicting policy -----------------------------------------------------------------------


@pytest.fixture
async def policy(client: Redis) -> AsyncIterator[Callable[[str], Awaitable[None]]]:
    """Sets the policy under a memory limit (without one, nothing is evicted)."""

    async def set_policy(value: str) -> None:
        await client.config_set("maxmemory", "1gb")
        await client.config_set("maxmemory-policy", value)

    yield set_policy
    await client.config_set("maxmemory", "0")
    await client.config_set("maxmemory-policy", "noeviction")


async def test_f15_an_evicting_policy_is_refused_at_start(
    make_streams: Factory, policy: Callable[[str], Awaitable[None]], engine: AsyncEngine
) -> None:
    await policy("allkeys-lru")
    streams = make_streams()
    streams.subscribe(OrderPaid, print, name="p")
    with pytest.raises(UnsafeRedisError, match=r"maxmemory-policy 'allkeys-lru'.*'noeviction'"):
        async with streams:
            pass
    assert not streams.running


# -- F5: Redis unreachable under load --------------------------------------------------------------


@pytest.mark.slow
async def test_f5_redis_down_for_ten_seconds_under_publish_load(
    make_streams: Factory, engine: AsyncEngine, redis_server: RedisServer, redis_url: str
) -> None:
    client = make_redis_client(redis_url, socket_timeout=1.0, max_connections=32)
    streams = make_streams(redis=client)
    streams.subscribe(OrderPaid, effect_listener, name="grant")
    backlog_seen = 0
    published = 0
    try:
        async with streams:
            start = time.monotonic()
            resumed = False
            while time.monotonic() - start < 12:
                await publish(streams, engine, *range(published, published + 5))
                published += 5
                elapsed = time.monotonic() - start
                if 1 <= elapsed and not resumed and redis_server.proc is not None:
                    if elapsed < 11:
                        redis_server.pause()  # idempotent: SIGSTOP
                    else:
                        redis_server.resume()
                        resumed = True
                backlog_seen = max(backlog_seen, streams.statistics().relay.backlog or 0)
                await anyio.sleep(0.1)
            redis_server.resume()
            await wait_until(
                lambda: _count_effects(engine, published), within=30, what="every effect"
            )
            stats = streams.statistics()
    finally:
        redis_server.resume()
        await client.aclose()
    assert backlog_seen >= 200  # about 10 s of 50 events/s waited in the outbox
    assert stats.relay.errors >= 1
    reader = make_redis_client(redis_url)
    try:
        found = await entries(reader, STREAM)
    finally:
        await reader.aclose()
    ids = Counter(fields[b"event_id"] for _, fields in found)
    assert len(ids) == published and set(ids.values()) == {1}  # none lost, none added twice
    orders = Counter(e.order_id for e in await effect_rows(engine))
    assert sorted(orders) == list(range(published)) and set(orders.values()) == {1}


async def _count_effects(engine: AsyncEngine, n: int) -> bool:
    return len(await effect_rows(engine)) >= n


# -- F12: trimming -----------------------------------------------------------------------------


async def test_f12_the_janitor_trims_nothing_a_stalled_group_still_needs(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    streams = make_streams(options=replace(FAST, relay_batch=500))
    got: list[int] = []
    streams.subscribe(OrderPaid, lambda e: got.append(e.order_id), name="fast")
    await client.xgroup_create(STREAM, "other:stalled", id="0", mkstream=True)
    async with streams:
        await publish(streams, engine, *range(250))
        await wait_until(lambda: len(got) == 250, what="the fast group")
        # its acknowledgements go out every 5 ms after the calls: one still pending would hold
        # back the trim below
        await wait_until(lambda: _none_pending(client, "svc:fast"), what="the fast group's acks")
        stalled: Any = await client.xreadgroup(
            "other:stalled", "zombie", {STREAM: ">"}, count=120
        )  # delivered, never acknowledged
        pending_ids = [entry_id for entry_id, _ in stalled[0][1]]
        assert await streams.sweep() == 0
        assert await client.xlen(STREAM) == 250  # the oldest pending entry is the first
        await client.xack(STREAM, "other:stalled", *pending_ids[:110])  # progress...
        await streams.sweep()
        kept = [entry_id for entry_id, _ in await entries(client, STREAM)]
        assert set(pending_ids[110:]) <= set(kept)  # still pending: kept
        assert len(kept) >= 250 - 110 and len(kept) < 250  # trimmed whole nodes only
        rest: Any = await client.xreadgroup("other:stalled", "zombie", {STREAM: ">"}, count=500)
        assert len(rest[0][1]) == 130  # everything undelivered was still there
    assert streams.statistics().janitor.trimmed == 250 - len(kept)


async def test_f12_a_maxlen_cap_raises_alarms_and_deleted_pending_ids_are_reported(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    alarms: list[Event] = []
    streams = make_streams(options=replace(FAST, maxlen=100, relay_batch=500))
    streams.notify = alarms.append
    await client.xgroup_create(STREAM, "svc:lagging", id="0", mkstream=True)
    async with streams:
        await publish(streams, engine, *range(50))
        await wait_until(lambda: _xlen(client, 50), what="50 entries")
        read: Any = await client.xreadgroup("svc:lagging", "zombie", {STREAM: ">"}, count=50)
        assert len(read[0][1]) == 50  # pending for a consumer that then died
        await publish(streams, engine, *range(50, 400))
        await wait_until(lambda: streams.statistics().relay.published == 400, what="400")
    assert await client.xlen(STREAM) < 400
    assert streams.statistics().relay.capped >= 1
    assert [type(a) for a in alarms if isinstance(a, StreamCapped)] == [StreamCapped]
    lost: list[Event] = []
    reader = make_streams()
    reader.notify = lost.append
    reader.subscribe(OrderPaid, lambda e: None, name="lagging")
    async with reader:
        await wait_until(lambda: reader.statistics().group("lagging").lost >= 1, what="alarm")
    [alarm] = [a for a in lost if isinstance(a, EntriesLost)]
    assert alarm.group == "svc:lagging" and len(alarm.entry_ids) >= 1
    assert set(alarm.entry_ids) <= {i.decode() for i, _ in read[0][1]}


async def _none_pending(client: Redis, group: str) -> bool:
    summary: Any = await client.xpending(STREAM, group)
    return int(summary["pending"]) == 0


async def _xlen(client: Redis, n: int) -> bool:
    return bool(await client.xlen(STREAM) >= n)


# -- F14 and F20: a group gone at run time ------------------------------------------------------


@pytest.mark.parametrize("loss", ["flushall", "restart"])
async def test_f14_a_lost_group_is_recreated_and_republish_restores_the_window(
    make_streams: Factory, engine: AsyncEngine, redis_server: RedisServer, redis_url: str, loss: str
) -> None:
    client = make_redis_client(redis_url, socket_timeout=2.0, max_connections=32)
    gate = anyio.Event()
    alarms: list[Event] = []

    async def gated(e: OrderPaid, tx: AsyncConnection) -> None:
        await gate.wait()
        await effect_listener(e, tx)

    # one entry in flight (a batch would read all five before the loss)
    streams = make_streams(redis=client, options=replace(FAST, concurrency=1, tx_batch=1))
    streams.notify = alarms.append
    streams.subscribe(OrderPaid, gated, name="grant")
    since = datetime.now(UTC)
    try:
        async with streams:
            await publish(streams, engine, 1, 2, 3, 4, 5)
            await wait_until(lambda: _xlen(client, 5), what="5 entries")
            if loss == "flushall":
                await client.flushall()
            else:
                redis_server.restart()  # no persistence: everything is gone
            gate.set()  # the one call in flight finishes; the other 4 entries are gone
            await wait_until(
                lambda: streams.statistics().group("grant").recreated >= 1, what="recovery"
            )
            await wait_until(lambda: _count_effects(engine, 1), what="the call in flight")
            # The test asks the server on a client opened after the loss: a connection pooled
            # before a restart fails its next command once (make_redis_client says so), and
            # whether INFO gets such a connection from the streams' pool is up to the pool.
            probe = make_redis_client(redis_url, socket_timeout=2.0, max_connections=2)
            try:
                before = await commands(probe, "xreadgroup")
                await anyio.sleep(1.0)  # measuring a rate: a hot loop would run thousands
                assert await commands(probe, "xreadgroup") - before < 20
            finally:
                await probe.aclose()
            assert len(await effect_rows(engine)) == 1
            assert await streams.republish(since=since) == 5
            await wait_until(lambda: _count_effects(engine, 5), what="the republished window")
            stats = streams.statistics().group("grant")
    finally:
        await client.aclose()
    assert sorted(e.order_id for e in await effect_rows(engine)) == [1, 2, 3, 4, 5]
    assert stats.duplicates == 1  # the one processed before the loss, skipped by the inbox
    assert any(isinstance(a, GroupRecreated) for a in alarms)


async def test_f20_a_group_destroyed_at_run_time_is_recovered_with_bounded_retries(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    got: list[int] = []
    streams = make_streams()
    streams.subscribe(OrderPaid, lambda e: got.append(e.order_id), name="p")
    async with streams:
        await client.xgroup_destroy(STREAM, "svc:p")
        await wait_until(lambda: streams.statistics().group("p").recreated == 1, what="once")
        await publish(streams, engine, 1)
        await wait_until(lambda: got == [1], what="the next event")
        # Destroyed over and over: each recovery waits longer than the one before.
        before = await commands(client, "xgroup|create")
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            await client.xgroup_destroy(STREAM, "svc:p")
            await anyio.sleep(0.02)
        recreated = streams.statistics().group("p").recreated - 1
        creates = await commands(client, "xgroup|create") - before
        await publish(streams, engine, 2)
        # Recreated at 0, the group gets the stream's entries again: at least once.
        await wait_until(lambda: 2 in got, what="delivery after the storm", within=20)
    assert 1 <= recreated <= 6  # backoff 0.2, 0.4, 0.8 s...: not one per destroy (100)
    assert creates <= 2 * (recreated + 1)  # the stream and the redelivery stream


# -- F13: a crash with AOF, real processes --------------------------------------------------------


@pytest.fixture
def aof_redis() -> Any:
    with RedisServer(appendonly=True) as server:
        yield server


@pytest.mark.slow
async def test_f13_redis_crash_with_aof_loses_nothing_and_the_inbox_absorbs_repeats(
    apps: Callable[..., Awaitable[App]], engine: AsyncEngine, aof_redis: RedisServer, tmp_path: Path
) -> None:
    url = aof_redis.url
    consumer = await apps("--listener", "grant=slow:0.05", redis=url)
    await apps("--publish", "60", "--no-relay", redis=url, ready="published")
    await wait_until(lambda: _count_effects(engine, 10), what="some effects")
    aof_redis.crash()
    aof_redis.start()
    await wait_until(lambda: _count_effects(engine, 60), within=40, what="every effect")
    stats = await consumer.stop()
    assert stats["groups"][0]["recreated"] == 0  # streams, groups and PELs survived
    orders = Counter(e.order_id for e in await effect_rows(engine))
    assert sorted(orders) == list(range(60)) and set(orders.values()) == {1}
    client = make_redis_client(url)
    try:
        assert await client.xlen(STREAM) == 60
    finally:
        await client.aclose()


async def test_f15_through_the_bus_the_refusal_reaches_the_caller(
    make_streams: Factory, policy: Callable[[str], Awaitable[None]]
) -> None:
    """Regression test: a transport refusing to start hung ``async with bus:`` (the bus's
    task group was left waiting for the workers it had already started)."""
    from eventbus import EventBus, MemoryFailureStore
    from tests.durable.events import REG

    await policy("allkeys-lru")
    bus = EventBus(REG, MemoryFailureStore(), durable=make_streams())
    with anyio.fail_after(10), pytest.raises(UnsafeRedisError, match="allkeys-lru"):
        async with bus:
            pass
    assert not bus.running
