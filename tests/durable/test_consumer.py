"""Consumer groups in one process against the real Redis: delivery, the inbox, leases (F7,
F21), retries and dead letters (F8), shutdown without acknowledgement (F17), and handing dead
letters back to one group."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from eventbus import Event, FailureStatus, MemoryFailureStore
from eventbus.durable import (
    DeadLettered,
    Delivery,
    DurableListener,
    RedisStreams,
    current_delivery,
)
from tests.durable.conftest import FAST, Factory, effect_rows, entries, wait_until
from tests.durable.events import REG, OrderPaid, effects


async def publish(streams: RedisStreams, engine: AsyncEngine, *order_ids: int) -> list[str]:
    async with engine.begin() as conn:
        return await streams.publish_many([OrderPaid(order_id=i) for i in order_ids], conn)


async def pending_of(client: Redis, streams: RedisStreams, group: str) -> list[dict[str, Any]]:
    rows: Any = await client.xpending_range(
        streams.keys.stream("order.paid"), group, min="-", max="+", count=100
    )
    return [dict(r) for r in rows]


async def test_each_listener_has_its_group_and_gets_every_event(
    make_streams: Factory, engine: AsyncEngine
) -> None:
    seen: dict[str, list[int]] = {"a": [], "b": []}
    streams = make_streams()
    streams.subscribe(OrderPaid, lambda e: seen["a"].append(e.order_id), name="a")

    async def b(e: OrderPaid) -> None:
        seen["b"].append(e.order_id)

    listener = streams.subscribe(OrderPaid, b, name="b")
    assert isinstance(listener, DurableListener)
    assert (listener.group, listener.is_async, listener.takes_tx) == ("svc:b", True, False)
    async with streams:
        await publish(streams, engine, 1, 2, 3)
        await wait_until(lambda: len(seen["a"]) == 3 and len(seen["b"]) == 3, what="both groups")
    # read once stopped: "a" runs in a worker thread, and is counted when the loop next
    # resumes its consumer, which may come after this test saw the third call
    stats = streams.statistics()
    assert sorted(seen["a"]) == sorted(seen["b"]) == [1, 2, 3]
    assert [(g.group, g.delivered, g.succeeded) for g in stats.groups] == [
        ("svc:a", 3, 3),
        ("svc:b", 3, 3),
    ]


async def test_the_inbox_gives_one_effect_per_event_and_group(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    deliveries: list[Delivery] = []
    streams = make_streams()

    async def grant(e: OrderPaid, tx: AsyncConnection) -> None:
        deliveries.append(current_delivery())
        await tx.execute(
            effects.insert().values(listener="grant", event_id="", order_id=e.order_id)
        )

    streams.subscribe(OrderPaid, grant, name="grant")
    async with streams:
        [event_id] = await publish(streams, engine, 5)
        await wait_until(lambda: len(deliveries) == 1, what="the first delivery")
        # The same event again (as a republish, or an acknowledgement lost, would bring it).
        [(_, fields)] = await entries(client, streams.keys.stream("order.paid"))
        await client.xadd(streams.keys.stream("order.paid"), dict(fields))  # type: ignore[arg-type]
        await wait_until(lambda: streams.statistics().group("grant").duplicates == 1, what="skip")
    assert len(deliveries) == 1 and len(await effect_rows(engine)) == 1
    d = deliveries[0]
    assert (d.event_id, d.name, d.group, d.deliveries, d.seq) == (
        event_id,
        "order.paid",
        "svc:grant",
        1,
        1,
    )
    with pytest.raises(LookupError, match="only available inside"):
        current_delivery()


async def test_a_listener_that_fails_its_transaction_leaves_no_effect_and_no_inbox_row(
    make_streams: Factory, engine: AsyncEngine
) -> None:
    tries: list[int] = []
    streams = make_streams()

    async def flaky(e: OrderPaid, tx: AsyncConnection) -> None:
        tries.append(current_delivery().deliveries)
        await tx.execute(effects.insert().values(listener="f", event_id="", order_id=e.order_id))
        if len(tries) == 1:
            raise RuntimeError("first try fails after writing")

    streams.subscribe(OrderPaid, flaky, name="flaky")
    async with streams:
        await publish(streams, engine, 1)
        await wait_until(lambda: streams.statistics().group("flaky").succeeded == 1, what="retry")
    assert tries == [1, 2]  # Redis' delivery count, one higher on the retry
    assert len(await effect_rows(engine)) == 1  # the failed try's write was rolled back


@pytest.mark.slow
async def test_f8_a_failing_listener_gets_max_deliveries_calls_with_growing_gaps_then_dies(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    opts = replace(FAST, max_deliveries=4, retry_backoff=0.1, visibility=2.0)
    calls: list[float] = []
    later: list[int] = []
    announced: list[Event] = []
    store = MemoryFailureStore()
    streams = make_streams(options=opts, failures=store)
    streams.notify = announced.append

    async def picky(e: OrderPaid) -> None:
        if e.order_id == 1:
            calls.append(time.monotonic())
            raise ValueError("order 1 is poison")
        later.append(e.order_id)

    streams.subscribe(OrderPaid, picky, name="picky")
    async with streams:
        await publish(streams, engine, 1)
        await wait_until(lambda: streams.statistics().group("picky").dead == 1, what="the dead")
        await publish(streams, engine, 2, 3)
        await wait_until(lambda: later == [2, 3], what="later events")
        stats = streams.statistics().group("picky")
    assert len(calls) == 4
    gaps = [b - a for a, b in zip(calls, calls[1:], strict=False)]
    # Each retry waits at least its delay (0.1, 0.2, 0.4 s): they grow.
    for gap, delay in zip(gaps, (0.1, 0.2, 0.4), strict=True):
        assert gap >= delay * 0.95, (gaps, delay)
    assert (stats.failed, stats.retried, stats.dead) == (4, 3, 1)
    [rec] = await store.query()
    assert (rec.status, rec.attempts, rec.listener, rec.error_type) == (
        FailureStatus.DEAD,
        4,
        "picky",
        "ValueError",
    )
    assert rec.payload == '{"order_id": 1}' and rec.message == "order 1 is poison"
    assert rec.note is not None
    assert rec.note.startswith("durable group=svc:picky stream=eventbus:evt:{order.paid} entry=")
    assert "deliveries=4 seq=1 " in rec.note
    [(dead_id, dead)] = await entries(client, streams.keys.dead("order.paid"))
    assert dead[b"dead_group"] == b"svc:picky" and dead[b"dead_deliveries"] == b"4"
    assert dead[b"dead_error"] == b"ValueError: order 1 is poison"
    assert dead[b"dead_failure_id"] == rec.id.encode()
    assert await pending_of(client, streams, "svc:picky") == []  # acknowledged with the move
    [alarm] = [e for e in announced if isinstance(e, DeadLettered)]
    assert (alarm.group, alarm.deliveries, alarm.failure_id) == ("svc:picky", 4, rec.id)


@pytest.mark.slow
async def test_f7_a_listener_running_three_visibility_times_is_not_reclaimed(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    opts = replace(FAST, visibility=1.0)
    started = anyio.Event()
    calls: list[str] = []

    async def long(e: OrderPaid) -> None:
        calls.append(current_delivery().group)
        started.set()
        await anyio.sleep(3 * opts.visibility)

    a = make_streams(options=opts, consumer="replica-a")
    b = make_streams(options=opts, consumer="replica-b")  # would reclaim an expired lease
    for s in (a, b):
        s.subscribe(OrderPaid, long, name="long")
    async with a, b:
        await publish(a, engine, 1)
        with anyio.fail_after(10):
            await started.wait()
        counts: list[int] = []
        while sum(g.succeeded for s in (a, b) for g in s.statistics().groups) == 0:
            counts += [int(p["times_delivered"]) for p in await pending_of(client, a, "svc:long")]
            await anyio.sleep(0.1)
    assert calls == ["svc:long"]
    assert set(counts) == {1}  # renewed with JUSTID: the delivery count never moved
    assert [g.reclaimed for s in (a, b) for g in s.statistics().groups] == [0, 0]


@pytest.mark.slow
async def test_f21_a_sync_listener_blocking_its_thread_keeps_its_lease(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    opts = replace(FAST, visibility=1.0)
    calls: list[str] = []
    threads: list[str] = []

    def blocking(e: OrderPaid) -> None:
        calls.append(current_delivery().event_id)  # the context reaches the worker thread
        threads.append(threading.current_thread().name)
        time.sleep(2 * opts.visibility)

    a = make_streams(options=opts, consumer="replica-a")
    b = make_streams(options=opts, consumer="replica-b")
    for s in (a, b):
        s.subscribe(OrderPaid, blocking, name="blocking")
    async with a, b:
        [event_id] = await publish(a, engine, 1)
        await wait_until(
            lambda: sum(g.succeeded for s in (a, b) for g in s.statistics().groups) == 1,
            what="the slow call to finish",
        )
    assert calls == [event_id]
    assert threads and threads[0] != threading.main_thread().name
    assert [g.reclaimed for s in (a, b) for g in s.statistics().groups] == [0, 0]


async def test_a_call_past_call_timeout_is_cut_short_and_counts_as_a_failure(
    make_streams: Factory, engine: AsyncEngine
) -> None:
    """Review risk 9: a hung call held its slot for ever (leases renewed, never retried,
    never dead). With ``call_timeout`` it is cancelled, retried, and dead at the last try."""
    store = MemoryFailureStore()
    calls: list[int] = []
    later: list[int] = []

    async def hangs(e: OrderPaid) -> None:
        if e.order_id == 1:
            calls.append(current_delivery().deliveries)
            await anyio.sleep(3600)  # a remote call that never answers
        later.append(e.order_id)

    opts = replace(FAST, call_timeout=0.3, max_deliveries=2)
    streams = make_streams(options=opts, failures=store)
    streams.subscribe(OrderPaid, hangs, name="hangs")
    async with streams:
        await publish(streams, engine, 1, 2)
        await wait_until(lambda: later == [2], what="the next event, beside the hung one")
        await wait_until(lambda: streams.statistics().group("hangs").dead == 1, what="dead")
    assert calls == [1, 2]
    [rec] = await store.query()
    assert rec.error_type == "eventbus.ListenerTimeoutError"
    assert rec.message == "listener 'hangs' did not finish within timeout=0.3s"


async def test_an_entry_taken_over_before_its_dead_letter_is_not_counted_or_announced(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    """Review risk 10a: the DEAD_LETTER script found the entry no longer pending (another
    consumer had reclaimed and finished it), yet it was counted dead and announced."""
    announced: list[Event] = []
    stream = "eventbus:evt:{order.paid}"

    async def taken_over(point: str) -> None:
        if point == "dead-letter":  # another consumer finishes it first
            [pending] = await pending_of(client, streams, "svc:poison")
            await client.xack(stream, "svc:poison", pending["message_id"])

    async def poison(e: OrderPaid) -> None:
        raise ValueError("poison")

    streams = make_streams(options=replace(FAST, max_deliveries=1), _fault=taken_over)
    streams.notify = announced.append
    streams.subscribe(OrderPaid, poison, name="poison")
    async with streams:
        await publish(streams, engine, 1)
        await wait_until(lambda: streams.statistics().group("poison").failed == 1, what="call")
        await wait_until(lambda: _no_pending(client, streams), what="the other's acknowledgement")
        await anyio.sleep(0.2)  # the dead-letter step is over
        stats = streams.statistics().group("poison")
    assert stats.dead == 0 and not any(isinstance(e, DeadLettered) for e in announced)
    assert await client.xlen(streams.keys.dead("order.paid")) == 0


async def _no_pending(client: Redis, streams: RedisStreams) -> bool:
    return await pending_of(client, streams, "svc:poison") == []


async def test_f17_shutdown_mid_call_never_acknowledges(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    opts = replace(FAST, shutdown_grace=0.2)
    started = anyio.Event()
    finished: list[int] = []

    async def slow(e: OrderPaid) -> None:
        started.set()
        await anyio.sleep(30)
        finished.append(e.order_id)

    streams = make_streams(options=opts)
    streams.subscribe(OrderPaid, slow, name="slow")
    async with streams:
        await publish(streams, engine, 1)
        with anyio.fail_after(10):
            await started.wait()
    assert finished == []
    [pending] = await pending_of(client, streams, "svc:slow")
    assert pending["consumer"] == streams.consumer.encode()
    # Another consumer (a replica, or this service restarted) gets it after the visibility time.
    again: list[int] = []
    replica = make_streams(options=opts)
    replica.subscribe(OrderPaid, lambda e: again.append(e.order_id), name="slow")
    async with replica:
        await wait_until(lambda: again == [1], what="the redelivery")
    assert replica.statistics().group("slow").reclaimed == 1


async def test_a_group_created_latest_skips_history_and_first_does_not(
    make_streams: Factory, engine: AsyncEngine
) -> None:
    first: list[int] = []
    latest: list[int] = []
    publisher = make_streams()
    async with publisher:
        await publish(publisher, engine, 1)
        await wait_until(lambda: publisher.statistics().relay.published == 1, what="publish")
    streams = make_streams()
    streams.subscribe(OrderPaid, lambda e: first.append(e.order_id), name="first")
    streams.subscribe(OrderPaid, lambda e: latest.append(e.order_id), name="latest", start="latest")
    async with streams:
        await publish(streams, engine, 2)
        await wait_until(lambda: len(first) == 2, what="the 'first' group's two events")
        await wait_until(lambda: len(latest) == 1, what="the 'latest' group's one event")
    assert (sorted(first), latest) == ([1, 2], [2])


async def test_a_dead_failure_retried_goes_back_to_its_group_alone(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    store = MemoryFailureStore()
    fixed = False
    got: dict[str, list[int]] = {"fragile": [], "other": []}

    async def fragile(e: OrderPaid) -> None:
        if not fixed:
            raise RuntimeError("not yet")
        got["fragile"].append(e.order_id)

    streams = make_streams(options=replace(FAST, max_deliveries=1), failures=store)
    streams.subscribe(OrderPaid, fragile, name="fragile")
    streams.subscribe(OrderPaid, lambda e: got["other"].append(e.order_id), name="other")
    async with streams:
        await publish(streams, engine, 9)
        await wait_until(lambda: streams.statistics().group("fragile").dead == 1, what="dead")
        [rec] = await store.query(status=FailureStatus.DEAD)
        fixed = True
        new_id = await streams.redeliver(rec)
        assert await client.xlen(streams.keys.dead("order.paid")) == 0
        await wait_until(lambda: got["fragile"] == [9], what="the redelivery")
        await wait_until(
            lambda: _status(store, rec.id, FailureStatus.RESOLVED), what="the row resolved"
        )
        assert streams.statistics().group("fragile").redelivered == 1
    assert got["other"] == [9]  # the other group saw the event once, never again
    assert new_id.endswith("-0")
    with pytest.raises(ValueError, match="not a dead durable failure"):
        await streams.redeliver(rec.replace(status=FailureStatus.PENDING))


async def _status(store: MemoryFailureStore, fid: str, status: FailureStatus) -> bool:
    rec = await store.get(fid)
    return rec is not None and rec.status == status


async def test_replay_hands_dead_letters_back_per_group(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    store = MemoryFailureStore()
    healthy = False
    got: list[tuple[str, int]] = []

    def make(name: str):  # type: ignore[no-untyped-def]
        async def listener(e: OrderPaid) -> None:
            if not healthy:
                raise RuntimeError(f"{name} down")
            got.append((name, e.order_id))

        return listener

    streams = make_streams(options=replace(FAST, max_deliveries=1), failures=store)
    streams.subscribe(OrderPaid, make("x"), name="x")
    streams.subscribe(OrderPaid, make("y"), name="y")
    async with streams:
        await publish(streams, engine, 1, 2)
        await wait_until(
            lambda: sum(g.dead for g in streams.statistics().groups) == 4, what="4 dead"
        )
        healthy = True
        assert len(await streams.replay("order.paid", group="svc:x")) == 2
        await wait_until(lambda: len(got) == 2, what="x's replays")
        assert sorted(got) == [("x", 1), ("x", 2)]
        assert await client.xlen(streams.keys.dead("order.paid")) == 2  # y's remain
        ids = [i.decode() for i, _ in await entries(client, streams.keys.dead("order.paid"))]
        assert len(await streams.replay("order.paid", ids=ids[:1])) == 1
        await wait_until(lambda: len(got) == 3, what="one of y's")
    resolved = await store.query(status=FailureStatus.RESOLVED)
    assert len(resolved) == 3


async def test_durable_listeners_are_checked_when_subscribed(make_streams: Factory) -> None:
    streams = make_streams()

    def sync_tx(e: OrderPaid, tx: AsyncConnection) -> None: ...

    with pytest.raises(TypeError, match="takes 'tx' but is sync"):
        streams.subscribe(OrderPaid, sync_tx, name="s")
    with pytest.raises(TypeError, match="one declared event type"):
        streams.subscribe("order.*", print, name="p")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="contains '<'.*stable name="):
        streams.subscribe(OrderPaid, lambda e: None)
    streams.subscribe(OrderPaid, print, name="p")
    from eventbus import DuplicateListenerError

    with pytest.raises(DuplicateListenerError):
        streams.subscribe(OrderPaid, print, name="p")
    assert REG.get("order.paid") is OrderPaid
