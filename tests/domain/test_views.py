"""View counting on both stores: dedupe window, conservation, and the exactly-once flush."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked
from anyio.lowlevel import checkpoint
from redis.asyncio import Redis
from sqlalchemy import event, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from domain.abc import CounterStore
from domain.backends.memory import MemoryCounterStore
from domain.backends.redis import RedisCounterStore
from domain.counters import Counter
from domain.db import articles, create_tables, flush_ledger, short_links
from domain.views import ArticleViews
from eventbus.backends.redis import make_redis_client
from tests.domain.conftest import FakeClock, advance

N_ARTICLES = 20
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
async def views(engine: AsyncEngine, store: CounterStore) -> AsyncIterator[ArticleViews]:
    async with engine.begin() as conn:
        await conn.execute(
            insert(articles), [{"id": i, "title": f"a{i}"} for i in range(1, N_ARTICLES + 1)]
        )
    yield ArticleViews(store, engine)


async def sql_total(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        rows = (await conn.execute(select(articles.c.view_count))).scalars().all()
    return sum(rows)


async def test_both_stores_fit_the_protocol(store: CounterStore) -> None:
    assert isinstance(store, CounterStore)


def _type_check_protocol_fit(redis: Redis) -> None:
    """Never called: mypy checks that both concrete classes fit the Protocol."""
    _memory: CounterStore = MemoryCounterStore()
    _redis: CounterStore = RedisCounterStore(redis)


async def test_viewer_counts_once_per_window(
    views: ArticleViews, store: CounterStore, clock: FakeClock
) -> None:
    with anyio.fail_after(5):
        for _ in range(3):
            await views.view(1, "alice")
        await views.view(1, "bob")
        await views.view(2, "alice")  # another article: its own window
        assert await views.pending() == {1: 2, 2: 1}
        await advance(store, clock, 599)
        await views.view(1, "alice")
        assert await views.pending() == {1: 2, 2: 1}
        await advance(store, clock, 2)
        await views.view(1, "alice")
        assert await views.pending() == {1: 3, 2: 1}


@pytest.mark.parametrize(
    "viewer",
    [
        pytest.param("", id="empty"),
        pytest.param("a\tb", id="tab"),
        pytest.param("a\n", id="newline"),
    ],
)
async def test_unusable_viewer_keys_are_refused(views: ArticleViews, viewer: str) -> None:
    with pytest.raises(ValueError, match="without tabs or newlines"):
        await views.view(1, viewer)
    assert await views.pending() == {}


async def test_flush_adds_deltas_to_sql_and_clears_pending(views: ArticleViews) -> None:
    with anyio.fail_after(5):
        await views.view(1, "a")
        await views.view(1, "b")
        await views.view(3, "a")
        report = await views.flush()
        assert (report.applied, report.items, report.total) == (1, 2, 3)
        assert await views.pending() == {}
        await views.view(1, "c")
        await views.flush()
        counts = await views.counts(1, 3)
        assert counts == {1: 3, 3: 1}
        empty = await views.flush()
        assert (empty.applied, empty.total) == (0, 0)


async def test_conservation_with_concurrent_writers_and_flushes(
    views: ArticleViews, engine: AsyncEngine
) -> None:
    """SQL total + pending = fresh views issued, with writers and flushes running together."""
    issued = 0
    rng = random.Random(7)

    async def writer(w: int) -> None:
        nonlocal issued
        for i in range(150):
            await views.view(rng.randint(1, N_ARTICLES), f"w{w}-v{i}")
            issued += 1
            if i % 40 == 0:  # a repeat inside the window counts once
                article = rng.randint(1, N_ARTICLES)
                await views.view(article, f"w{w}-v{i}-dup")
                await views.view(article, f"w{w}-v{i}-dup")
                issued += 1

    async def flusher(done: anyio.Event) -> None:
        while not done.is_set():
            await views.flush()
            await checkpoint()

    with anyio.fail_after(30):
        done = anyio.Event()
        async with anyio.create_task_group() as outer:
            outer.start_soon(flusher, done)
            outer.start_soon(flusher, done)  # two flushes racing: the ledger arbitrates
            async with anyio.create_task_group() as tg:
                for w in range(10):
                    tg.start_soon(writer, w)
            done.set()
        mid = await sql_total(engine) + sum((await views.pending()).values())
        await views.flush()
        assert await views.counter.store.staged("views") == []
    assert mid == issued
    assert await sql_total(engine) == issued


class Boom(Exception):
    pass


def fail_next_update(engine: AsyncEngine, table: str, action: Any = None) -> None:
    """Inject one fault into the SQL step: the next ``UPDATE <table>`` raises (or runs *action*)."""

    armed = [True]

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if armed[0] and statement.startswith(f"UPDATE {table}"):
            armed[0] = False
            if action is None:
                raise Boom("injected fault in the SQL step")
            action()

    event.listen(engine.sync_engine, "before_cursor_execute", before)


async def test_flush_interrupted_before_commit_loses_nothing_applies_nothing_twice(
    views: ArticleViews, engine: AsyncEngine, store: CounterStore
) -> None:
    with anyio.fail_after(5):
        for v in range(5):
            await views.view(1, f"v{v}")
        fail_next_update(engine, "articles")
        with pytest.raises(Boom):
            await views.flush()
        assert await sql_total(engine) == 0
        assert len(await store.staged("views")) == 1  # taken, not lost
        await views.view(2, "late")  # arrives after the take: pending again
        report = await views.flush()
        assert (report.applied, report.total) == (2, 6)
        assert await views.counts(1, 2) == {1: 5, 2: 1}
        again = await views.flush()
        assert (again.applied, again.skipped, again.total) == (0, 0, 0)
        assert await views.counts(1, 2) == {1: 5, 2: 1}


async def test_flush_dying_after_commit_is_not_applied_again(
    views: ArticleViews, engine: AsyncEngine, store: CounterStore
) -> None:
    with anyio.fail_after(5):
        for v in range(4):
            await views.view(3, f"v{v}")
        # the first two steps of a flush, then a "crash" before the staging keys are dropped
        assert await store.stage("views", "f1") > 0
        assert await store.stage("views", "f1") == 0  # idempotent: a retried stage is a no-op
        assert await views.counter.apply("f1", await store.read_staged("views", "f1"))
        assert await views.counts(3) == {3: 4}
        report = await views.flush()
        assert (report.applied, report.skipped) == (0, 1)
        assert await views.counts(3) == {3: 4}
        assert await store.staged("views") == []
        async with engine.connect() as conn:
            ids = (await conn.execute(select(flush_ledger.c.flush_id))).scalars().all()
        assert ids == ["f1"]


async def test_purge_ledger_keeps_recent_rows(views: ArticleViews, engine: AsyncEngine) -> None:
    await views.view(1, "a")
    await views.flush()
    assert await views.counter.purge_ledger() == 0  # applied seconds ago: kept
    assert await views.counter.purge_ledger(older_than=timedelta(seconds=-1)) == 1
    async with engine.connect() as conn:
        assert (await conn.execute(select(flush_ledger))).all() == []


async def test_stage_whose_reply_was_lost_is_applied_by_the_next_flush(
    views: ArticleViews, store: CounterStore
) -> None:
    """The Lua ``HGETALL`` + ``DEL`` failure mode: the take ran but its caller never knew."""
    with anyio.fail_after(5):
        for v in range(3):
            await views.view(2, f"v{v}")
        await store.stage("views", "lost-reply")  # ran on the server; the reply is "lost"
        assert await views.pending() == {}
        report = await views.flush()
        assert (report.applied, report.total) == (1, 3)
        assert await views.counts(2) == {2: 3}


async def test_counters_with_other_key_types_share_connections(tmp_path: Path) -> None:
    """Regression: a temporary delta table of an int-keyed counter, left on a pooled
    connection, made a str-keyed counter's flush fail and its counts be taken as applied."""
    engine = create_async_engine(
        f"sqlite+aiosqlite:///{tmp_path}/one.db", pool_size=1, max_overflow=0
    )
    try:
        await create_tables(engine)
        async with engine.begin() as conn:
            await conn.execute(insert(articles).values(id=1, title="a"))
            await conn.execute(
                insert(short_links).values(code="docs", url="https://e.com", created_at=T0)
            )
        store = MemoryCounterStore()
        views = Counter(store, engine, name="views", column=articles.c.view_count)
        clicks = Counter(store, engine, name="clicks", column=short_links.c.clicks)
        with anyio.fail_after(5):
            for round_ in range(2):
                await views.hit(1, f"v{round_}")
                await clicks.hit("docs")
                await views.flush()
                await clicks.flush()
            async with engine.connect() as conn:
                assert await conn.scalar(select(articles.c.view_count)) == 2
                assert await conn.scalar(select(short_links.c.clicks)) == 2
    finally:
        await engine.dispose()


async def test_pre_aggregation_buffers_until_window_or_batch(engine: AsyncEngine) -> None:
    store = MemoryCounterStore()
    async with engine.begin() as conn:
        await conn.execute(insert(articles), [{"id": 1, "title": "a"}])
    views = ArticleViews(store, engine, window=3600, max_batch=10)
    with pytest.raises(RuntimeError, match="async with counter"):
        await views.view(1, "x")
    with anyio.fail_after(5):
        async with views:
            for v in range(9):
                await views.view(1, f"v{v}")
            await wait_all_tasks_blocked()
            assert await views.pending() == {}  # held in process for the window
            await views.view(1, "v9")  # the batch is full: sent without waiting
            await wait_all_tasks_blocked()
            assert await views.pending() == {1: 10}
            await views.view(1, "v10")
        assert await views.pending() == {1: 11}  # flushed on close


async def test_redis_paused_during_flush_loses_nothing(
    engine: AsyncEngine, redis_url: str, redis_server: Any
) -> None:
    client = make_redis_client(redis_url, decode_responses=True, socket_timeout=0.3)
    try:
        store = RedisCounterStore(client)
        async with engine.begin() as conn:
            await conn.execute(insert(articles), [{"id": 1, "title": "a"}, {"id": 2, "title": "b"}])
        views = ArticleViews(store, engine)
        with anyio.fail_after(20):
            for v in range(6):
                await views.view(1, f"v{v}")
            # 1) stopped before the take: the stage script times out, then maybe runs on resume
            redis_server.pause()
            try:
                with pytest.raises(Exception, match="[Tt]imeout"):
                    await views.flush()
            finally:
                redis_server.resume()
            staged = [await store.read_staged("views", f) for f in await store.staged("views")]
            held = sum((await store.pending("views")).values()) + sum(
                sum(d.values()) for d in staged
            )
            assert held == 6  # still pending, or staged by a script whose reply was lost
            await views.view(2, "w")
            # 2) stopped between the SQL commit and the drop of the staging keys
            fail_next_update(engine, "articles", action=redis_server.pause)
            try:
                with pytest.raises(Exception, match="[Tt]imeout"):
                    await views.flush()
            finally:
                redis_server.resume()
            await views.view(2, "x")
            await views.flush()
            assert await views.counts(1, 2) == {1: 6, 2: 2}
            assert await store.staged("views") == []
            assert await store.pending("views") == {}
    finally:
        await client.aclose()
