"""A listener's database down under a steady publish rate (PostgreSQL stopped with a fast
shutdown, then started again): the group's kill switch pauses it instead of spending its
entries' deliveries, so nothing is dead-lettered and every event has its effect once after."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import Event
from eventbus.backends.sql import make_engine
from eventbus.durable import DeadLettered, GroupPaused, GroupResumed
from tests.durable.conftest import FAST, Factory, wait_until
from tests.durable.events import OrderPaid, effects, test_metadata
from tests.postgres_server import PostgresServer

pytestmark = pytest.mark.slow

RATE = 50  # events per second
PUBLISHING = 10.0  # seconds
OUTAGE = (2.0, 8.0)  # seconds after the first publish: stopped, started again


@pytest.fixture
async def listener_db(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    eng = make_engine(postgres_url)
    async with eng.begin() as conn:
        await conn.run_sync(test_metadata.create_all)
    yield eng
    await eng.dispose()


async def test_a_listener_database_outage_pauses_the_group_and_dead_letters_nothing(
    make_streams: Factory,
    engine: AsyncEngine,
    listener_db: AsyncEngine,
    postgres_server: PostgresServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Retries as by default, only quicker (0.25, 0.5, 1, 2 s: an entry's deliveries last
    # 3.75 s, well within the outage); the window a fraction of that, as the options'
    # documentation advises. Without the kill switch, this test dead-letters dozens.
    options = replace(
        FAST, visibility=2.0, retry_backoff=0.25, max_deliveries=5, concurrency=8,
        trip_after=10, trip_ratio=0.5, trip_window=1.0, pause=0.5, max_pause=2.0,
    )  # fmt: skip
    streams = make_streams(options=options)
    announced: list[Event] = []
    streams.notify = announced.append

    async def grant(e: OrderPaid) -> None:  # its own database: no inbox to hide a repeat
        async with listener_db.begin() as conn:
            await conn.execute(
                effects.insert().values(
                    listener="grant", event_id=str(e.order_id), order_id=e.order_id
                )
            )

    streams.subscribe(OrderPaid, grant, name="grant")
    n = int(RATE * PUBLISHING)
    caplog.set_level(logging.ERROR, logger="eventbus.durable")
    async with streams:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_outage, postgres_server)
            for i in range(n):  # a steady rate, into the outbox (SQLite: up all along)
                async with engine.begin() as conn:
                    await streams.publish(OrderPaid(order_id=i), conn)
                await anyio.sleep(1 / RATE)
        await wait_until(lambda: _all_done(listener_db, n), what="every effect", within=60)
        stats = streams.statistics().group("grant")
    counts = await _effects(listener_db)
    assert counts == Counter(range(n))  # each once
    assert stats.dead == 0 and not any(isinstance(e, DeadLettered) for e in announced)
    assert stats.trips >= 1 and not stats.paused
    assert sum(isinstance(e, GroupPaused) for e in announced) == 1  # the alarm, once
    assert sum(isinstance(e, GroupResumed) for e in announced) == 1
    alarms = [r for r in caplog.records if "paused by its kill switch" in r.getMessage()]
    assert len(alarms) == 1


async def _outage(server: PostgresServer) -> None:
    await anyio.sleep(OUTAGE[0])
    await anyio.to_thread.run_sync(server.shutdown)
    try:
        await anyio.sleep(OUTAGE[1] - OUTAGE[0])
    finally:
        await anyio.to_thread.run_sync(server.launch)


async def _effects(db: AsyncEngine) -> Counter[int]:
    async with db.connect() as conn:
        rows = (await conn.execute(sa.select(effects.c.order_id))).all()
    return Counter(r.order_id for r in rows)


async def _all_done(db: AsyncEngine, n: int) -> bool:
    try:
        return len(await _effects(db)) >= n
    except (OSError, sa.exc.DBAPIError):  # still starting
        return False
