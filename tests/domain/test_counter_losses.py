"""Counts that Redis loses (a restart without persistence, a flush) are reported, never silent.

The session's real redis-server runs with ``--save "" --appendonly no``; these tests kill it
with SIGKILL (a crash: nothing saved) and start it again on the same port, empty.
"""

from __future__ import annotations

import logging

import anyio
import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from domain import CounterStatistics, CountsLost
from domain.backends.redis import RedisCounterStore
from domain.db import articles
from domain.events import catalog
from domain.views import ArticleViews
from eventbus import EventBus
from eventbus.backends.redis import make_redis_client
from eventbus.testing import RecordingListener
from tests.redis_server import RedisServer

NO_LOSS = CounterStatistics(buffered=0, lost=0, store_losses=0, lost_in_store=0)


@pytest.fixture
def client(redis_client: Redis) -> Redis:
    """The counters' client of ``tests/domain/conftest.py``, under a short name."""
    return redis_client


@pytest.fixture
async def seeded(engine: AsyncEngine) -> AsyncEngine:
    async with engine.begin() as conn:
        await conn.execute(insert(articles), [{"id": i, "title": f"a{i}"} for i in (1, 2, 3)])
    return engine


def crash_and_restart(server: RedisServer) -> None:
    """SIGKILL, as a crash (no shutdown save), then start again on the same port, empty."""
    assert server.proc is not None
    server.proc.kill()
    server.proc.wait()
    server.start()


async def reconnect(*clients: Redis) -> None:
    """A pooled connection died with the server: its next command fails once (no retries)."""
    for client in clients:
        for _ in range(3):
            try:
                await client.ping()
                break
            except RedisConnectionError:
                continue


def watched_views(
    store: RedisCounterStore, engine: AsyncEngine
) -> tuple[ArticleViews, RecordingListener]:
    """Views counted from a bus, and what that bus saw of ``counts.lost``."""
    bus = EventBus(registry=catalog)
    views = ArticleViews(store, engine)
    views.attach(bus)
    lost = RecordingListener()
    bus.on(CountsLost, lost)
    return views, lost


async def test_a_restart_that_took_pending_views_is_logged_counted_and_emitted(
    seeded: AsyncEngine,
    client: Redis,
    redis_server: RedisServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Regression test: 65 views pending at a Redis crash were gone and nothing said so."""
    views, lost = watched_views(RedisCounterStore(client), seeded)
    with anyio.fail_after(20):
        for v in range(40):
            await views.view(1, f"v{v}")
        for v in range(25):
            await views.view(2, f"v{v}")
        assert views.statistics() == NO_LOSS
        crash_and_restart(redis_server)
        await reconnect(client)
        with caplog.at_level(logging.ERROR, "domain.counters"):
            await views.view(3, "after")  # the first write finds the marker gone
        assert views.statistics() == CounterStatistics(
            buffered=0, lost=0, store_losses=1, lost_in_store=65
        )
        [event] = lost.events
        assert isinstance(event, CountsLost)
        assert (event.counter, event.pending, event.staged) == ("views", 65, 0)
        assert event.cause == "the Redis server restarted (a new run_id) and did not keep them"
        assert event.last_seen_at is not None and event.last_seen_at <= event.detected_at
        [record] = [r for r in caplog.records if r.name == "domain.counters"]
        assert record.levelno == logging.ERROR
        assert "counter 'views' are gone: the Redis server restarted" in record.getMessage()
        assert "65 pending and up to 0 staged" in record.getMessage()
        await views.view(3, "later")  # one report per loss
        assert len(lost.events) == 1
        await views.flush()  # counting went on: what came after the restart reaches SQL
        assert await views.counts() == {1: 0, 2: 0, 3: 2}


async def test_concurrent_writes_after_a_restart_report_the_loss_once(
    seeded: AsyncEngine, client: Redis, redis_server: RedisServer
) -> None:
    """Each of 20 scripts sent before the first reply came back finds the marker it knew
    gone; the loss is still one loss."""
    views, lost = watched_views(RedisCounterStore(client), seeded)
    with anyio.fail_after(20):
        for v in range(7):
            await views.view(1, f"v{v}")
        crash_and_restart(redis_server)
        await reconnect(client)
        async with anyio.create_task_group() as tg:
            for v in range(20):
                tg.start_soon(views.view, 2, f"after-{v}")
    assert len(lost.events) == 1
    assert views.statistics().lost_in_store == 7


async def test_a_restart_between_stage_and_apply_reports_the_staged_counts(
    seeded: AsyncEngine, client: Redis, redis_server: RedisServer
) -> None:
    store = RedisCounterStore(client)
    views, lost = watched_views(store, seeded)
    with anyio.fail_after(20):
        for v in range(10):
            await views.view(1, f"v{v}")
        assert await store.stage("views", "died-before-sql") > 0  # a flush that went no further
        for v in range(5):
            await views.view(2, f"v{v}")
        crash_and_restart(redis_server)
        await reconnect(client)
        report = await views.flush()  # its stage finds the marker gone
    assert (report.applied, report.total) == (0, 0)
    [event] = lost.events
    assert isinstance(event, CountsLost)
    assert (event.pending, event.staged) == (5, 10)
    assert views.statistics().lost_in_store == 15


async def test_a_flushed_server_is_told_apart_from_a_restart(
    seeded: AsyncEngine, client: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    views, _ = watched_views(RedisCounterStore(client), seeded)
    with anyio.fail_after(10):
        await views.view(1, "a")
        await views.flush()
        await views.view(1, "b")
        await client.flushall()
        with caplog.at_level(logging.ERROR, "domain.counters"):
            await views.view(1, "c")
    assert "its keys were deleted or evicted (the same server process: FLUSHALL" in caplog.text
    assert "1 pending and up to 0 staged" in caplog.text  # the flush before left 1 pending
    assert views.statistics().store_losses == 1


async def test_every_replica_reports_the_loss_and_normal_work_reports_none(
    seeded: AsyncEngine, redis_url: str, redis_server: RedisServer
) -> None:
    """The first replica to write after the restart writes a new marker; the others see that
    it is not the one they knew, so they report the loss too instead of adopting it."""
    clients = [
        make_redis_client(redis_url, decode_responses=True, socket_timeout=2.0) for _ in range(2)
    ]
    try:
        replicas = [watched_views(RedisCounterStore(c), seeded)[0] for c in clients]
        with anyio.fail_after(20):
            for round_ in range(3):  # views and flushes from both: no false alarm
                for i, views in enumerate(replicas):
                    await views.view(1, f"r{round_}-{i}")
                    await replicas[1 - i].flush()
            assert [v.statistics() for v in replicas] == [NO_LOSS, NO_LOSS]
            await replicas[0].view(2, "x")
            crash_and_restart(redis_server)
            await reconnect(*clients)
            for views in replicas:
                await views.view(3, "after")
                await views.view(3, "again")  # the new marker is known now: no second report
            assert [v.statistics().store_losses for v in replicas] == [1, 1]
            assert await replicas[0].counts(1) == {1: 6}  # flushed before the crash: kept
    finally:
        for c in clients:
            await c.aclose()


async def test_a_loss_with_no_counter_listening_is_logged_by_the_store(
    client: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    store = RedisCounterStore(client)
    with anyio.fail_after(10):
        await store.record("clicks", [("docs", None)] * 3, dedupe_ttl=600)
        await client.flushall()
        with caplog.at_level(logging.ERROR, "domain.backends.redis"):
            await store.record("clicks", [("docs", None)], dedupe_ttl=600)
    assert "the counts of counter 'clicks' are gone" in caplog.text
    assert "3 pending" in caplog.text
