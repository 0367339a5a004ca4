"""Handing events back: ``republish`` after Redis lost data, ``redeliver`` of a dead failure
(what ``failures retry`` does), with the interleavings that matter forced by fault points."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus.durable import RedisStreams
from tests.durable.conftest import FAST, Factory, wait_until
from tests.durable.events import OrderPaid


async def publish(streams: RedisStreams, engine: AsyncEngine, *order_ids: int, **kw: Any) -> None:
    async with engine.begin() as conn:
        await streams.publish_many([OrderPaid(order_id=i) for i in order_ids], conn, **kw)


async def test_republish_clears_publish_keys_before_any_relay_can_claim_the_rows(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    """Regression test: republish reset the rows first and deleted their publish keys after;
    a relay claiming a row in between found the old key, counted it deduplicated, and marked
    it published without adding it (the reviewer's e18b: 200 of 20,000 events lost)."""
    opts = replace(FAST, lease=10.0)  # publish keys outlive the test (2 x lease after marking)
    since = datetime.now(UTC)
    publisher = make_streams(options=opts)
    async with publisher:
        await publish(publisher, engine, *range(50))
        await wait_until(lambda: publisher.statistics().relay.published == 50, what="50")
    stream = publisher.keys.stream("order.paid")
    await client.delete(stream)  # Redis lost the stream
    other = make_streams(options=opts, consumer="other-relay")
    assert other.relay is not None
    in_between: list[int] = []

    async def fault(point: str) -> None:
        if point == "republish":  # another process's relay runs between republish's steps
            assert other.relay is not None
            in_between.append(await other.relay.publish_batch())

    operator = make_streams(options=replace(opts, relay=False), _fault=fault)
    try:
        assert await operator.republish(since=since) == 50
        while await other.relay.publish_batch():
            pass
    finally:
        await other.relay.aclose()
    assert in_between and other.relay.counters.deduplicated == 0
    assert await client.xlen(stream) == 50
