"""Entries that are not envelopes of the group's event (damaged, or written by something else):
each goes to the dead-letter stream and the failure table at once; the consumer, the
transport and the bus keep running, and the events after it are delivered."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import EventBus, FailureStatus, MemoryFailureStore
from eventbus.durable import RedisStreams
from tests.durable.conftest import Factory, entries, wait_until
from tests.durable.entries import GOOD
from tests.durable.events import REG, OrderPaid


async def publish(streams: RedisStreams, engine: AsyncEngine, *order_ids: int) -> list[str]:
    async with engine.begin() as conn:
        return await streams.publish_many([OrderPaid(order_id=i) for i in order_ids], conn)


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        pytest.param({"headers": "not json"}, "headers are not a JSON object", id="headers"),
        pytest.param({"headers": "[1, 2]"}, "headers are not a JSON object", id="header-list"),
        pytest.param({"headers": b"\xff\xfe"}, "field 'headers' is not UTF-8", id="non-utf8"),
        pytest.param({"payload": b"\xc3("}, "field 'payload' is not UTF-8", id="payload-bytes"),
        pytest.param({"seq": "x"}, "seq 'x' is not an int", id="seq"),
        pytest.param({"name": "order.refunded"}, "for 'order.refunded'", id="other-event"),
        pytest.param({"v": "9"}, "version '9'", id="version"),
    ],
)
async def test_a_damaged_entry_is_dead_lettered_and_later_events_flow(
    make_streams: Factory,
    engine: AsyncEngine,
    client: Redis,
    damage: dict[Any, Any],
    problem: str,
) -> None:
    got: list[int] = []
    store = MemoryFailureStore()
    streams = make_streams(failures=store)
    streams.subscribe(OrderPaid, lambda e: got.append(e.order_id), name="grant")
    stream = streams.keys.stream("order.paid")
    async with streams:
        await publish(streams, engine, 1)
        await wait_until(lambda: got == [1], what="the first event")
        damaged_id = await client.xadd(stream, {**GOOD, **damage})
        await publish(streams, engine, 3)
        await wait_until(lambda: got == [1, 3], what="the event after the damaged one")
        await wait_until(lambda: streams.statistics().group("grant").dead == 1, what="the dead")
        assert streams.running
    [(_, dead)] = await entries(client, streams.keys.dead("order.paid"))
    assert dead[b"dead_entry"] == damaged_id and dead[b"dead_group"] == b"svc:grant"
    for field, value in damage.items():  # kept as it was, bytes included
        assert dead[field.encode()] == (value if isinstance(value, bytes) else value.encode())
    assert problem in dead[b"dead_error"].decode()
    [rec] = await store.query()
    assert (rec.status, rec.listener, rec.attempts) == (FailureStatus.DEAD, "grant", 1)
    assert rec.error_type.endswith("EnvelopeError") and problem in rec.message
    assert await client.xpending(stream, "svc:grant") == {
        "pending": 0,
        "min": None,
        "max": None,
        "consumers": [],
    }


async def test_through_the_bus_a_damaged_entry_never_stops_the_bus(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    """Regression test: a damaged entry crashed the bus at each start until Redis' delivery
    count dead-lettered it (the reviewer's e9c: three crashed runs)."""
    got: list[int] = []
    store = MemoryFailureStore()
    streams = make_streams()
    bus = EventBus(REG, store, durable=streams)
    bus.on(OrderPaid, lambda e: got.append(e.order_id), durable=True, name="grant")
    async with bus:
        await client.xadd(streams.keys.stream("order.paid"), {**GOOD, "headers": "{bad"})
        async with engine.begin() as conn:
            await bus.publish(OrderPaid(order_id=5), conn)
        await wait_until(lambda: got == [5], what="the good event")
        await wait_until(lambda: _dead(store), what="the dead row in the bus's store")
        assert bus.running and streams.running


async def _dead(store: MemoryFailureStore) -> bool:
    return bool(await store.query(status=FailureStatus.DEAD))
