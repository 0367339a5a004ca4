"""A PostgreSQL outage under real processes: the database stopped (``pg_ctl stop -m fast``,
every session ended) or paused (SIGSTOP of the server and its backends: nothing answers),
then back. A publisher and a consumer whose listener takes ``tx``, on one PostgreSQL holding
the outbox, the inbox, the failure table and the listener's table.

The PostgreSQL here is the test's own (it is stopped), not the session's.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace

import anyio
import pytest
import sqlalchemy as sa
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from eventbus import FailureStatus
from eventbus.backends.sql import SqlFailureStore, make_engine
from eventbus.durable import RedisStreams, create_durable_tables
from eventbus.durable._tables import outbox
from tests.durable.conftest import FAST, App, Factory, effect_rows, wait_until
from tests.durable.events import OrderPaid, effects, test_metadata
from tests.postgres_server import PostgresNotInstalled, PostgresServer

pytestmark = pytest.mark.slow

Apps = Callable[..., Awaitable[App]]
STREAM = "eventbus:evt:{order.paid}"
#: long enough for every call in flight and every retry of the issue's setup to fail
OUTAGE = 4.0
#: what "a few seconds" after the database is back may take: retries, reclaims, reconnects
AFTER = 25.0

_DATABASES = itertools.count(1)


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[PostgresServer]:
    """This module's own server (its tests stop and pause it); each test restores it."""
    try:
        server = PostgresServer()
    except PostgresNotInstalled as exc:
        pytest.skip(str(exc))
    with server:
        yield server


@pytest.fixture
def pg_url(own_postgres: PostgresServer) -> str:
    """A new database on the module's server, for one test."""
    name = f"test_{next(_DATABASES)}"
    own_postgres.execute(f'CREATE DATABASE "{name}"')
    return own_postgres.url(name)


async def _settled(engine: AsyncEngine, url: str, seen: dict[str, list[str]]) -> bool:
    """Every event published has its effect, or its dead row; ``seen`` keeps what was found."""
    try:
        async with engine.connect() as conn:
            published = set((await conn.execute(sa.select(outbox.c.event_id))).scalars())
        done = [r.event_id for r in await effect_rows(engine)]
        store = SqlFailureStore(url, create_table=False)
        try:
            dead = [r.event_id for r in await store.query(status=FailureStatus.DEAD, limit=None)]
        except sa.exc.ProgrammingError:  # no failure yet: the table is made with the first
            dead = []
        finally:
            await store.aclose()
    except (sa.exc.SQLAlchemyError, OSError):  # the database is still coming back
        return False
    seen.update(published=sorted(published), done=done, dead=dead)
    return len(published) == 200 and set(done) | set(dead) == published


@pytest.mark.parametrize("outage", ["stopped", "paused"])
async def test_a_consumer_and_a_relay_go_on_after_a_postgresql_outage(
    apps: Apps, own_postgres: PostgresServer, pg_url: str, client: Redis, outage: str
) -> None:
    """Regression test (the stuck consumer): during a 15 s fast shutdown of PostgreSQL, the
    relay's backlog count failed with asyncpg's unwrapped ``ConnectionRefusedError``, which
    ended the transport's task group: the consumer process lived on (its stdin thread), called
    no listener and reclaimed nothing, its entries pending for ever."""
    url = pg_url
    common = ("--max-deliveries", "3", "--visibility", "2", "--retry-backoff", "0.3")
    consumer = await apps("--consumer", "c1", "--listener", "grant=slow:0.1", *common, db=url)
    publisher = await apps("--consumer", "p1", "--publish", "200", *common, db=url)
    engine = make_engine(url)
    seen: dict[str, list[str]] = {}
    try:
        await wait_until(lambda: _effects(engine, 30), what="the first effects", within=30)
        if outage == "stopped":
            await anyio.to_thread.run_sync(own_postgres.shutdown)
        else:
            own_postgres.pause()
        try:
            await anyio.sleep(OUTAGE)  # the outage itself: nothing to wait for
        finally:
            if outage == "stopped":
                await anyio.to_thread.run_sync(own_postgres.launch)
            else:
                own_postgres.resume()
        back = time.monotonic()
        await wait_until(
            lambda: _settled(engine, url, seen),
            what="every event handled or dead",
            within=AFTER,
            every=0.25,  # each look opens the failure store
        )
        settled_after = time.monotonic() - back
        await wait_until(lambda: _nothing_pending(client), what="no entry pending", within=10)
        stats = await consumer.stop()
        await publisher.stop()
    finally:
        own_postgres.resume()
        await engine.dispose()
    done = Counter(seen["done"])
    assert set(done.values()) == {1}  # no effect twice
    assert not set(done) & set(seen["dead"])
    assert stats["running"] is False and stats["groups"][0]["delivered"] >= 200
    if outage == "paused":  # nothing failed: every call waited for the database
        assert seen["dead"] == [] and len(done) == 200
    assert settled_after < AFTER


async def _effects(engine: AsyncEngine, n: int) -> bool:
    try:
        async with engine.connect() as conn:
            count = (await conn.execute(sa.select(sa.func.count()).select_from(effects))).scalar()
    except sa.exc.SQLAlchemyError:  # the consumer has not made the table yet
        return False
    return int(count or 0) >= n


async def _nothing_pending(client: Redis) -> bool:
    summary = await client.xpending(STREAM, "svc:grant")
    return int(summary["pending"]) == 0


async def test_a_relay_waits_on_a_silent_database_at_most_db_timeout(
    make_streams: Factory, own_postgres: PostgresServer, pg_url: str
) -> None:
    """Regression test: with PostgreSQL paused (its connections open, nothing answering, as
    behind a dropped network path), the relay's claim waited for as long as the pause
    lasted; now it gives up after ``db_timeout`` and retries, as for any outage."""
    engine = make_engine(pg_url)
    await create_durable_tables(engine)
    streams = make_streams(engine=engine, options=replace(FAST, db_timeout=0.5))
    try:
        async with streams:
            await _publish(streams, engine, 1, 2, 3)
            await wait_until(lambda: streams.statistics().relay.published == 3, what="3")
            own_postgres.pause()
            try:
                await wait_until(
                    lambda: streams.statistics().relay.errors >= 2,
                    what="the relay's waits cut short",
                    within=5,
                )
            finally:
                own_postgres.resume()
            await _publish(streams, engine, 4, 5, 6)
            await wait_until(lambda: streams.statistics().relay.published == 6, what="6")
    finally:
        own_postgres.resume()
        await engine.dispose()


async def _with_tables(url: str) -> AsyncEngine:
    """An engine on *url*, with the durable tables and the test's effects table."""
    engine = make_engine(url)
    async with engine.begin() as conn:
        await conn.run_sync(test_metadata.create_all)
    await create_durable_tables(engine)
    return engine


async def _publish(streams: RedisStreams, engine: AsyncEngine, *order_ids: int) -> None:
    async with engine.begin() as conn:
        await streams.publish_many([OrderPaid(order_id=i) for i in order_ids], conn)


@pytest.mark.parametrize("orders", [1, 3], ids=["alone", "batch"])
async def test_a_commit_on_a_silent_database_waits_at_most_db_timeout(
    make_streams: Factory, own_postgres: PostgresServer, pg_url: str, orders: int
) -> None:
    """Regression test: a listener taking ``tx`` returned while PostgreSQL was paused; the
    commit waited as long as the pause lasted, holding the call's slot and renewing its
    lease. Now the commit gives up after ``db_timeout`` and the call is retried: one effect
    once the database answers again (the first commit, sent before the pause, may land: the
    retry then finds the inbox row). With several entries read together the batch's one
    commit is bounded the same way (every call of the batch fails, and is retried)."""
    engine = await _with_tables(pg_url)
    # one transaction at a time: the entries read together are one batch (with transactions
    # free, a burst would be shared among them)
    options = replace(FAST, db_timeout=0.5, concurrency=1)
    streams = make_streams(engine=engine, options=options)
    entered, paused = anyio.Event(), anyio.Event()
    calls = 0

    async def grant(e: OrderPaid, tx: AsyncConnection) -> None:
        nonlocal calls
        calls += 1
        await tx.execute(
            effects.insert().values(listener="grant", event_id="", order_id=e.order_id)
        )
        if calls == orders:  # the batch's last call: the database stops before the commit
            entered.set()
            await paused.wait()

    streams.subscribe(OrderPaid, grant, name="grant")
    try:
        async with streams:
            await _publish(streams, engine, *range(1, orders + 1))
            with anyio.fail_after(10):
                await entered.wait()
            own_postgres.pause()
            try:
                paused.set()
                await wait_until(
                    lambda: streams.statistics().group("grant").failed == orders,
                    what="the commit cut short",
                    within=5,
                )
            finally:
                own_postgres.resume()
            await wait_until(lambda: _ended(streams, orders), what="the retries")
        assert sorted(r.order_id for r in await effect_rows(engine)) == list(range(1, orders + 1))
        if orders > 1:
            assert streams.statistics().group("grant").batches >= 1
    finally:
        own_postgres.resume()
        await engine.dispose()


async def test_the_check_after_a_failed_call_waits_at_most_db_timeout(
    make_streams: Factory, own_postgres: PostgresServer, pg_url: str
) -> None:
    """Regression test: when a call that is not its batch's first raised, whether the
    transaction was aborted (by an earlier call) is asked of the database with no deadline:
    a database gone silent then held the group until it answered again."""
    engine = await _with_tables(pg_url)
    options = replace(FAST, db_timeout=0.5, concurrency=1)  # the two entries: one batch
    streams = make_streams(engine=engine, options=options)
    calls = 0

    async def grant(e: OrderPaid, tx: AsyncConnection) -> None:
        nonlocal calls
        calls += 1
        await tx.execute(
            effects.insert().values(listener="grant", event_id="", order_id=e.order_id)
        )
        if calls == 2:  # the batch's second call: the database stops, then it raises
            own_postgres.pause()
            raise RuntimeError("not the database's fault")

    streams.subscribe(OrderPaid, grant, name="grant")
    try:
        async with streams:
            await _publish(streams, engine, 1, 2)
            try:
                await wait_until(
                    lambda: streams.statistics().group("grant").failed >= 1,
                    what="the batch given up on",
                    within=5,
                )
            finally:
                own_postgres.resume()
            await wait_until(lambda: _ended(streams, 2), what="the retries")
        assert sorted(r.order_id for r in await effect_rows(engine)) == [1, 2]
    finally:
        own_postgres.resume()
        await engine.dispose()


def _ended(streams: RedisStreams, orders: int = 1) -> bool:
    group = streams.statistics().group("grant")
    return group.succeeded + group.duplicates == orders
