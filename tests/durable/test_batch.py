"""Deliveries of a listener taking ``tx`` sharing one transaction, on SQLite and PostgreSQL:
a call that raises rolls back only its own writes (its batch-mates run again, each in a
savepoint, and commit together)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from eventbus.backends.sql import make_engine
from eventbus.durable import create_durable_tables, current_delivery
from tests.durable.conftest import FAST, Factory, wait_until
from tests.durable.events import OrderPaid, effects, test_metadata

FAILING = 7


async def test_a_failing_call_in_a_batch_of_50_leaves_the_other_49_committed_once(
    make_streams: Factory, database: AsyncEngine
) -> None:
    calls: Counter[int] = Counter()
    options = replace(FAST, concurrency=50, tx_batch=50, max_deliveries=3)
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
    assert stats.batches >= 1 and stats.failed == 1 and stats.retried == 1
    async with database.connect() as conn:
        rows = (await conn.execute(sa.select(effects.c.order_id))).all()
    assert Counter(r.order_id for r in rows) == Counter(range(50))  # each once
    # The failing call's transaction held the calls before it: every call ran again, each in
    # a savepoint (the failing one failed again there, and once more on its retry); through
    # tx, each wrote once.
    assert calls[FAILING] == 3 and set(calls.values()) <= {1, 2, 3}


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
            async with pg.begin() as conn:
                await streams.publish_many([OrderPaid(order_id=i) for i in range(10)], conn)
            await wait_until(
                lambda: streams.statistics().group("grant").succeeded == 10, what="all 10"
            )
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
