"""The one in-place migration every package's tables go through (``migrate_tables``): tables
created, a newer version's nullable columns and indexes added to the older version's table,
replicas racing to do it, and nothing locked when nothing is missing (SQLite and PostgreSQL).

The stores' own tests cover their tables: ``tests/eventbus/test_failure_chain.py``,
``tests/scheduler/backends/test_sql_migration.py``, ``tests/durable/test_outbox.py``.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus.backends.sql import add_missing_columns, make_engine, migrate_tables

OLD = sa.MetaData()
sa.Table(
    "notes",
    OLD,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("text", sa.Text, nullable=False),
    sa.Index("ix_notes_text", "text"),
)

NEW = sa.MetaData()
notes = sa.Table(
    "notes",
    NEW,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("author", sa.String(64), nullable=True),  # added by the newer version
    sa.Column("pinned", sa.Boolean, nullable=True),
    sa.Index("ix_notes_text", "text"),
    sa.Index("ix_notes_author", "author"),
)
tags = sa.Table(  # a table the newer version added
    "tags",
    NEW,
    sa.Column("note_id", sa.Integer, sa.ForeignKey("notes.id"), primary_key=True),
    sa.Column("tag", sa.String(32), primary_key=True),
)


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'notes.db'}"
    postgres_url: str = request.getfixturevalue("postgres_url")
    return postgres_url


@pytest.fixture
async def old_engine(url: str) -> AsyncIterator[AsyncEngine]:
    """The older version's table, with one row."""
    engine = make_engine(url)
    async with engine.begin() as conn:
        await conn.run_sync(OLD.create_all)
        await conn.execute(OLD.tables["notes"].insert().values(id=1, text="old"))
    yield engine
    await engine.dispose()


async def schema(engine: AsyncEngine) -> dict[str, set[str]]:
    """Each table's columns and index names, as the database has them."""

    def read(conn: sa.Connection) -> dict[str, set[str]]:
        inspector = sa.inspect(conn)
        return {
            name: {c["name"] for c in inspector.get_columns(name)}
            | {str(i["name"]) for i in inspector.get_indexes(name)}
            for name in inspector.get_table_names()
        }

    async with engine.connect() as conn:
        return await conn.run_sync(read)


async def test_the_older_table_gets_the_new_columns_indexes_and_tables_and_keeps_its_rows(
    old_engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    with anyio.fail_after(10), caplog.at_level(logging.WARNING, logger="eventbus.sql"):
        added = await migrate_tables(old_engine, NEW.sorted_tables)
        assert await migrate_tables(old_engine, NEW.sorted_tables) == []  # nothing left to add
    assert added == ["notes.author", "notes.pinned"]
    assert [r.getMessage() for r in caplog.records] == [
        "added column notes.author to the existing table",
        "added column notes.pinned to the existing table",
    ]
    found = await schema(old_engine)
    assert {"author", "pinned", "ix_notes_author"} <= found["notes"]
    assert {"note_id", "tag"} <= found["tags"]
    async with old_engine.connect() as conn:
        rows = (await conn.execute(sa.select(notes))).all()
    assert [tuple(r) for r in rows] == [(1, "old", None, None)]


async def test_replicas_migrating_at_once_all_succeed(old_engine: AsyncEngine, url: str) -> None:
    """The losers of each race (a duplicate column on SQLite, a duplicate catalog row on
    PostgreSQL, a locked file) try again and find nothing left to add."""
    engines = [make_engine(url) for _ in range(4)]
    results: list[list[str]] = []

    async def start(engine: AsyncEngine) -> None:
        results.append(await migrate_tables(engine, NEW.sorted_tables))

    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for engine in engines:
                    tg.start_soon(start, engine)
    finally:
        for engine in engines:
            await engine.dispose()
    # each reports what it found missing: on PostgreSQL several may (ADD COLUMN IF NOT EXISTS)
    assert len(results) == 4 and ["notes.author", "notes.pinned"] in results
    assert all(added in ([], ["notes.author", "notes.pinned"]) for added in results)
    assert {"author", "pinned", "ix_notes_author"} <= (await schema(old_engine))["notes"]


async def test_a_sqlite_migration_holds_the_write_lock_and_reports_all_it_added(
    tmp_path: Path,
) -> None:
    """Regression test: pysqlite ran each ALTER in a transaction of its own, so another
    replica could add a column while we added ours; ours then failed on the duplicate, and
    its next attempt reported nothing, though it had added the first (the race test above
    failed 5 times in 32 under load, no replica reporting 'notes.author')."""
    path = tmp_path / "notes.db"
    old = make_engine(f"sqlite+aiosqlite:///{path}")
    async with old.begin() as conn:
        await conn.run_sync(OLD.create_all)
    await old.dispose()
    engine = make_engine(f"sqlite+aiosqlite:///{path}")
    interloper: list[str] = []

    def between_our_alters(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if "ADD COLUMN" in statement and not interloper:  # before our first ALTER
            other = sqlite3.connect(path, timeout=0)  # another replica, not waiting
            try:
                other.execute("ALTER TABLE notes ADD COLUMN pinned BOOLEAN")
                interloper.append("added pinned")
            except sqlite3.OperationalError as exc:
                interloper.append(str(exc))
            finally:
                other.close()

    sa.event.listen(engine.sync_engine, "before_cursor_execute", between_our_alters)
    try:
        assert await migrate_tables(engine, NEW.sorted_tables) == ["notes.author", "notes.pinned"]
    finally:
        await engine.dispose()
    assert interloper == ["database is locked"]


async def test_replicas_starting_together_on_a_new_database_all_get_the_tables(
    url: str,
) -> None:
    engines = [make_engine(url) for _ in range(3)]
    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for engine in engines:
                    tg.start_soon(migrate_tables, engine, NEW.sorted_tables)
        assert {"notes", "tags"} <= set(await schema(engines[0]))
    finally:
        for engine in engines:
            await engine.dispose()


async def test_nothing_missing_waits_for_no_writer(old_engine: AsyncEngine, url: str) -> None:
    """Regression test: every index was created ``IF NOT EXISTS`` at each start, which on
    PostgreSQL waits for every open transaction that wrote to the table (a process starting
    while a long transaction published to the outbox stalled, and every publisher queued
    behind it)."""
    await migrate_tables(old_engine, NEW.sorted_tables)
    if url.startswith("sqlite"):
        starting = make_engine(url, busy_timeout=0.5)
    else:
        starting = make_engine(url, connect_args={"server_settings": {"lock_timeout": "500ms"}})
    try:
        async with old_engine.connect() as writer:
            await writer.begin()
            await writer.execute(notes.insert().values(id=2, text="in flight"))
            with anyio.fail_after(10):
                assert await migrate_tables(starting, NEW.sorted_tables, attempts=1) == []
            await writer.rollback()
    finally:
        await starting.dispose()


async def test_a_missing_column_that_is_not_nullable_is_refused_by_name(
    old_engine: AsyncEngine,
) -> None:
    meta = sa.MetaData()
    table = sa.Table(
        "notes", meta, sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("must_have", sa.Integer, nullable=False),
    )  # fmt: skip
    with anyio.fail_after(10):
        async with old_engine.begin() as conn:
            with pytest.raises(ValueError, match=r"^notes\.must_have is missing"):
                await conn.run_sync(add_missing_columns, table)
        with pytest.raises(ValueError, match=r"^notes\.must_have is missing"):
            await migrate_tables(old_engine, [table])


async def test_attempts_below_one_are_refused(old_engine: AsyncEngine) -> None:
    with pytest.raises(ValueError, match=r"^attempts=0 must be >= 1$"):
        await migrate_tables(old_engine, NEW.sorted_tables, attempts=0)
