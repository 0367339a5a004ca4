"""The Redis pool against the transport's needs: one connection per durable listener for its
blocking read, plus a few; checked at start (and for a listener added while running), with a
message that says what to change; a pool the transport built itself grows to fit."""

from __future__ import annotations

from dataclasses import replace

import anyio
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus.backends.redis import make_redis_client
from eventbus.durable import DurableOptions, RedisStreams
from tests.durable.conftest import FAST, Factory, wait_until
from tests.durable.events import OrderPaid


def listen(streams: RedisStreams, n: int, got: set[int]) -> None:
    for i in range(n):
        streams.subscribe(OrderPaid, lambda e, i=i: got.add(i), name=f"l{i}")


async def test_a_pool_too_small_for_the_listeners_is_refused_with_what_to_change(
    make_streams: Factory, redis_url: str
) -> None:
    """Regression test: docs/durable.md's client (20 connections) and 25 durable listeners failed
    at start, after the pool's 5 s timeout, with a bare "No connection available"."""
    client = make_redis_client(redis_url)  # as docs/durable.md builds it: 20 connections
    try:
        streams = make_streams(redis=client, options=DurableOptions())
        listen(streams, 25, set())
        with anyio.fail_after(3), pytest.raises(ValueError) as caught:
            async with streams:
                pass
    finally:
        await client.aclose()
    assert str(caught.value) == (
        "the Redis client's pool has 20 connections, but the durable transport needs 33: one "
        "per durable listener (25) for its blocking read, plus 8 for the relay, "
        "acknowledgements, leases and the janitor; build the client with "
        "make_redis_client(url, max_connections=33) or more (RedisCluster(..., "
        "max_connections=33) per master), or pass the URL and the transport sizes its own pool"
    )
    assert not streams.running


async def test_a_socket_timeout_below_the_blocking_reads_is_refused(
    make_streams: Factory, redis_url: str
) -> None:
    client = make_redis_client(redis_url, socket_timeout=0.5, max_connections=64)
    try:
        streams = make_streams(redis=client, options=replace(FAST, block=2.0))
        listen(streams, 1, set())
        with pytest.raises(ValueError, match=r"socket_timeout=0.5 s.*block=2.0 s"):
            async with streams:
                pass
    finally:
        await client.aclose()


async def test_a_listener_added_while_running_is_checked_too(
    make_streams: Factory, redis_url: str
) -> None:
    client = make_redis_client(redis_url, socket_timeout=3.0, max_connections=10)
    try:
        streams = make_streams(redis=client)
        listen(streams, 2, set())
        async with streams:
            with pytest.raises(ValueError, match=r"needs 11: one per durable listener \(3\)"):
                streams.subscribe(OrderPaid, print, name="third")  # 3 + 8 > 10
    finally:
        await client.aclose()
    assert [lst.name for lst in streams.listeners()] == ["l0", "l1"]


@pytest.mark.slow
async def test_a_pool_built_from_a_url_grows_to_fit_the_listeners(
    make_streams: Factory, redis_url: str, engine: AsyncEngine
) -> None:
    got: set[int] = set()
    # The transport owns this client: 64 connections at first, 78 needed.
    streams = make_streams(redis=redis_url, options=replace(FAST, block=2.0))
    listen(streams, 70, got)
    async with streams:
        async with engine.begin() as conn:
            await streams.publish(OrderPaid(order_id=1), conn)
        await wait_until(lambda: len(got) == 70, what="every listener", within=20)
