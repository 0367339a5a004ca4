"""Scheduled publishing: lead time, rescheduling, due batches, and racing publishers."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from pathlib import Path

import anyio
import pytest
from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from domain.db import articles, schedule_records
from domain.events import ArticlePublished, catalog
from domain.exceptions import ArticleNotFoundError, ScheduleTimeError
from domain.publishing import Publisher
from eventbus import EventBus
from tests.domain.conftest import T0, Clock
from tests.domain.pause import Pause


@pytest.fixture
async def seeded(engine: AsyncEngine) -> AsyncEngine:
    async with engine.begin() as conn:
        await conn.execute(insert(articles), [{"id": i, "title": f"a{i}"} for i in range(1, 41)])
    return engine


@pytest.mark.parametrize(
    "delta",
    [
        pytest.param(timedelta(seconds=-1), id="past"),
        pytest.param(timedelta(0), id="now"),
        pytest.param(timedelta(seconds=4), id="under-min-lead"),
    ],
)
async def test_too_soon_is_a_clear_error(seeded: AsyncEngine, delta: timedelta) -> None:
    pub = Publisher(seeded, min_lead=timedelta(seconds=5), clock=Clock())
    with pytest.raises(ScheduleTimeError, match="schedule at least 0:00:05 ahead"):
        await pub.schedule_publish(1, T0 + delta)
    assert await pub.pending() == []


async def test_unknown_article_and_naive_time_are_refused(seeded: AsyncEngine) -> None:
    pub = Publisher(seeded, clock=Clock())
    with pytest.raises(ArticleNotFoundError, match="no article with id 999"):
        await pub.schedule_publish(999, T0 + timedelta(hours=1))
    with pytest.raises(ValueError, match="naive"):
        await pub.schedule_publish(1, datetime(2030, 1, 1))


async def test_rescheduling_updates_the_pending_row(seeded: AsyncEngine) -> None:
    clock = Clock()
    pub = Publisher(seeded, clock=clock)
    first = await pub.schedule_publish(1, T0 + timedelta(hours=1))
    clock.now += timedelta(minutes=1)
    again = await pub.schedule_publish(1, T0 + timedelta(hours=2))
    assert first == again
    assert await pub.pending() == [(1, T0 + timedelta(hours=2))]
    async with seeded.connect() as conn:
        row = (await conn.execute(select(schedule_records))).one()
    assert (row.status, row.created_at, row.updated_at) == ("pending", T0, clock.now)


async def test_publishes_only_what_is_due_and_emits_after_commit(seeded: AsyncEngine) -> None:
    clock = Clock()
    bus = EventBus(registry=catalog)
    got: list[ArticlePublished] = []
    bus.on(ArticlePublished, got.append)
    pub = Publisher(seeded, bus=bus, clock=clock, batch=2)
    for i in range(1, 6):
        await pub.schedule_publish(i, T0 + timedelta(seconds=10 * i))
    await pub.schedule_publish(6, T0 + timedelta(hours=1))
    assert await pub.cancel(6)
    clock.now = T0 + timedelta(seconds=30)
    assert await pub.publish_due() == [1, 2, 3]  # two batches of 2 (the second is short)
    assert [e.article_id for e in got] == [1, 2, 3]
    clock.now = T0 + timedelta(hours=2)
    assert await pub.publish_due() == [4, 5]  # 6 was cancelled
    assert await pub.publish_due() == []
    async with seeded.connect() as conn:
        rows = dict((await conn.execute(select(articles.c.id, articles.c.status))).all())
    assert [i for i, s in rows.items() if s == "published"] == [1, 2, 3, 4, 5]


async def test_two_publishers_racing_publish_each_article_once(
    seeded: AsyncEngine, tmp_path: Path
) -> None:
    clock = Clock()
    setup = Publisher(seeded, clock=clock)
    for i in range(1, 41):
        await setup.schedule_publish(i, T0 + timedelta(seconds=5))
    clock.now = T0 + timedelta(minutes=1)
    # a second engine on the same file plays the second replica
    other = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/domain.db")
    events: list[int] = []
    bus = EventBus(registry=catalog)
    bus.on(ArticlePublished, lambda e: events.append(e.article_id))
    replicas = [
        Publisher(eng, bus=bus, clock=clock, batch=3) for eng in (seeded, other, seeded, other)
    ]
    results: list[list[int]] = []

    async def run(p: Publisher) -> None:
        results.append(await p.publish_due())

    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for p in replicas:
                    tg.start_soon(run, p)
    finally:
        await other.dispose()
    everything = [i for r in results for i in r]
    assert sorted(everything) == list(range(1, 41))  # each article once, none missed
    assert sorted(events) == list(range(1, 41))
    # Which replica took which rows depends on scheduling (one may take them all); the next
    # test forces an interleaving in which both publish.


async def test_a_replica_between_batches_leaves_the_rest_to_another_and_publishes_none_twice(
    seeded: AsyncEngine, tmp_path: Path
) -> None:
    """Replica A publishes 1-3 and is held before its second batch; replica B publishes 4-40
    meanwhile; A's next batch then finds nothing due. (SQLite takes one writer at a time, so
    the interleaving is forced between A's transactions, not inside one.)"""
    clock = Clock()
    setup = Publisher(seeded, clock=clock)
    for i in range(1, 41):
        await setup.schedule_publish(i, T0 + timedelta(seconds=5 + i))
    clock.now = T0 + timedelta(minutes=1)
    other = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/domain.db")
    events: list[int] = []
    bus = EventBus(registry=catalog)
    bus.on(ArticlePublished, lambda e: events.append(e.article_id))
    a, b = (Publisher(eng, bus=bus, clock=clock, batch=3) for eng in (seeded, other))
    begins = itertools.count(1)
    second_batch = Pause(seeded, "begin", lambda conn: next(begins) == 2)
    published: dict[str, list[int]] = {}

    async def run(name: str, publisher: Publisher) -> None:
        published[name] = await publisher.publish_due()

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run, "a", a)
                await second_batch.reached.wait()  # A committed 1-3 and begins its next batch
                await run("b", b)
                second_batch.release()
    finally:
        await other.dispose()
    assert published == {"a": [1, 2, 3], "b": list(range(4, 41))}
    assert sorted(events) == list(range(1, 41))
