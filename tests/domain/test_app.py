"""The wired app: its jobs, their production schedules, and a final flush on exit."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis
from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from domain import (
    App,
    ArticlePublished,
    ArticleViewed,
    CountsLost,
    MemoryCounterStore,
    Schedules,
)
from domain.db import articles
from eventbus.testing import RecordingListener


async def test_jobs_run_on_the_production_schedules(engine: AsyncEngine) -> None:
    app = App(engine, counters=MemoryCounterStore())
    plan = {job.name: (job.trigger.cron.expr, job.lock_ttl) for job in app.scheduler.jobs()}  # type: ignore[union-attr]
    assert plan == {
        "flush_clicks": ("30 * * * * *", 60.0),
        "flush_views": ("0 * * * * *", 60.0),
        "publish_due": ("15 * * * * *", 60.0),  # second 15 of every minute
        "refill_pool": ("0 0 3 * * *", 600.0),  # daily
    }
    assert Schedules.fast().publish == "* * * * * *"


async def test_triggered_jobs_flush_publish_and_refill(engine: AsyncEngine) -> None:
    app = App(engine, counters=MemoryCounterStore(), refill_watermark=7)
    published: list[int] = []
    app.bus.on(ArticlePublished, lambda e: published.append(e.article_id))
    with anyio.fail_after(20):
        async with app:
            async with engine.begin() as conn:
                await conn.execute(insert(articles), [{"id": 1, "title": "a"}])
            for viewer in ["a", "b", "a"]:
                await app.bus.emit_async(ArticleViewed(article_id=1, viewer_key=viewer))
            run = await app.scheduler.trigger("flush_views")
            assert run.status == "succeeded"
            assert await app.views.counts(1) == {1: 2}

            now = datetime.now(UTC)
            await app.publisher.schedule_publish(1, now + timedelta(minutes=5))
            app.publisher.clock = lambda: now + timedelta(minutes=6)
            assert (await app.scheduler.trigger("publish_due")).status == "succeeded"
            assert published == [1]

            assert (await app.scheduler.trigger("refill_pool")).status == "succeeded"
            assert await app.links.idle_codes() == 7


async def test_leaving_the_app_flushes_pending_counts(engine: AsyncEngine) -> None:
    app = App(engine, counters=MemoryCounterStore())
    with anyio.fail_after(20):
        async with app:
            async with engine.begin() as conn:
                await conn.execute(insert(articles), [{"id": 5, "title": "a"}])
            app.bus.emit(ArticleViewed(article_id=5, viewer_key="x"))  # a background listener
        async with engine.connect() as conn:
            assert await conn.scalar(select(articles.c.view_count)) == 1


async def test_views_still_queued_on_the_bus_at_exit_reach_the_view_window(
    engine: AsyncEngine,
) -> None:
    """Regression test: with ``view_window`` set, the window closed before the bus drained, so
    every view still queued on the bus failed with RuntimeError and was never counted."""
    app = App(engine, counters=MemoryCounterStore(), view_window=3600)
    with anyio.fail_after(20):
        async with app:
            async with engine.begin() as conn:
                await conn.execute(insert(articles), [{"id": 1, "title": "a"}])
            for v in range(50):
                app.bus.emit(ArticleViewed(article_id=1, viewer_key=f"v{v}"))  # queued
        assert await app.views.counts(1) == {1: 50}
        await app.bus.failures.flush()
        assert await app.bus.failures.query(limit=None) == []


async def test_embedded_with_redis_warns_once_at_start_when_redis_can_lose_counts(
    tmp_path: Path, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The session's redis-server has no persistence: one WARNING, at start, not per use."""
    with caplog.at_level(logging.WARNING, "domain"), anyio.fail_after(20):
        async with App.embedded(tmp_path / "a.db", redis_url=redis_url) as app:
            await app.bus.emit_async(ArticleViewed(article_id=1, viewer_key="v"))
            await app.scheduler.trigger("flush_views")
            await app.scheduler.trigger("flush_clicks")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].startswith("Redis at 127.0.0.1:")
    assert "can lose pending counts and locks: no persistence" in warnings[0]


async def test_the_app_announces_views_and_clicks_that_redis_lost(
    tmp_path: Path, redis_url: str, redis_client: Redis
) -> None:
    with anyio.fail_after(20):
        async with App.embedded(tmp_path / "a.db", redis_url=redis_url) as app:
            lost = RecordingListener()
            app.bus.on(CountsLost, lost)
            async with app.engine.begin() as conn:
                await conn.execute(insert(articles), [{"id": 1, "title": "a"}])
            link = await app.links.create("https://example.com/", alias="docs")
            await app.bus.emit_async(ArticleViewed(article_id=1, viewer_key="v"))
            assert app.links.clicks is not None
            await app.links.clicks.hit(link.code)
            await redis_client.flushall()  # as a restart without persistence would
            await app.scheduler.trigger("flush_views")
            await app.scheduler.trigger("flush_clicks")
            stats = (app.views.statistics(), app.links.clicks.statistics())
    events = [e for e in lost.events if isinstance(e, CountsLost)]
    assert sorted((e.counter, e.pending) for e in events) == [("clicks", 1), ("views", 1)]
    assert [s.store_losses for s in stats] == [1, 1]
