"""Tables users already have: the run and job tables of the first release get the columns
and indexes added since, in place, at first use (SQLite and PostgreSQL)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from scheduler import JobDefinition
from scheduler.backends.sql import SqlJobStore, SqlRunStore, make_engine

T0 = datetime(2024, 1, 1, tzinfo=UTC)

# The tables exactly as the first release created them.
OLD = sa.MetaData()
sa.Table(
    "scheduler_runs",
    OLD,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("id", sa.String(32), nullable=False, unique=True),
    sa.Column("task_name", sa.String(200), nullable=False),
    sa.Column("trigger", sa.String(16), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("scheduled_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("cursor", sa.Text, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("trace_id", sa.String(32), nullable=False),
    sa.Column("replica", sa.String(200), nullable=False),
    sa.Column("fence", sa.BigInteger, nullable=True),
    sa.Column("lock_lost", sa.Boolean, nullable=False, default=False),
    sa.Index("ix_scheduler_runs_task_seq", "task_name", "seq"),
    sa.Index("ix_scheduler_runs_status", "status"),
)
sa.Table(
    "scheduler_jobs",
    OLD,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("expr", sa.String(200), nullable=False),
    sa.Column("tz", sa.String(64), nullable=False, default="UTC"),
    sa.Column("enabled", sa.Boolean, nullable=False, default=True),
    sa.Column("payload", sa.Text, nullable=True),
)


@pytest.fixture(params=["sqlite", "postgres"])
async def old_engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    """An engine on a database holding the first release's tables, one row in each."""
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'app.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    engine = make_engine(url)
    started = T0.replace(tzinfo=None) if request.param == "sqlite" else T0
    async with engine.begin() as conn:
        await conn.run_sync(OLD.create_all)
        await conn.execute(
            OLD.tables["scheduler_runs"]
            .insert()
            .values(
                id="old1",
                task_name="report",
                trigger="cron",
                status="succeeded",
                scheduled_at=started,
                started_at=started,
                trace_id="t",
                replica="r",
                lock_lost=False,
            )
        )
        await conn.execute(
            OLD.tables["scheduler_jobs"]
            .insert()
            .values(name="reminder:1", expr="0 0 9 * * *", tz="UTC", enabled=True)
        )
    yield engine
    await engine.dispose()


async def columns(engine: AsyncEngine, table: str) -> set[str]:
    async with engine.connect() as conn:
        found = await conn.run_sync(lambda c: sa.inspect(c).get_columns(table))
    return {c["name"] for c in found}


async def indexes(engine: AsyncEngine, table: str) -> set[str]:
    async with engine.connect() as conn:
        found = await conn.run_sync(lambda c: sa.inspect(c).get_indexes(table))
    return {str(i["name"]) for i in found}


async def test_the_run_table_gets_its_new_columns_and_keeps_its_rows(
    old_engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    assert "result" not in await columns(old_engine, "scheduler_runs")
    store = SqlRunStore(old_engine)
    with anyio.fail_after(10), caplog.at_level(logging.WARNING, logger="scheduler"):
        [old] = await store.query()
        assert await store.last_scheduled("report") == T0
    assert (old.id, old.status, old.result, old.result_repr) == ("old1", "succeeded", None, False)
    assert old.traceback is None
    assert {"result", "result_repr", "traceback"} <= await columns(old_engine, "scheduler_runs")
    assert "ix_scheduler_runs_task_scheduled" in await indexes(old_engine, "scheduler_runs")
    added = sorted(r.getMessage() for r in caplog.records)
    assert added == [  # the job table is the job store's to migrate (review minor c)
        "added column scheduler_runs.result to the existing table",
        "added column scheduler_runs.result_repr to the existing table",
        "added column scheduler_runs.traceback to the existing table",
    ]
    # a second start finds nothing to add
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="scheduler"):
        await SqlRunStore(old_engine).query()
    assert caplog.records == []


async def test_the_job_table_gets_its_paused_column(old_engine: AsyncEngine) -> None:
    table = SqlJobStore(old_engine)
    with anyio.fail_after(10):
        [definition] = await table.load()
        assert definition == JobDefinition(name="reminder:1", expr="0 0 9 * * *")
        assert await table.is_paused("reminder:1") is False  # NULL reads as not paused
        assert await table.set_paused("reminder:1", True) is True
        assert await table.is_paused("reminder:1") is True
        assert await table.set_paused("ghost", True) is False
        assert await table.is_paused("ghost") is None


async def test_replicas_migrating_at_once_all_start(old_engine: AsyncEngine) -> None:
    """Several replicas of the new version start together on the old tables."""
    url = old_engine.url.render_as_string(hide_password=False)
    stores = [SqlRunStore.from_url(url) for _ in range(3)]
    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for store in stores:
                    tg.start_soon(store.query)
            assert [r.id for r in await stores[0].query()] == ["old1"]
    finally:
        for store in stores:
            await store.aclose()


async def test_a_reader_that_creates_nothing_reads_the_old_tables_as_they_are(
    old_engine: AsyncEngine,
) -> None:
    """``python -m scheduler runs`` and ``jobs`` (``create=False``) on the tables of the first
    release, before any scheduler of the new version started: read, never altered."""
    with anyio.fail_after(10):
        [old] = await SqlRunStore(old_engine, create=False).query()
        assert await SqlRunStore(old_engine, create=False).get("old1") == old
        [definition] = await SqlJobStore(old_engine, create=False).load()
    assert (old.id, old.result, old.result_repr) == ("old1", None, False)
    assert definition.paused is False
    assert "result" not in await columns(old_engine, "scheduler_runs")
    assert "paused" not in await columns(old_engine, "scheduler_jobs")
