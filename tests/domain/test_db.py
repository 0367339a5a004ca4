"""The domain's tables on SQLite and PostgreSQL: naive-UTC timestamp columns, aware values.

The timestamp columns use the shared ``eventbus.backends.sql.UTCDateTime(timezone=False)``:
``timestamp without time zone`` on PostgreSQL and ``DATETIME`` on SQLite, as the domain's
tables have had from the start, holding UTC; values go in and come out aware.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from domain.db import articles, create_tables, metadata
from eventbus.backends.sql import UTCDateTime, make_engine

TIMESTAMPS = sorted(
    (table.name, column.name)
    for table in metadata.sorted_tables
    for column in table.columns
    if isinstance(column.type, sa.DateTime | UTCDateTime)
)


@pytest.fixture(params=["sqlite", "postgresql"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    url = (
        str(tmp_path / "domain.db")
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    eng = make_engine(url)
    await create_tables(eng)
    yield eng
    await eng.dispose()


def test_every_timestamp_column_is_the_shared_type_without_time_zone() -> None:
    assert ("articles", "published_at") in TIMESTAMPS  # the scan finds them
    for table, column in TIMESTAMPS:
        kind = metadata.tables[table].c[column].type
        assert isinstance(kind, UTCDateTime) and kind.timezone is False, (table, column)


async def test_the_columns_the_database_has_are_naive_timestamps(engine: AsyncEngine) -> None:
    def reflect(conn: sa.Connection) -> dict[tuple[str, str], object]:
        inspector = sa.inspect(conn)
        return {
            (table, c["name"]): c["type"]
            for table in {t for t, _ in TIMESTAMPS}
            for c in inspector.get_columns(table)
        }

    with anyio.fail_after(10):
        async with engine.connect() as conn:
            types = await conn.run_sync(reflect)
    for key in TIMESTAMPS:
        kind = types[key]
        assert isinstance(kind, sa.DateTime), (key, kind)
        assert not kind.timezone, key  # PostgreSQL: timestamp WITHOUT time zone
    if engine.dialect.name == "postgresql":
        ddl = str(sa.schema.CreateTable(articles).compile(dialect=engine.dialect))
        assert "published_at TIMESTAMP WITHOUT TIME ZONE" in ddl


async def test_an_aware_value_is_stored_as_naive_utc_and_read_back_aware(
    engine: AsyncEngine,
) -> None:
    plus2 = timezone(timedelta(hours=2))
    at = datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=plus2)
    with anyio.fail_after(10):
        async with engine.begin() as conn:
            await conn.execute(sa.insert(articles).values(id=1, title="t", published_at=at))
        async with engine.connect() as conn:
            back = await conn.scalar(sa.select(articles.c.published_at))
            raw = await conn.scalar(sa.text("SELECT published_at FROM articles"))
            since = await conn.scalar(  # compared in SQL, as UTC
                sa.select(sa.func.count()).where(
                    articles.c.published_at > datetime(2026, 5, 1, 9, 59, tzinfo=UTC)
                )
            )
    assert back == at and back.tzinfo is UTC
    assert back == datetime(2026, 5, 1, 10, 0, 0, 123456, tzinfo=UTC)
    expected = "2026-05-01 10:00:00.123456"
    assert (raw if isinstance(raw, str) else raw.isoformat(" ")) == expected  # naive UTC
    assert since == 1


async def test_a_naive_value_is_refused(engine: AsyncEngine) -> None:
    with anyio.fail_after(10), pytest.raises(sa.exc.StatementError, match="naive datetime"):
        async with engine.begin() as conn:
            await conn.execute(
                sa.insert(articles).values(id=1, title="t", published_at=datetime(2026, 5, 1))
            )
