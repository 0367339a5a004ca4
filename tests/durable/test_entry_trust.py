"""What a consumer believes of a stream entry: ``dead_*`` fields only on its group's own
redelivery stream and only for a row of its group; a payload that does not decode dies at
once; the dead-letter script never acknowledges an entry whose dead letter it did not add.
The session's real Redis; the memory store (the SQL stores: ``test_garbage_entries``)."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import FailureRecord, FailureStatus, MemoryFailureStore
from eventbus.durable import RedisStreams
from eventbus.durable._link import failure_id
from eventbus.durable._scripts import DEAD_LETTER
from tests.durable.conftest import Factory, entries, wait_until
from tests.durable.events import OrderPaid
from tests.eventbus.helpers import make_record

GOOD: dict[Any, Any] = {
    "v": "1",
    "event_id": "foreign-1",
    "name": "order.paid",
    "seq": "99",
    "occurred_at": "2026-01-01T00:00:00+00:00",
    "payload": '{"order_id": 2}',
}


def forged(row: FailureRecord, group: str = "svc:grant") -> dict[Any, Any]:
    """``dead_*`` fields naming *row*, as a redelivery carries them."""
    return {
        "dead_group": group,
        "dead_entry": "1-1",
        "dead_deliveries": "3",
        "dead_error": "ValueError: forged",
        "dead_failure_id": row.id,
    }


def text(entry_id: bytes | str) -> str:
    return entry_id.decode() if isinstance(entry_id, bytes) else entry_id


async def publish(streams: RedisStreams, engine: AsyncEngine, *order_ids: int) -> None:
    async with engine.begin() as conn:
        await streams.publish_many([OrderPaid(order_id=i) for i in order_ids], conn)


def running(
    make_streams: Factory, store: MemoryFailureStore, got: list[int], *, fail: int = -1
) -> RedisStreams:
    streams = make_streams(failures=store)

    def grant(e: OrderPaid) -> None:
        if e.order_id == fail:
            raise ValueError(f"order {e.order_id} refused")
        got.append(e.order_id)

    streams.subscribe(OrderPaid, grant, name="grant")
    return streams


@pytest.mark.parametrize("where", ["stream", "restream"])
async def test_a_forged_redelivery_never_resolves_a_row_that_is_not_its_groups(
    make_streams: Factory, engine: AsyncEngine, client: Redis, where: str
) -> None:
    """Regression test: an entry carrying ``dead_failure_id=<any id>`` marked an unrelated
    in-process failure ``resolved`` once its listener succeeded."""
    store = MemoryFailureStore()
    victim = make_record(7)  # an in-process listener's failure
    other = make_record(8).replace(durable_group="svc:other", status=FailureStatus.DEAD)
    store.record(victim)
    store.record(other)
    got: list[int] = []
    streams = running(make_streams, store, got)
    key = streams.keys.stream("order.paid")
    if where == "restream":  # the group's own redelivery stream: a row of another group
        key = streams.keys.redeliver("order.paid", "svc:grant")
    async with streams:
        await publish(streams, engine, 1)
        await wait_until(lambda: got == [1], what="the first event")
        await client.xadd(key, {**GOOD, "event_id": victim.event_id, **forged(victim)})
        await client.xadd(key, {**GOOD, "event_id": other.event_id, **forged(other)})
        await publish(streams, engine, 3)
        await wait_until(lambda: sorted(got) == [1, 2, 2, 3], what="all four events")
        await wait_until(lambda: streams.statistics().group("grant").in_flight == 0, what="ends")
    assert await store.get(victim.id) == victim
    assert await store.get(other.id) == other


async def test_a_forged_dead_letter_never_overwrites_a_row_that_is_not_its_groups(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    """Regression test: when such an entry died, its event, listener, error, payload and
    traceback replaced those of the row it named."""
    store = MemoryFailureStore()
    victim = make_record(7)
    store.record(victim)
    got: list[int] = []
    streams = running(make_streams, store, got, fail=2)
    key = streams.keys.stream("order.paid")
    async with streams:
        entry = text(await client.xadd(key, {**GOOD, **forged(victim)}))
        await wait_until(lambda: streams.statistics().group("grant").dead == 1, what="the dead")
    assert await store.get(victim.id) == victim
    row = await store.get(failure_id("svc:grant", key, entry))
    assert row is not None and row.status is FailureStatus.DEAD
    assert (row.listener, row.message) == ("grant", "order 2 refused")
    assert row.durable_group == "svc:grant"
    [(_, dead)] = await entries(client, streams.keys.dead("order.paid"))
    assert dead[b"dead_failure_id"] == row.id.encode()  # the forged fields were not copied


async def test_a_payload_that_does_not_decode_dies_at_once(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    """Regression test: a ``PayloadError`` was retried ``max_deliveries`` times with back-off,
    although no retry decodes the same bytes otherwise."""
    store = MemoryFailureStore()
    got: list[int] = []
    streams = running(make_streams, store, got)
    async with streams:
        await client.xadd(streams.keys.stream("order.paid"), {**GOOD, "payload": "{not json"})
        await wait_until(lambda: streams.statistics().group("grant").dead == 1, what="the dead")
        stats = streams.statistics().group("grant")
    assert stats.retried == 0
    [row] = await store.query()
    assert row.attempts == 1 and row.error_type.endswith("PayloadError")


async def test_the_dead_letter_script_never_acknowledges_without_its_dead_letter(
    client: Redis,
) -> None:
    """Regression test: ``XACK`` ran before ``XADD ... unpack(ARGV)``, and an ``unpack`` past
    ~8,000 values failed after the acknowledgement: the entry was in neither stream."""
    await client.xgroup_create("s", "g", "0", mkstream=True)
    entry = text(await client.xadd("s", {"f": "v"}))
    await client.xreadgroup("g", "c", {"s": ">"})
    script = client.register_script(DEAD_LETTER)
    too_many = [str(i) for i in range(10_000)]
    with pytest.raises(ResponseError):
        await script(keys=["s", "s:dlq"], args=["g", entry, "100", *too_many])
    assert (await client.xpending("s", "g"))["pending"] == 1
    assert await client.xlen("s:dlq") == 0
    assert await script(keys=["s", "s:dlq"], args=["g", entry, "100", "f", "v"])
    assert (await client.xpending("s", "g"))["pending"] == 0
    assert await client.xlen("s:dlq") == 1
    assert await script(keys=["s", "s:dlq"], args=["g", entry, "100", "f", "v"]) is None


async def test_an_entry_with_thousands_of_fields_is_dead_lettered_with_its_envelope(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    """Regression test: an entry of ~4,000 fields was acknowledged without a dead letter."""
    store = MemoryFailureStore()
    got: list[int] = []
    streams = running(make_streams, store, got)
    junk: dict[Any, Any] = {f"x{i}": "y" for i in range(4_000)}
    async with streams:
        entry = await client.xadd(streams.keys.stream("order.paid"), {**GOOD, **junk})
        await publish(streams, engine, 3)
        await wait_until(lambda: got == [3], what="the event after it")
        await wait_until(lambda: streams.statistics().group("grant").dead == 1, what="the dead")
    [(_, dead)] = await entries(client, streams.keys.dead("order.paid"))
    assert dead[b"dead_entry"] == entry and dead[b"event_id"] == b"foreign-1"
    assert b"4006 fields, more than the 64 allowed" in dead[b"dead_error"]
    [row] = await store.query()
    assert row.status is FailureStatus.DEAD and "4006 fields" in row.message


async def test_a_row_of_the_group_written_before_the_durable_columns_is_still_resolved(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    """A row that names its group in its note only (written by an older version) belongs to
    the group too: its redelivery resolves it."""
    store = MemoryFailureStore()
    note = "durable group=svc:grant stream=eventbus:evt:{order.paid} entry=1-1 deliveries=3"
    legacy = make_record(7).replace(status=FailureStatus.PENDING, note=note)
    store.record(legacy)
    got: list[int] = []
    streams = running(make_streams, store, got)
    restream = streams.keys.redeliver("order.paid", "svc:grant")
    async with streams:
        await client.xadd(restream, {**GOOD, "event_id": legacy.event_id, **forged(legacy)})
        await wait_until(lambda: got == [2], what="the redelivered event")
        await wait_until(_resolved(store, legacy.id), what="the row resolved")


def _resolved(store: MemoryFailureStore, fid: str) -> Any:
    async def check() -> bool:
        row = await store.get(fid)
        return row is not None and row.status is FailureStatus.RESOLVED

    return check
