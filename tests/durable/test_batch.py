"""Deliveries of a listener taking ``tx`` sharing one transaction, on SQLite and PostgreSQL:
a call that raises rolls back only its own writes (its batch-mates run again, each in a
savepoint, and commit together)."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import replace

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from eventbus.backends.sql import make_engine
from eventbus.durable import (
    RedisStreams,
    create_durable_tables,
    current_delivery,
)
from eventbus.durable._group import TX_SLOTS
from tests.durable.conftest import FAST, Factory, effect_rows, wait_until
from tests.durable.events import OrderPaid, effects, test_metadata

FAILING = 7


async def test_a_failing_call_in_a_batch_of_50_leaves_the_other_49_committed_once(
    make_streams: Factory, database: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One transaction at a time, of 50 calls from the first (not by the calls' length): the
    # 50 entries, added to the stream by one relay script, are read and run as one batch.
    monkeypatch.setattr("eventbus.durable._group.FIRST_BATCH", 50)
    monkeypatch.setattr("eventbus.durable._group.BATCH_SECONDS", 3600.0)
    calls: Counter[int] = Counter()
    options = replace(FAST, concurrency=1, tx_batch=50, max_deliveries=3)
    streams = make_streams(engine=database, options=options)

    async def grant(e: OrderPaid, tx: AsyncConnection) -> None:
        calls[e.order_id] += 1
        await tx.execute(
            effects.insert().values(
                listener="grant", event_id=current_delivery().event_id, order_id=e.order_id
            )
        )
        if e.order_id == FAILING and current_delivery().deliveries == 1:
            raise RuntimeError("the first delivery fails after its write")

    streams.subscribe(OrderPaid, grant, name="grant")
    async with streams:
        async with database.begin() as conn:
            await streams.publish_many([OrderPaid(order_id=i) for i in range(50)], conn)
        await wait_until(lambda: streams.statistics().group("grant").succeeded == 50, what="all 50")
        stats = streams.statistics().group("grant")
    # the batch of 50, then the failing entry's retry alone
    assert stats.batches == 2 and stats.failed == 1 and stats.retried == 1
    async with database.connect() as conn:
        rows = (await conn.execute(sa.select(effects.c.order_id))).all()
    assert Counter(r.order_id for r in rows) == Counter(range(50))  # each once
    # The failing call's transaction held the calls before it: they ran again, each in a
    # savepoint, and the calls after it ran there once; the failing one was not called twice
    # for one delivery (once, then once on its retry). Through tx, each wrote once.
    assert calls[FAILING] == 2 and set(calls.values()) <= {1, 2}


CLASH = 10_000  #: the id of a row that exists: inserting it again raises IntegrityError


@pytest.mark.parametrize("culprit", [9, 4], ids=["last-in-batch", "not-last"])
async def test_a_call_that_swallows_a_database_error_in_tx_is_charged_and_loses_nothing(
    make_streams: Factory, postgres_url: str, culprit: int
) -> None:
    """On PostgreSQL a caught error aborts the transaction: its COMMIT would silently roll
    back every call of the batch (all acknowledged), or the next call would fail for it."""
    pg = await _postgres(postgres_url)
    most: dict[int, int] = {}
    options = replace(FAST, concurrency=10, tx_batch=10, max_deliveries=3)
    streams = make_streams(engine=pg, options=options)

    async def grant(e: OrderPaid, tx: AsyncConnection) -> None:
        delivery = current_delivery()
        most[e.order_id] = max(most.get(e.order_id, 0), delivery.deliveries)
        await tx.execute(
            effects.insert().values(
                listener="grant", event_id=delivery.event_id, order_id=e.order_id
            )
        )
        if e.order_id == culprit and delivery.deliveries == 1:
            await _insert_the_clash_and_swallow_its_error(tx)

    streams.subscribe(OrderPaid, grant, name="grant")
    try:
        async with streams:
            await _publish_and_wait(streams, pg, range(10))
            stats = streams.statistics().group("grant")
        async with pg.connect() as conn:
            rows = (
                await conn.execute(
                    sa.select(effects.c.order_id).where(effects.c.listener == "grant")
                )
            ).all()
    finally:
        await pg.dispose()
    assert Counter(r.order_id for r in rows) == Counter(range(10))  # each kept, once
    assert stats.batches >= 1 and stats.failed == 1
    assert {o for o, n in most.items() if n > 1} == {culprit}  # only the culprit was retried


async def test_a_lone_call_that_swallows_a_database_error_in_tx_is_retried_not_acknowledged(
    make_streams: Factory, postgres_url: str
) -> None:
    pg = await _postgres(postgres_url)
    streams = make_streams(engine=pg)

    async def grant(e: OrderPaid, tx: AsyncConnection) -> None:
        delivery = current_delivery()
        await tx.execute(
            effects.insert().values(
                listener="grant", event_id=delivery.event_id, order_id=e.order_id
            )
        )
        if delivery.deliveries == 1:
            await _insert_the_clash_and_swallow_its_error(tx)

    streams.subscribe(OrderPaid, grant, name="grant")
    try:
        async with streams:
            async with pg.begin() as conn:
                await streams.publish(OrderPaid(order_id=1), conn)
            await wait_until(lambda: streams.statistics().group("grant").succeeded == 1, what="it")
            stats = streams.statistics().group("grant")
        async with pg.connect() as conn:
            rows = (
                await conn.execute(
                    sa.select(effects.c.order_id).where(effects.c.listener == "grant")
                )
            ).all()
    finally:
        await pg.dispose()
    assert [r.order_id for r in rows] == [1] and stats.failed == 1


async def test_a_victim_of_an_aborted_transaction_is_not_charged_whatever_it_raises(
    make_streams: Factory, postgres_url: str
) -> None:
    """A listener whose statement fails because an earlier call's caught error aborted the
    transaction may raise anything (here an error of its own, outside the ``except``): the
    culprit is charged, not it."""
    pg = await _postgres(postgres_url)
    most: dict[int, int] = {}
    culprit = 4
    streams = make_streams(engine=pg, options=replace(FAST, concurrency=10, tx_batch=10))

    async def grant(e: OrderPaid, tx: AsyncConnection) -> None:
        delivery = current_delivery()
        most[e.order_id] = max(most.get(e.order_id, 0), delivery.deliveries)
        stored = True
        try:
            await tx.execute(
                effects.insert().values(listener="grant", event_id="", order_id=e.order_id)
            )
        except sa.exc.DBAPIError:
            stored = False
        if not stored:
            raise LookupError(f"order {e.order_id} could not be stored")
        if e.order_id == culprit and delivery.deliveries == 1:
            await _insert_the_clash_and_swallow_its_error(tx)

    streams.subscribe(OrderPaid, grant, name="grant")
    try:
        async with streams:
            await _publish_and_wait(streams, pg, range(10))
    finally:
        await pg.dispose()
    assert {o for o, n in most.items() if n > 1} == {culprit}


async def test_a_lone_call_that_raises_a_database_error_is_called_once_per_delivery(
    make_streams: Factory, database: AsyncEngine
) -> None:
    calls: list[int] = []
    streams = make_streams(engine=database)

    async def grant(e: OrderPaid, tx: AsyncConnection) -> None:
        calls.append(current_delivery().deliveries)
        await tx.execute(effects.insert().values(listener="g", event_id="", order_id=e.order_id))
        if len(calls) == 1:  # the same statement again: a unique violation, not caught
            await tx.execute(effects.insert().values(id=-1, listener="g", event_id="", order_id=0))
            await tx.execute(effects.insert().values(id=-1, listener="g", event_id="", order_id=0))

    streams.subscribe(OrderPaid, grant, name="grant")
    async with streams:
        async with database.begin() as conn:
            await streams.publish(OrderPaid(order_id=1), conn)
        await wait_until(lambda: streams.statistics().group("grant").succeeded == 1, what="it")
        stats = streams.statistics().group("grant")
    assert calls == [1, 2] and stats.failed == 1  # not called again within its first delivery
    assert [r.order_id for r in await effect_rows(database, "g")] == [1]


async def _publish_and_wait(streams: RedisStreams, engine: AsyncEngine, orders: range) -> None:
    """Publish *orders* in one transaction; return once the group "grant" has succeeded up
    to the last of them (the orders before *orders* already done)."""
    async with engine.begin() as conn:
        await streams.publish_many([OrderPaid(order_id=i) for i in orders], conn)
    await wait_until(
        lambda: streams.statistics().group("grant").succeeded == orders.stop,
        what=f"orders up to {orders.stop}",
    )


async def _postgres(url: str) -> AsyncEngine:
    """A PostgreSQL engine on fresh tables, with the row whose id the listeners clash on."""
    pg = make_engine(url)
    async with pg.begin() as conn:
        await conn.run_sync(test_metadata.create_all)
        await conn.execute(
            effects.insert().values(id=CLASH, listener="x", event_id="x", order_id=0)
        )
    await create_durable_tables(pg)
    return pg


async def _insert_the_clash_and_swallow_its_error(tx: AsyncConnection) -> None:
    """The common "already there" idiom: fine on SQLite; on PostgreSQL it aborts ``tx``."""
    try:
        await tx.execute(effects.insert().values(id=CLASH, listener="x", event_id="x", order_id=0))
    except sa.exc.IntegrityError:
        pass


async def test_a_fast_listener_gets_few_transactions_at_once_each_holding_a_batch(
    make_streams: Factory, database: AsyncEngine
) -> None:
    """Calls that share transactions run in at most ``TX_SLOTS`` of them at once, each with
    what was queued when its slot came free (not one transaction per entry read)."""
    running = 0
    most = 0
    options = replace(FAST, concurrency=16, tx_batch=50)
    streams = make_streams(engine=database, options=options)

    connections: set[int] = set()

    async def grant(e: OrderPaid, tx: AsyncConnection) -> None:
        nonlocal running, most
        connections.add(id(await tx.get_raw_connection()))
        running += 1
        most = max(most, running)
        try:
            await tx.execute(
                effects.insert().values(listener="grant", event_id="", order_id=e.order_id)
            )
        finally:
            running -= 1

    streams.subscribe(OrderPaid, grant, name="grant")
    async with streams:
        await _publish_and_wait(streams, database, range(400))
        stats = streams.statistics().group("grant")
    assert stats.batches <= 400 // 5, stats  # batches, not a transaction per event
    assert most <= TX_SLOTS
    assert len(connections) <= TX_SLOTS  # each slot kept its connection


async def test_a_burst_is_shared_among_the_free_transactions(
    make_streams: Factory, database: AsyncEngine
) -> None:
    """Entries read together while transactions are free run side by side, a share each,
    rather than one after another in the first transaction (whose last call would wait for
    all the others)."""
    batches: list[int] = []
    streams = make_streams(engine=database, options=replace(FAST, concurrency=16, tx_batch=50))

    async def grant(e: OrderPaid, tx: AsyncConnection) -> None:
        await tx.execute(effects.insert().values(listener="g", event_id="", order_id=e.order_id))

    streams.subscribe(OrderPaid, grant, name="grant")
    async with streams:
        await _publish_and_wait(streams, database, range(8))  # timed: batches up to 50 now
        before = streams.statistics().group("grant").batches
        await _publish_and_wait(streams, database, range(8, 48))
        batches.append(streams.statistics().group("grant").batches - before)
    assert batches[0] >= TX_SLOTS  # 40 entries in one read: a share per free transaction


async def test_entries_arriving_while_every_transaction_is_busy_wait_together(
    make_streams: Factory, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression test: each idle worker took one such entry and waited with it for a slot,
    to run it alone; now only workers holding a slot take entries, so the next free slot
    takes them as one batch. (PostgreSQL: on SQLite the held transactions would hold its one
    write lock, and the publishes wait.)"""
    # the held calls are long: batches by count only, or the group would take them for a
    # slow listener's (a batch of one each, in as many transactions as ``concurrency``)
    monkeypatch.setattr("eventbus.durable._group.BATCH_SECONDS", 3600.0)
    database = await _postgres(postgres_url)
    gate = anyio.Event()
    entered = 0
    transactions: list[object] = []  # of the later entries' calls (kept: ids stay unique)
    streams = make_streams(engine=database, options=replace(FAST, concurrency=16))

    async def grant(e: OrderPaid, tx: AsyncConnection) -> None:
        nonlocal entered
        if e.order_id < TX_SLOTS:  # the first batches hold every transaction slot
            entered += 1
            await gate.wait()
        else:
            current = tx.sync_connection.get_transaction()  # type: ignore[union-attr]
            if all(current is not t for t in transactions):
                transactions.append(current)
        await tx.execute(effects.insert().values(listener="g", event_id="", order_id=e.order_id))

    streams.subscribe(OrderPaid, grant, name="grant")
    async with streams:
        async with database.begin() as conn:
            await streams.publish_many([OrderPaid(order_id=i) for i in range(TX_SLOTS)], conn)
        await wait_until(lambda: entered == TX_SLOTS, what="every slot busy")
        for i in range(TX_SLOTS, 24):  # one at a time, each read on its own
            async with database.begin() as conn:
                await streams.publish(OrderPaid(order_id=i), conn)
        await wait_until(lambda: _read(streams) == 16, what="what can be read, read")
        gate.set()
        await wait_until(lambda: streams.statistics().group("grant").succeeded == 24, what="24")
    await database.dispose()
    assert len(transactions) <= 8  # 20 entries in a few batches, not 12 of them alone


def _read(streams: RedisStreams) -> int:
    return streams.statistics().group("grant").in_flight


async def test_kept_connections_go_back_to_the_pool_when_idle_and_at_stop(
    make_streams: Factory, database: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("eventbus.durable._held.HOLD_IDLE", 0.2)
    streams = make_streams(engine=database)
    kept = _connections_checked_out_by(database, "Consumer._work")

    async def grant(e: OrderPaid, tx: AsyncConnection) -> None:
        await tx.execute(effects.insert().values(listener="g", event_id="", order_id=e.order_id))

    streams.subscribe(OrderPaid, grant, name="grant")
    async with streams:
        await _publish_and_wait(streams, database, range(100))
        assert kept  # a slot keeps its connection between batches...
        await wait_until(lambda: not kept, what="kept connections back")  # ...not when idle
        async with database.begin() as conn:
            await streams.publish(OrderPaid(order_id=100), conn)
        await wait_until(lambda: streams.statistics().group("grant").succeeded == 101, what="one")
    assert not kept  # nor past the stop


async def test_the_connections_kept_between_batches_leave_room_in_the_pool(
    make_streams: Factory, db_url: str
) -> None:
    """Two groups, four transactions at once each, on a pool of 3: no more than 2 connections
    are kept between batches, so the relay and the publishers are never starved."""
    engine = make_engine(db_url, pool_size=3)
    await create_durable_tables(engine)
    async with engine.begin() as conn:
        await conn.run_sync(test_metadata.create_all)
    streams = make_streams(engine=engine, options=replace(FAST, concurrency=16))
    kept = _connections_checked_out_by(engine, "Consumer._work")

    async def slow(e: OrderPaid, tx: AsyncConnection) -> None:
        await anyio.sleep(0.002)  # batches of a few: every transaction slot is used
        await tx.execute(effects.insert().values(listener="g", event_id="", order_id=e.order_id))

    streams.subscribe(OrderPaid, slow, name="one")
    streams.subscribe(OrderPaid, slow, name="two")
    try:
        async with streams:
            async with engine.begin() as conn:
                await streams.publish_many([OrderPaid(order_id=i) for i in range(300)], conn)
            await wait_until(
                lambda: all(streams.statistics().group(g).succeeded == 300 for g in ("one", "two")),
                what="both groups",
            )
            assert len(kept) <= 2
    finally:
        await engine.dispose()


def _connections_checked_out_by(engine: AsyncEngine, task: str) -> set[int]:
    """The pool's connections checked out now by asyncio tasks whose name holds *task*."""
    out: set[int] = set()

    def checkout(_dbapi: object, record: object, _proxy: object) -> None:
        current = asyncio.current_task()
        if current is not None and task in current.get_name():
            out.add(id(record))

    sa.event.listen(engine.sync_engine, "checkout", checkout)
    sa.event.listen(engine.sync_engine, "checkin", lambda _d, record: out.discard(id(record)))
    return out


async def test_a_kept_connection_the_server_closed_costs_no_failed_call(
    make_streams: Factory, postgres_url: str
) -> None:
    """A connection kept between batches is not pinged: one PostgreSQL closed meanwhile (a
    restart, an idle timeout) is replaced at the batch's first statement, before any call."""
    pg = await _postgres(postgres_url)
    streams = make_streams(engine=pg)

    async def grant(e: OrderPaid, tx: AsyncConnection) -> None:
        await tx.execute(effects.insert().values(listener="g", event_id="", order_id=e.order_id))

    streams.subscribe(OrderPaid, grant, name="grant")
    try:
        async with streams:
            async with pg.begin() as conn:
                await streams.publish_many([OrderPaid(order_id=i) for i in range(20)], conn)
            await wait_until(lambda: streams.statistics().group("grant").succeeded == 20, what="20")
            async with pg.connect() as conn:  # every other connection of the database ends
                await conn.execute(
                    sa.text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )
                )
            async with pg.begin() as conn:
                await streams.publish_many([OrderPaid(order_id=i) for i in range(20, 40)], conn)
            await wait_until(lambda: streams.statistics().group("grant").succeeded == 40, what="40")
            stats = streams.statistics().group("grant")
    finally:
        await pg.dispose()
    assert stats.failed == 0 and stats.retried == 0
