"""Handing events back: ``republish`` after Redis lost data, ``redeliver`` of a dead failure
(what ``failures retry`` does), with the interleavings that matter forced by fault points."""

from __future__ import annotations

import sys
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest
import sqlalchemy as sa
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import EventBus, FailureStatus, MemoryFailureStore
from eventbus.backends.sql import SqlFailureStore
from eventbus.durable import Delivery, RedisStreams, current_delivery
from eventbus.durable._tables import outbox
from tests.durable.conftest import FAST, Factory, wait_until
from tests.durable.events import REG, OrderPaid


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


META = {
    "aggregate_key": "order-7",
    "correlation_id": "corr-1",
    "causation_id": "cause-1",
    "headers": {"tenant": "acme"},
}


def _seen(d: Delivery) -> tuple[object, ...]:
    return (
        d.event_id,
        d.seq,
        d.occurred_at,
        d.aggregate_key,
        d.correlation_id,
        d.causation_id,
        d.headers,
    )


@pytest.mark.parametrize("source", ["dead letter", "outbox", "failure row"])
async def test_a_redelivered_dead_failure_keeps_its_whole_envelope(
    make_streams: Factory, engine: AsyncEngine, client: Redis, source: str
) -> None:
    """Regression test: ``failures retry`` rebuilt the envelope from the failure row alone
    (aggregate key, causation and correlation ids, headers lost), and the row carried no
    causation or correlation id, so ``failures retry --correlation`` never found it."""
    store = MemoryFailureStore()
    fixed = False
    seen: list[tuple[object, ...]] = []

    async def fragile(e: OrderPaid) -> None:
        seen.append(_seen(current_delivery()))
        if not fixed:
            raise RuntimeError("down")

    streams = make_streams(options=replace(FAST, max_deliveries=1), failures=store)
    streams.subscribe(OrderPaid, fragile, name="fragile")
    async with streams:
        await publish(streams, engine, 1, **META)
        await wait_until(lambda: streams.statistics().group("fragile").dead == 1, what="dead")
        [rec] = await store.query(correlation="corr-1")  # found by its correlation id
        assert (rec.causation_id, rec.correlation_id) == ("cause-1", "corr-1")
        if source != "dead letter":  # the dead letter is gone (trimmed by its cap, deleted)
            await client.delete(streams.keys.dead("order.paid"))
        if source == "failure row":  # and the outbox row purged after its retention
            async with engine.begin() as conn:
                await conn.execute(sa.delete(outbox))
        fixed = True
        await streams.redeliver(rec)
        await wait_until(lambda: len(seen) == 2, what="the redelivery")
    first, again = seen
    if source == "failure row":  # what the row keeps: ids, seq, time, causation
        assert again[:3] == first[:3] and again[4:6] == first[4:6]
    else:
        assert again == first
    assert first[3:] == ("order-7", "corr-1", "cause-1", {"tenant": "acme"})


class Fragile:
    """A durable listener that fails until ``fixed``; what it handled then."""

    def __init__(self) -> None:
        self.fixed = False
        self.handled: list[int] = []

    async def __call__(self, e: OrderPaid) -> None:
        if not self.fixed:
            raise RuntimeError("down")
        self.handled.append(e.order_id)


async def test_a_pending_failure_whose_redelivery_was_lost_is_redriven(
    make_streams: Factory, engine: AsyncEngine, client: Redis, db_url: str, redis_url: str
) -> None:
    """A dead row handed back is ``pending`` until its group's outcome; if that redelivery
    entry is lost (trimmed, flushed), ``failures retry`` skips the row for ever. ``redrive``
    (API and ``streams redrive``) hands it back once more, and refuses while the earlier
    redelivery is still on its way."""
    store = SqlFailureStore(engine)
    fragile = Fragile()
    opts = replace(FAST, max_deliveries=1)
    streams = make_streams(options=opts)
    bus = EventBus(REG, store, durable=streams)
    bus.on(OrderPaid, fragile, durable=True, name="fragile")
    async with bus:
        await publish(streams, engine, 4)
        await wait_until(lambda: streams.statistics().group("fragile").dead == 1, what="dead")
    [rec] = await store.query()
    operator = make_streams(options=replace(opts, relay=False), failures=store)
    await operator.redeliver(rec)  # no consumer runs: the entry waits in the group's stream
    pending = await store.get(rec.id)
    assert pending is not None and pending.status is FailureStatus.PENDING
    with pytest.raises(
        ValueError, match=r"still on its way to group 'svc:fragile': entry .* not read yet"
    ):
        await operator.redrive(pending)
    report = await bus.retry_failures()  # what an operator tries first
    assert [i.result for i in report.items] == ["skipped"]
    assert f"streams redrive {rec.id}" in (report.items[0].reason or "")
    await client.delete(streams.keys.redeliver("order.paid", "svc:fragile"))  # lost
    command = [sys.executable, "-m", "eventbus", "streams", "redrive", rec.id[:10]]
    done = await anyio.run_process([*command, "--db", db_url, "--redis", redis_url])
    assert done.stdout.decode().startswith(f"{rec.id[:12]}  handed back to svc:fragile as entry ")
    fragile.fixed = True
    consumer = make_streams(options=opts, failures=store)
    consumer.subscribe(OrderPaid, fragile, name="fragile")
    async with consumer:
        await wait_until(lambda: fragile.handled == [4], what="the redriven delivery")
        await wait_until(lambda: _status_is(store, rec.id, FailureStatus.RESOLVED), what="resolved")
    with pytest.raises(ValueError, match="not a pending durable failure"):
        await operator.redrive(rec)


async def _status_is(store: SqlFailureStore, fid: str, status: FailureStatus) -> bool:
    rec = await store.get(fid)
    return rec is not None and rec.status is status


async def test_the_link_to_the_group_survives_an_operator_rewriting_the_note(
    make_streams: Factory, engine: AsyncEngine
) -> None:
    """Regression test: a row was durable only while its note began with "durable "; an
    operator's note (the console's resolve writes one) cut it from its group and stream."""
    store = SqlFailureStore(engine)
    fragile = Fragile()
    streams = make_streams(options=replace(FAST, max_deliveries=1))
    bus = EventBus(REG, store, durable=streams)
    bus.on(OrderPaid, fragile, durable=True, name="fragile")
    async with bus:
        await publish(streams, engine, 6)
        await wait_until(lambda: streams.statistics().group("fragile").dead == 1, what="dead")
        [rec] = await store.query()
        assert rec.note is not None and rec.note.startswith("durable group=svc:fragile ")
        assert (rec.durable_group, rec.durable_deliveries, rec.durable_seq) == ("svc:fragile", 1, 1)
        assert rec.durable_stream == streams.keys.stream("order.paid") and rec.durable_entry
        await store.update(rec.replace(note="looked at it: the payment API was down"))
        fragile.fixed = True
        report = await bus.retry_failures()
        assert [i.result for i in report.items] == ["redelivered"]
        await wait_until(lambda: fragile.handled == [6], what="the redelivery")
        await wait_until(lambda: _status_is(store, rec.id, FailureStatus.RESOLVED), what="resolved")


async def test_retry_by_id_redelivers_a_dead_durable_row_whose_note_an_operator_rewrote(
    make_streams: Factory, engine: AsyncEngine
) -> None:
    """Regression test (merge of main): ``retry_failures(ids=...)`` (the console's Retry of one
    failure) told a dead durable row by its note, so a rewritten note left it skipped as
    dead."""
    store = SqlFailureStore(engine)
    fragile = Fragile()
    streams = make_streams(options=replace(FAST, max_deliveries=1))
    bus = EventBus(REG, store, durable=streams)
    bus.on(OrderPaid, fragile, durable=True, name="fragile")
    async with bus:
        await publish(streams, engine, 8)
        await wait_until(lambda: streams.statistics().group("fragile").dead == 1, what="dead")
        [rec] = await store.query()
        await store.update(rec.replace(note="looked at it: the payment API was down"))
        fragile.fixed = True
        report = await bus.retry_failures(ids=[rec.id])
        assert [i.result for i in report.items] == ["redelivered"], report.items
        await wait_until(lambda: fragile.handled == [8], what="the redelivery")
        await wait_until(lambda: _status_is(store, rec.id, FailureStatus.RESOLVED), what="resolved")
