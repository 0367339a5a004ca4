"""Deliveries of a listener taking ``tx`` sharing one transaction, on SQLite and PostgreSQL:
a call that raises rolls back only its own writes (its batch-mates run again, each in a
savepoint, and commit together)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from eventbus.durable import current_delivery
from tests.durable.conftest import FAST, Factory, wait_until
from tests.durable.events import OrderPaid, effects

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
        if e.order_id == FAILING and calls[e.order_id] == 1:
            raise RuntimeError("the first call fails after its write")

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
    # The failing call's transaction held the calls before it: they ran again (in savepoints,
    # with the calls after it); through tx, each wrote once.
    assert calls[FAILING] == 2 and set(calls.values()) <= {1, 2}
