"""The SQL plumbing every package shares: the ``--db`` rule, the engine builder, the UTC column."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus.backends.sql import (
    UTCDateTime,
    database_url,
    failures_table,
    make_engine,
    redact_url,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("app.db", "sqlite+aiosqlite:///app.db", id="relative-path"),
        pytest.param("/var/lib/app.db", "sqlite+aiosqlite:////var/lib/app.db", id="absolute-path"),
        pytest.param(Path("data/app.db"), "sqlite+aiosqlite:///data/app.db", id="pathlike"),
        pytest.param(
            "postgresql+asyncpg://u@h:5/db", "postgresql+asyncpg://u@h:5/db", id="postgres-url"
        ),
        pytest.param("sqlite+aiosqlite://", "sqlite+aiosqlite://", id="memory-url"),
    ],
)
def test_a_value_with_a_scheme_is_a_url_anything_else_a_sqlite_path(
    value: str | Path, expected: str
) -> None:
    assert database_url(value).render_as_string(hide_password=False) == expected


def test_a_path_may_hold_characters_a_url_would_read_as_syntax(tmp_path: Path) -> None:
    odd = tmp_path / "what?#@:.db"
    url = database_url(str(odd))
    assert url.database == str(odd) and url.query == {}


def test_home_is_expanded_in_a_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert database_url("~/app.db").database == str(tmp_path / "app.db")


def test_a_url_that_does_not_parse_is_a_value_error_that_masks_the_password() -> None:
    with pytest.raises(ValueError, match="is not a database URL") as info:
        database_url("postgresql+asyncpg://app:s3cret@host:port/db")
    assert "s3cret" not in str(info.value) and "app:***@host" in str(info.value)
    with pytest.raises(ValueError, match="empty database path"):
        database_url("  ")


def test_must_exist_refuses_a_missing_sqlite_file_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    for value in (str(missing), f"sqlite+aiosqlite:///{missing}"):
        with pytest.raises(FileNotFoundError, match="no database file at") as info:
            database_url(value, must_exist=True)
        assert str(missing) in str(info.value)
    assert not missing.exists()
    sqlite3.connect(missing).close()
    assert database_url(missing, must_exist=True).database == str(missing)
    # nothing to check for a server database or an in-memory one
    database_url("postgresql+asyncpg://h/db", must_exist=True)
    database_url("sqlite+aiosqlite://", must_exist=True)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        pytest.param("postgresql+asyncpg://app:s3cret@h/db", "postgresql+asyncpg://app:***@h/db"),
        pytest.param("postgresql+asyncpg://app@h/db", "postgresql+asyncpg://app@h/db"),
        pytest.param(
            "postgresql+asyncpg://app:s3cret@h:port/db", "postgresql+asyncpg://app:***@h:port/db"
        ),
        pytest.param(sa.make_url("mysql+aiomysql://a:b@c/d"), "mysql+aiomysql://a:***@c/d"),
    ],
)
def test_redact_url_masks_the_password_even_of_a_url_that_does_not_parse(
    url: str | sa.URL, shown: str
) -> None:
    assert redact_url(url) == shown


@pytest.fixture
async def sqlite_engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = make_engine(tmp_path / "app.db", busy_timeout=1.5)
    yield engine
    await engine.dispose()


async def test_make_engine_sets_wal_normal_sync_and_the_busy_timeout(
    sqlite_engine: AsyncEngine,
) -> None:
    async with sqlite_engine.connect() as conn:
        mode = await conn.exec_driver_sql("PRAGMA journal_mode")
        sync = await conn.exec_driver_sql("PRAGMA synchronous")
        busy = await conn.exec_driver_sql("PRAGMA busy_timeout")
        assert (mode.scalar(), sync.scalar(), busy.scalar()) == ("wal", 1, 1500)


async def test_a_timeout_in_the_url_wins_over_the_default(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}?timeout=0.25")
    try:
        async with engine.connect() as conn:
            assert (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar() == 250
    finally:
        await engine.dispose()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        pytest.param("sqlite:///x.db", "does not name an async driver", id="sync-driver"),
        pytest.param(
            "mysql+aiomysql://u:s3cret@h/db",
            "needs the driver module 'aiomysql', which is not installed",
            id="missing-driver",
        ),
        pytest.param("nonsense://u:s3cret@h/db", "is not a usable database URL", id="unknown"),
    ],
)
def test_make_engine_refuses_unusable_urls_with_a_value_error(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        make_engine(url)
    assert "s3cret" not in str(info.value)


def test_make_engine_pings_pooled_connections_of_a_server_database() -> None:
    engine = make_engine("postgresql+asyncpg://u@127.0.0.1/db")
    assert engine.pool._pre_ping


def test_one_column_type_and_one_engine_builder_serve_the_failure_and_run_tables() -> None:
    from scheduler.backends import sql as scheduler_sql

    assert scheduler_sql.make_engine is make_engine
    for column in ("scheduled_at", "started_at", "finished_at", "expires_at"):
        assert type(scheduler_sql.runs_table.c[column].type) is UTCDateTime
    for column in ("first_failed_at", "last_failed_at", "resolved_at"):
        assert type(failures_table.c[column].type) is UTCDateTime


stamps = sa.Table(
    "stamps",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("aware", UTCDateTime()),
    sa.Column("naive", UTCDateTime(timezone=False)),
)


@pytest.fixture(params=["sqlite", "postgres"])
async def any_engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    url = (
        str(tmp_path / "stamps.db")
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    engine = make_engine(url)
    async with engine.begin() as conn:
        await conn.run_sync(stamps.metadata.create_all)
    yield engine
    await engine.dispose()


async def test_utc_datetime_round_trips_aware_utc_and_compares_in_sql(
    any_engine: AsyncEngine,
) -> None:
    plus2 = timezone(timedelta(hours=2))
    at = datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=plus2)
    async with any_engine.begin() as conn:
        await conn.execute(sa.insert(stamps), [{"id": 1, "aware": at, "naive": at}])
        row = (await conn.execute(sa.select(stamps.c.aware, stamps.c.naive))).one()
        later = await conn.scalar(
            sa.select(sa.func.count()).where(
                stamps.c.aware > datetime(2026, 5, 1, 9, 59, tzinfo=UTC)
            )
        )
    assert row.aware == row.naive == at
    assert row.aware.tzinfo is UTC and row.naive.tzinfo is UTC
    assert later == 1  # 10:00:00.123456 UTC, compared as an instant


async def test_utc_datetime_refuses_a_naive_value(sqlite_engine: AsyncEngine) -> None:
    async with sqlite_engine.begin() as conn:
        await conn.run_sync(stamps.metadata.create_all)
        with pytest.raises(sa.exc.StatementError, match="naive datetime"):
            await conn.execute(sa.insert(stamps), [{"id": 1, "aware": datetime(2026, 1, 1)}])


@pytest.mark.parametrize("url", ["postgres://app:s3cret@host/db", "postgres+asyncpg://h/db"])
def test_a_heroku_style_postgres_url_says_what_to_write_instead(url: str) -> None:
    """Regression test: ``postgres://`` (Heroku's ``DATABASE_URL``) got "Can't load plugin:
    sqlalchemy.dialects:postgres" and no hint."""
    for read in (database_url, make_engine):
        with pytest.raises(ValueError, match="use 'postgresql\\+asyncpg://'") as info:
            read(url)
        assert "s3cret" not in str(info.value) and "no 'postgres://' scheme" in str(info.value)
