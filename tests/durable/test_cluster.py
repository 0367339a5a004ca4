"""Durable events on a real Redis Cluster (three masters, built for the session): the core
flow (publish, relay, consume, acknowledge), dead letters and their redelivery, the janitor,
republish, and the server check of every master. ``order.paid`` and ``order.shipped`` hash to
slots on different masters, so one relay batch and one status call span two nodes."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime

import anyio
import pytest
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from eventbus import FailureStatus, MemoryFailureStore
from eventbus.backends.redis import UnsafeRedisError
from eventbus.durable import RedisStreams
from tests.durable.conftest import FAST, effect_rows, wait_until
from tests.durable.events import REG, OrderPaid, OrderShipped, effects
from tests.redis_cluster import RedisClusterServer

pytestmark = pytest.mark.slow


@pytest.fixture
async def cluster(redis_cluster: RedisClusterServer) -> AsyncIterator[RedisCluster]:
    """A cluster client as docs/durable.md advises one: no retries of its own, a timeout above
    the blocking reads; every master flushed first."""
    redis_cluster.flushall()
    client = RedisCluster(
        host="127.0.0.1",
        port=redis_cluster.nodes[0].port,
        socket_timeout=3.0,
        retry=Retry(NoBackoff(), 0),
    )
    await client.initialize()
    yield client
    await client.aclose()


def transport(client: RedisCluster, engine: AsyncEngine, **kwargs: object) -> RedisStreams:
    kwargs.setdefault("options", FAST)
    kwargs.setdefault("failures", MemoryFailureStore())
    return RedisStreams(client, engine, service="svc", registry=REG, **kwargs)  # type: ignore[arg-type]


async def test_publish_relay_consume_and_acknowledge_across_masters(
    cluster: RedisCluster, engine: AsyncEngine
) -> None:
    shipped: list[int] = []
    since = datetime.now(UTC)

    async def grant(e: OrderPaid, tx: AsyncConnection) -> None:
        await tx.execute(
            effects.insert().values(listener="grant", event_id="", order_id=e.order_id)
        )

    streams = transport(cluster, engine)  # check_server on: every master is checked
    streams.subscribe(OrderPaid, grant, name="grant")
    streams.subscribe(OrderShipped, lambda e: shipped.append(e.order_id), name="ship")
    async with streams:
        async with engine.begin() as conn:  # one relay batch, two streams on two masters
            await streams.publish_many([OrderPaid(order_id=i) for i in range(20)], conn)
            await streams.publish_many([OrderShipped(order_id=i) for i in range(20)], conn)
        await wait_until(lambda: len(shipped) == 20, what="order.shipped's listener")
        await wait_until(lambda: _n_effects(engine, 20), what="order.paid's listener")
        # Acknowledgements go out in batches every 5 ms, after the listener returned: wait
        # for them rather than assume them.
        await wait_until(lambda: _all_acknowledged(streams), what="the acknowledgements")
        statuses = {s.event: s for s in await streams.status()}  # found on every master
        assert set(statuses) == {"order.paid", "order.shipped"}
        assert await streams.republish(since=since) == 40
        await wait_until(
            lambda: streams.statistics().group("grant").duplicates == 20, what="the repeats"
        )
        # the repeats acknowledged too: an approximate XTRIM removes whole stream nodes only,
        # so one pending repeat keeps the node that holds every entry
        await wait_until(lambda: _all_acknowledged(streams), what="the repeats' acknowledgements")
        assert await streams.sweep() > 0  # the janitor, on both masters
    assert sorted(e.order_id for e in await effect_rows(engine)) == list(range(20))
    stats = streams.statistics()
    assert stats.relay.published == 80 and stats.relay.errors == 0
    url = f"redis+cluster://127.0.0.1:{cluster.get_default_node().port}"
    command = [sys.executable, "-m", "eventbus", "streams", "status", "--redis", url]
    done = await anyio.run_process([*command, "--no-db", "--json"])
    shown = {s["event"]: s for s in json.loads(done.stdout)["streams"]}
    assert set(shown) == {"order.paid", "order.shipped"}
    assert [g["name"] for g in shown["order.shipped"]["groups"]] == ["svc:ship"]


async def _all_acknowledged(streams: RedisStreams) -> bool:
    return all(g.pending == 0 for s in await streams.status() for g in s.groups)


async def _n_effects(engine: AsyncEngine, n: int) -> bool:
    return len(await effect_rows(engine)) >= n


async def test_dead_letters_and_their_redelivery_on_a_cluster(
    cluster: RedisCluster, engine: AsyncEngine
) -> None:
    store = MemoryFailureStore()
    fixed = False
    handled: list[int] = []

    async def fragile(e: OrderShipped) -> None:
        if not fixed:
            raise RuntimeError("down")
        handled.append(e.order_id)

    streams = transport(cluster, engine, options=replace(FAST, max_deliveries=2), failures=store)
    streams.subscribe(OrderShipped, fragile, name="fragile")
    async with streams:
        async with engine.begin() as conn:
            await streams.publish(OrderShipped(order_id=7), conn, correlation_id="c-7")
        await wait_until(lambda: streams.statistics().group("fragile").dead == 1, what="dead")
        [rec] = await store.query(correlation="c-7")
        assert (rec.status, rec.attempts) == (FailureStatus.DEAD, 2)
        assert await cluster.xlen(streams.keys.dead("order.shipped")) == 1
        fixed = True
        await streams.redeliver(rec)
        await wait_until(lambda: handled == [7], what="the redelivery")
        await wait_until(lambda: _resolved(store, rec.id), what="the row resolved")


async def _resolved(store: MemoryFailureStore, fid: str) -> bool:
    rec = await store.get(fid)
    return rec is not None and rec.status is FailureStatus.RESOLVED


async def test_the_janitor_keeps_entries_for_a_declared_group_on_a_cluster(
    cluster: RedisCluster, engine: AsyncEngine
) -> None:
    got: list[int] = []
    streams = transport(cluster, engine)
    streams.subscribe(OrderPaid, lambda e: got.append(e.order_id), name="grant")
    await streams.declare_group("order.paid", "audit:log")
    async with streams:
        async with engine.begin() as conn:
            await streams.publish_many([OrderPaid(order_id=i) for i in range(300)], conn)
        await wait_until(lambda: len(got) == 300, what="300 events")
        await wait_until(lambda: _acked(streams), what="the acknowledgements")
        assert await streams.sweep() == 0
        await streams.forget_group("order.paid", "audit:log")
        assert await streams.sweep() > 0


async def _acked(streams: RedisStreams) -> bool:
    [status] = await streams.status(["order.paid"])
    return all(g.pending == 0 and g.lag == 0 for g in status.groups)


async def test_an_evicting_policy_on_any_master_is_refused_at_start(
    cluster: RedisCluster, redis_cluster: RedisClusterServer, engine: AsyncEngine
) -> None:
    third = redis_cluster.nodes[2]
    node = cluster.get_node(host="127.0.0.1", port=third.port)
    assert node is not None
    # the policy counts under a memory limit only (without one, nothing is evicted)
    await cluster.config_set("maxmemory", "1gb", target_nodes=node)
    await cluster.config_set("maxmemory-policy", "allkeys-lru", target_nodes=node)
    try:
        streams = transport(cluster, engine)
        streams.subscribe(OrderPaid, lambda e: None, name="grant")
        with pytest.raises(UnsafeRedisError, match=rf"127.0.0.1:{third.port}.*allkeys-lru"):
            async with streams:
                pass
    finally:
        await cluster.config_set("maxmemory", "0", target_nodes=node)
        await cluster.config_set("maxmemory-policy", "noeviction", target_nodes=node)


async def test_each_master_is_checked_by_the_one_server_check_and_named_in_its_warning(
    cluster: RedisCluster,
    redis_cluster: RedisClusterServer,
    engine: AsyncEngine,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The masters keep nothing on disk (the test servers' settings): the start-up check
    (eventbus.backends.redis.check_redis_server) warns about each one, by its address, with
    what durable events do after a loss."""
    streams = transport(cluster, engine)
    with caplog.at_level(logging.WARNING, logger="eventbus.redis"):
        async with streams:
            pass
    warned = [r.getMessage() for r in caplog.records if r.name == "eventbus.redis"]
    assert len(warned) == len(redis_cluster.nodes)
    for address in redis_cluster.addresses:
        [line] = [w for w in warned if w.startswith(f"Redis at {address}/0 ")]
        assert "can lose durable events: no persistence" in line
        assert "republish(since=...)" in line
