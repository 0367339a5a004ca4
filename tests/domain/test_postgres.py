"""The domain on a real PostgreSQL: the races the SQLite tests can only approximate.

Each replica gets its own engine (its own connections), so the claims really run
concurrently on the server: ``ON CONFLICT DO NOTHING`` for the pool refill, the conditional
``UPDATE`` that claims a pool code, ``FOR UPDATE SKIP LOCKED`` for publishing, and the flush
ledger's primary key for counter flushes.
"""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta

import anyio
import pytest
from anyio.lowlevel import checkpoint
from sqlalchemy import func, insert, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from domain.abc import CounterStore
from domain.db import articles, create_tables, flush_ledger, schedule_records, short_links
from domain.db import shortlink_pool as pool
from domain.events import ArticlePublished, catalog
from domain.publishing import Publisher
from domain.shortlinks import ShortLinks
from domain.views import ArticleViews
from eventbus import EventBus
from tests.domain.pause import Pause
from tests.domain.test_shortlinks import (
    test_a_string_that_cannot_be_a_code_is_a_miss as test_a_string_that_cannot_be_a_code_is_a_miss,
)  # collected here again: the same cases on PostgreSQL (this module's ``engine``)

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
N_ARTICLES = 20


@pytest.fixture
async def engines(postgres_url: str) -> AsyncIterator[Callable[[], AsyncEngine]]:
    """A factory of engines on one fresh database (tables created); all disposed after."""
    made: list[AsyncEngine] = []

    def make() -> AsyncEngine:
        made.append(create_async_engine(postgres_url))
        return made[-1]

    async with make().begin() as conn:
        await conn.run_sync(lambda c: None)  # connect once: a bad URL fails here
    await create_tables(made[0])
    yield make
    for eng in made:
        assert eng.pool.checkedout() == 0  # type: ignore[attr-defined]
        await eng.dispose()


@pytest.fixture
def engine(engines: Callable[[], AsyncEngine]) -> AsyncEngine:
    """Overrides tests/domain/conftest.py's SQLite engine."""
    return engines()


async def seed_articles(engine: AsyncEngine, n: int) -> None:
    async with engine.begin() as conn:
        await conn.execute(insert(articles), [{"id": i, "title": f"a{i}"} for i in range(1, n + 1)])


async def seed_due(engine: AsyncEngine, n: int) -> None:
    """Articles 1 to *n* due for publishing, in that order: the rows schedule_publish() would
    write (see the rescheduling test for why it is not used here: its upsert fails on
    PostgreSQL from the sixth call on a connection)."""
    async with engine.begin() as conn:
        await conn.execute(
            insert(schedule_records),
            [
                {
                    "target_id": i,
                    "type": Publisher.type,
                    "execution_time": T0 + timedelta(seconds=i),
                    "status": "pending",
                    "created_at": T0,
                    "updated_at": T0,
                }
                for i in range(1, n + 1)
            ],
        )


async def pool_codes(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        return list((await conn.execute(select(pool.c.code))).scalars())


async def test_refill_skips_duplicate_codes_with_on_conflict_do_nothing(
    engine: AsyncEngine,
) -> None:
    links = ShortLinks(engine, batch=4)
    with anyio.fail_after(10):
        await links.create("https://example.com", alias="dupe01")
        script = iter(["aaaaaa", "aaaaaa", "dupe01", "bbbbbb"] + [f"c{i:05d}" for i in range(99)])
        links.code_factory = lambda: next(script)
        assert await links.refill(watermark=6) == 6
        codes = await pool_codes(engine)
        assert await links.refill(watermark=6) == 0
    # batch 1 keeps 2 of 4 (a duplicate within the batch, the alias), batch 2 tops up
    assert sorted(codes) == ["aaaaaa", "bbbbbb", "c00000", "c00001", "c00002", "c00003", "dupe01"]


async def test_two_replicas_refilling_at_once_never_duplicate_a_code(
    engines: Callable[[], AsyncEngine],
) -> None:
    """Both draw from the same small code space, so their batches collide on the server."""
    rng = random.Random(3)
    space = [f"k{i:05d}" for i in range(150)]
    replicas = [ShortLinks(engines(), batch=25, code_factory=lambda: rng.choice(space))]
    replicas.append(ShortLinks(engines(), batch=25, code_factory=lambda: rng.choice(space)))
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            for links in replicas:
                tg.start_soon(functools.partial(links.refill, watermark=60))
        codes = await pool_codes(replicas[0].engine)
    assert len(codes) == len(set(codes)) >= 60


# Holds each transaction's second insert into the pool until the test releases advisory lock
# 4242: every transaction that is inside a refill batch is then between two rows at once.
HOLD_THE_SECOND_ROW = [
    """
CREATE FUNCTION hold_the_second_row() RETURNS trigger AS $$
BEGIN
    IF current_setting('eventbus_test.inserted', true) = 'yes' THEN
        PERFORM pg_advisory_xact_lock_shared(4242);
    END IF;
    PERFORM set_config('eventbus_test.inserted', 'yes', true);
    RETURN NEW;
END $$ LANGUAGE plpgsql
""",
    """
CREATE TRIGGER hold_the_second_row BEFORE INSERT ON shortlink_pool
    FOR EACH ROW EXECUTE FUNCTION hold_the_second_row()
""",
]


async def wait_for_lock_waits(conn: AsyncConnection, n: int) -> None:
    """Until *n* lock requests wait in the server (it has no event for that: poll ``pg_locks``,
    a live view, where ``pg_stat_activity`` is a snapshot per transaction)."""
    query = text("SELECT count(*) FROM pg_locks WHERE NOT granted")
    while await conn.scalar(query) != n:  # noqa: ASYNC110
        await anyio.sleep(0.01)


async def test_two_refills_drawing_the_same_codes_in_opposite_order_never_deadlock(
    engines: Callable[[], AsyncEngine],
) -> None:
    """Regression test: replica A inserted k1 then waited for k2, which replica B had inserted
    first and which then waited for k1: "deadlock detected", and one refill failed (1 run in
    25 of the racing test above). Both batches are now inserted in sorted order."""
    first, second, holder = engines(), engines(), engines()
    replicas = [
        ShortLinks(first, batch=2, code_factory=iter(["k1", "k2"]).__next__),
        ShortLinks(second, batch=2, code_factory=iter(["k2", "k1"]).__next__),
    ]
    with anyio.fail_after(20):
        async with first.begin() as conn:
            for statement in HOLD_THE_SECOND_ROW:
                await conn.exec_driver_sql(statement)
        async with holder.connect() as gate:
            await gate.execute(text("SELECT pg_advisory_lock(4242)"))
            async with anyio.create_task_group() as tg:
                for links in replicas:
                    tg.start_soon(functools.partial(links.refill, watermark=2))
                await wait_for_lock_waits(gate, 2)  # both inside their batch, neither done
                await gate.execute(text("SELECT pg_advisory_unlock(4242)"))
        codes = await pool_codes(first)
    assert sorted(codes) == ["k1", "k2"]


async def test_50_creators_racing_for_10_idle_codes_never_share_one(
    engines: Callable[[], AsyncEngine], caplog: pytest.LogCaptureFixture
) -> None:
    first = ShortLinks(engines())
    replicas = [first, ShortLinks(engines()), ShortLinks(engines())]
    made = []

    async def creator(i: int) -> None:
        made.append(await replicas[i % 3].create(f"https://example.com/{i}"))

    with caplog.at_level(logging.WARNING, "domain.shortlinks"), anyio.fail_after(30):
        await first.refill(watermark=10)
        idle = set(await pool_codes(first.engine))
        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(creator, i)
        async with first.engine.connect() as conn:
            urls = dict((await conn.execute(select(short_links.c.code, short_links.c.url))).all())
            statuses = (
                await conn.execute(select(pool.c.status, func.count()).group_by(pool.c.status))
            ).all()
    codes = [link.code for link in made]
    assert len(codes) == len(set(codes)) == 50  # distinct codes, none handed out twice
    assert {link.code for link in made if link.source == "pool"} == idle  # each idle code once
    assert sum(link.source == "fallback" for link in made) == 40
    assert "pool is empty" in caplog.text
    assert {link.code: link.url for link in made} == urls
    assert dict(statuses) == {"claimed": 50}


async def test_two_publishers_racing_publish_each_article_once(
    engines: Callable[[], AsyncEngine],
) -> None:
    clock_now = [T0 + timedelta(minutes=1)]
    events: list[int] = []
    bus = EventBus(registry=catalog)
    bus.on(ArticlePublished, lambda e: events.append(e.article_id))
    replicas = [
        Publisher(engines(), bus=bus, clock=lambda: clock_now[0], batch=3) for _ in range(4)
    ]
    engine = replicas[0].engine
    results: list[list[int]] = []

    async def run(p: Publisher) -> None:
        results.append(await p.publish_due())

    with anyio.fail_after(30):
        await seed_articles(engine, 40)
        await seed_due(engine, 40)
        async with anyio.create_task_group() as tg:
            for p in replicas:
                tg.start_soon(run, p)
        async with engine.connect() as conn:
            published = await conn.scalar(
                select(func.count()).where(articles.c.status == "published")
            )
            done = await conn.scalar(
                select(func.count()).where(schedule_records.c.status == "done")
            )
    everything = [i for r in results for i in r]
    assert sorted(everything) == list(range(1, 41))  # each article once, none missed
    assert sorted(events) == list(range(1, 41))
    assert (published, done) == (40, 40)
    # Which replica took which rows depends on scheduling (one may take them all); the next
    # test forces the interleaving in which SKIP LOCKED makes them share.


async def test_a_replica_holding_a_batch_never_holds_up_another_which_takes_the_rest(
    engines: Callable[[], AsyncEngine],
) -> None:
    """Replica A has claimed rows 1-3 and not committed; replica B publishes 4-40 meanwhile,
    without waiting for A (``FOR UPDATE SKIP LOCKED``: without it B blocks on A's rows and
    this test times out), then A publishes its three. Each article once, by one replica."""
    a_engine, b_engine = engines(), engines()
    now = T0 + timedelta(minutes=1)
    events: list[int] = []
    bus = EventBus(registry=catalog)
    bus.on(ArticlePublished, lambda e: events.append(e.article_id))
    a, b = (Publisher(e, bus=bus, clock=lambda: now, batch=3) for e in (a_engine, b_engine))
    claim = Pause(
        a_engine,
        "after_cursor_execute",
        lambda conn, cursor, statement, *rest: statement.startswith("UPDATE schedule_records"),
    )
    published: dict[str, list[int]] = {}

    async def run(name: str, publisher: Publisher) -> None:
        published[name] = await publisher.publish_due()

    with anyio.fail_after(10):
        await seed_articles(a_engine, 40)
        await seed_due(a_engine, 40)
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "a", a)
            await claim.reached.wait()  # A is inside its first batch, rows 1-3 locked
            await run("b", b)
            claim.release()
    assert published == {"a": [1, 2, 3], "b": list(range(4, 41))}
    assert sorted(events) == list(range(1, 41))


async def test_schedule_publish_works_for_the_first_five_calls_on_a_connection(
    engine: AsyncEngine,
) -> None:
    publisher = Publisher(engine, clock=lambda: T0)
    with anyio.fail_after(10):
        await seed_articles(engine, 1)
        first = await publisher.schedule_publish(1, T0 + timedelta(hours=1))
        again = await publisher.schedule_publish(1, T0 + timedelta(hours=2))
        assert await publisher.pending() == [(1, T0 + timedelta(hours=2))]
        assert await publisher.cancel(1)
        third = await publisher.schedule_publish(1, T0 + timedelta(hours=3))
    assert first == again != third  # a cancelled row is history; a new pending row is made


async def test_schedule_publish_keeps_working_past_five_calls_on_one_connection(
    engine: AsyncEngine,
) -> None:
    """Regression test: asyncpg prepares each statement; PostgreSQL switches to a generic plan."""
    publisher = Publisher(engine, clock=lambda: T0)
    with anyio.fail_after(10):
        await seed_articles(engine, 8)
        for i in range(1, 9):
            await publisher.schedule_publish(i, T0 + timedelta(hours=1))
        for i in range(1, 9):  # rescheduling: the upsert's DO UPDATE path
            await publisher.schedule_publish(i, T0 + timedelta(hours=2))
        pending = await publisher.pending()
    assert pending == [(i, T0 + timedelta(hours=2)) for i in range(1, 9)]


async def test_views_flush_conserves_every_view_with_two_replicas_flushing(
    engines: Callable[[], AsyncEngine], store: CounterStore
) -> None:
    """SQL total + pending = fresh views issued, while writers and two replicas' flushes run.

    Both replicas share the counter store (memory: one process; Redis: as in production);
    each flushes through its own engine, so the flush ledger arbitrates on the server.
    """
    replicas = [ArticleViews(store, engines()), ArticleViews(store, engines())]
    engine = replicas[0].engine
    issued = 0
    rng = random.Random(7)

    async def writer(w: int) -> None:
        nonlocal issued
        for i in range(60):
            await replicas[i % 2].view(rng.randint(1, N_ARTICLES), f"w{w}-v{i}")
            issued += 1
            if i % 20 == 0:  # a repeat inside the window counts once
                article = rng.randint(1, N_ARTICLES)
                await replicas[0].view(article, f"w{w}-v{i}-dup")
                await replicas[1].view(article, f"w{w}-v{i}-dup")
                issued += 1

    async def flusher(views: ArticleViews, done: anyio.Event) -> None:
        while not done.is_set():
            await views.flush()
            await checkpoint()

    with anyio.fail_after(30):
        await seed_articles(engine, N_ARTICLES)
        done = anyio.Event()
        async with anyio.create_task_group() as outer:
            for views in replicas:
                outer.start_soon(flusher, views, done)
            async with anyio.create_task_group() as tg:
                for w in range(8):
                    tg.start_soon(writer, w)
            done.set()
        mid = await sql_total(engine) + sum((await replicas[0].pending()).values())
        await replicas[1].flush()
        assert await store.staged("views") == []
        total = await sql_total(engine)
        async with engine.connect() as conn:
            ledger = await conn.scalar(select(func.coalesce(func.sum(flush_ledger.c.total), 0)))
    assert mid == issued
    assert total == issued == ledger  # every applied flush has its ledger row, none twice


async def sql_total(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        total = await conn.scalar(select(func.coalesce(func.sum(articles.c.view_count), 0)))
    return int(total or 0)
