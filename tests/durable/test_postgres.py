"""The outbox and the inbox on PostgreSQL (asyncpg), where transactions really run at once:
commits out of id order (F18), four relays with SKIP LOCKED (F19, two on SQLite too), and
two deliveries of one event racing for the inbox row."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

import anyio
import pytest
import sqlalchemy as sa
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus.backends.sql import make_engine
from eventbus.durable import DurableOptions, create_durable_tables
from eventbus.durable._inbox import Inbox
from eventbus.durable._tables import inbox, outbox
from tests.durable.conftest import App, Factory, entries, wait_until
from tests.durable.events import OrderPaid, test_metadata

STREAM = "eventbus:evt:{order.paid}"


@pytest.fixture
async def pg(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    eng = make_engine(postgres_url)
    async with eng.begin() as conn:
        await conn.run_sync(test_metadata.create_all)
    await create_durable_tables(eng)
    yield eng
    await eng.dispose()


async def unpublished(engine: AsyncEngine) -> int:
    stmt = sa.select(sa.func.count()).where(outbox.c.published_at.is_(None))
    async with engine.connect() as conn:
        return int((await conn.execute(stmt)).scalar_one())


async def test_f18_transactions_committing_out_of_id_order_are_both_published(
    make_streams: Factory, pg: AsyncEngine, client: Redis
) -> None:
    streams = make_streams(engine=pg, options=DurableOptions(relay=False))
    relay = make_streams(engine=pg)  # a relay we drive by hand, one batch at a time
    assert relay.relay is not None
    async with pg.connect() as a, pg.connect() as b:
        await a.begin()
        await streams.publish(OrderPaid(order_id=1), a)  # takes id 1, not committed yet
        await b.begin()
        await streams.publish(OrderPaid(order_id=2), b)  # takes id 2
        await b.commit()
        assert await relay.relay.publish_batch() == 1  # row 2; row 1 is invisible
        await a.commit()
    assert await relay.relay.publish_batch() == 1  # a high-water mark would skip row 1
    found = await entries(client, STREAM)
    assert [f[b"seq"] for _, f in found] == [b"2", b"1"]
    assert await unpublished(pg) == 0
    await relay.aclose()
    await streams.aclose()


async def test_two_deliveries_racing_for_the_inbox_row_give_one_effect(pg: AsyncEngine) -> None:
    box = Inbox(inbox)
    now = datetime.now(UTC)
    async with pg.connect() as first, pg.connect() as second:
        await first.begin()
        assert await box.claim(first, group="g", event_id="e1", now=now)
        await second.begin()
        claimed: list[bool] = []

        async def late() -> None:  # waits on the first transaction's row, then finds it
            claimed.append(await box.claim(second, group="g", event_id="e1", now=now))

        async with anyio.create_task_group() as tg:
            tg.start_soon(late)
            await anyio.sleep(0.2)
            assert claimed == []  # blocked, not racing past
            await first.commit()
        await second.commit()
    assert claimed == [False]
    assert await box.seen(pg, group="g", event_id="e1")


@pytest.mark.slow
async def test_f19_four_relays_on_postgresql_add_no_event_twice(
    make_streams: Factory,
    pg: AsyncEngine,
    client: Redis,
    postgres_url: str,
    apps: Callable[..., Awaitable[App]],
) -> None:
    n = 2000
    streams = make_streams(engine=pg, options=DurableOptions(relay=False))
    relays = [await apps("--batch", "50", db=postgres_url) for _ in range(4)]
    for first in range(0, n, 100):  # while all four poll
        async with pg.begin() as conn:
            await streams.publish_many(
                [OrderPaid(order_id=i) for i in range(first, first + 100)], conn
            )
    await wait_until(lambda: _none_left(pg), within=60, what="every row published")
    stats = [await r.stop() for r in relays]
    found = await entries(client, STREAM)
    ids = Counter(f[b"event_id"] for _, f in found)
    assert len(found) == n and len(ids) == n  # each event added exactly once
    assert sum(s["relay"]["published"] for s in stats) == n
    assert sum(s["relay"]["deduplicated"] for s in stats) == 0
    assert sum(1 for s in stats if s["relay"]["published"]) >= 2  # they shared the work
    await streams.aclose()


async def _none_left(engine: AsyncEngine) -> bool:
    return await unpublished(engine) == 0


@pytest.mark.slow
async def test_f19_two_relays_on_sqlite_lose_nothing(
    make_streams: Factory,
    engine: AsyncEngine,
    client: Redis,
    apps: Callable[..., Awaitable[App]],
) -> None:
    n = 1000
    streams = make_streams(options=DurableOptions(relay=False))
    await create_durable_tables(engine)
    async with engine.begin() as conn:
        await streams.publish_many([OrderPaid(order_id=i) for i in range(n)], conn)
    relays = [await apps("--batch", "50") for _ in range(2)]
    await wait_until(lambda: _none_left(engine), within=60, what="every row published")
    for r in relays:
        await r.stop()
    found = await entries(client, STREAM)
    assert len({f[b"event_id"] for _, f in found}) == n  # none lost (a duplicate is allowed)
    await streams.aclose()
