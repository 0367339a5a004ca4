"""SQL plumbing shared by every package's stores: the ``--db`` rule, one engine builder, one
UTC timestamp column type, URLs with their password masked for messages, and the in-place
migration that creates tables and adds a newer version's columns to tables users already have.

Written once here, in the lowest package that needs it, and re-exported by
:mod:`eventbus.backends.sql`; ``scheduler`` and ``domain`` use it from there.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

__all__ = [
    "UTCDateTime",
    "add_missing_columns",
    "check_async_engine",
    "database_url",
    "make_engine",
    "migrate_tables",
    "missing_columns",
    "redact_url",
]

logger = logging.getLogger("eventbus.sql")

#: What a message suggests when a URL cannot be used.
_EXAMPLES = "use e.g. 'sqlite+aiosqlite:///app.db', 'postgresql+asyncpg://user@host/db' or a path"

_PASSWORD = re.compile(r"(?<=://)([^:/@?#]*):[^@/?#]*@")


def redact_url(url: str | sa.URL) -> str:
    """*url* with its password shown as ``***``, for messages and reprs.

    A string that does not parse as a URL is masked by pattern (``scheme://user:***@host``).
    """
    if isinstance(url, sa.URL):
        return url.render_as_string(hide_password=True)
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except (sa_exc.ArgumentError, ValueError, TypeError):
        return _PASSWORD.sub(r"\1:***@", url)


def check_async_engine(value: object, owner: str, *, url_ok: bool = False) -> None:
    """Refuse what is not an ``AsyncEngine`` (nor, with *url_ok*, a URL or a path) at once,
    rather than as an internal error at first use (a sync ``create_engine()``'s, say).

    :raises TypeError: one line naming *owner*, what it needs and what it was given
    """
    if isinstance(value, AsyncEngine):
        return
    if url_ok and (value is None or isinstance(value, str | os.PathLike | sa.URL)):
        return
    needs = "an AsyncEngine or a database URL" if url_ok else "an AsyncEngine"
    given = f"{type(value).__module__}.{type(value).__qualname__}"
    hint = ""
    if isinstance(value, sa.Engine):
        given = "a sync Engine (sqlalchemy.create_engine)"
        hint = "; build it with sqlalchemy.ext.asyncio.create_async_engine(...)"
    raise TypeError(f"{owner} needs {needs}, got {given}{hint}")


def database_url(value: str | os.PathLike[str] | sa.URL, *, must_exist: bool = False) -> sa.URL:
    """Read a database given as a URL or as a path, the one rule of every ``--db`` option.

    A value containing ``://`` is a SQLAlchemy URL (``postgresql+asyncpg://user@host/db``,
    ``sqlite+aiosqlite:///app.db``); anything else is the path of a SQLite file, opened through
    aiosqlite (``app.db``, ``/var/lib/app/app.db``, ``~/app.db``).

    :param must_exist: refuse a SQLite file that is not there (connecting would create an
        empty one): for commands that read an existing database
    :raises ValueError: for an empty value, a URL that does not parse, or a ``postgres://``
        one (the message masks the password, and says what to write)
    :raises FileNotFoundError: with *must_exist*, when the SQLite file does not exist
    """
    if isinstance(value, sa.URL):
        url = value
    elif "://" not in (text := os.fspath(value)):
        if not text.strip():
            raise ValueError("an empty database path; give a SQLite file path or a URL")
        url = sa.URL.create("sqlite+aiosqlite", database=os.path.expanduser(text))
    else:
        try:
            url = sa.make_url(text)
        except (sa_exc.ArgumentError, ValueError) as exc:
            raise ValueError(
                f"{redact_url(text)!r} is not a database URL ({exc}); {_EXAMPLES}"
            ) from None
    if url.drivername.partition("+")[0] == "postgres":  # Heroku-style DATABASE_URL
        raise ValueError(
            f"{redact_url(url)!r}: SQLAlchemy has no 'postgres://' scheme; use "
            "'postgresql+asyncpg://' with the rest of the URL unchanged"
        )
    if must_exist and (path := sqlite_file(url)) is not None and not path.is_file():
        raise FileNotFoundError(
            f"no database file at {str(path)!r} (from {redact_url(url)!r}); nothing was created"
        )
    return url


def sqlite_file(url: sa.URL) -> Path | None:
    """The file behind a SQLite *url*; ``None`` for another database or an in-memory one."""
    if url.get_backend_name() != "sqlite":
        return None
    name = url.database or ""
    if name in ("", ":memory:") or name.startswith("file:") or url.query.get("mode") == "memory":
        return None
    return Path(name)


def make_engine(
    url: str | os.PathLike[str] | sa.URL, *, busy_timeout: float = 30.0, **options: Any
) -> AsyncEngine:
    """The async engine every store builds from a URL or path (see :func:`database_url`).

    SQLite: ``journal_mode=WAL`` (readers never block the writer) and ``synchronous=NORMAL``
    on each connection, and a writer waits up to *busy_timeout* seconds for another
    connection's lock before "database is locked" (a ``timeout`` in the URL's query wins).
    Other databases: ``pool_pre_ping``, so that a pooled connection the server closed is
    replaced instead of failing the next statement. *options* go to ``create_async_engine``.

    :raises ValueError: when the URL names no async driver, a driver that is not installed,
        or no known database (the message masks the password)
    """
    url = database_url(url)
    shown = redact_url(url)
    try:
        if url.get_backend_name() != "sqlite":
            return create_async_engine(url, **{"pool_pre_ping": True, **options})
        connect_args = dict(options.pop("connect_args", {}))
        if "timeout" not in url.query:
            connect_args.setdefault("timeout", busy_timeout)
        engine = create_async_engine(url, connect_args=connect_args, **options)
    except sa_exc.InvalidRequestError as exc:  # a sync driver
        raise ValueError(f"{shown!r} does not name an async driver ({exc}); {_EXAMPLES}") from None
    except ImportError as exc:
        raise ValueError(
            f"{shown!r} needs the driver module {exc.name!r}, which is not installed; install "
            "it, or use 'sqlite+aiosqlite://' or 'postgresql+asyncpg://'"
        ) from None
    except (sa_exc.ArgumentError, sa_exc.NoSuchModuleError, TypeError) as exc:
        raise ValueError(f"{shown!r} is not a usable database URL: {exc}") from None
    sa.event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    return engine


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    try:
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
    finally:
        cur.close()


class UTCDateTime(sa.TypeDecorator[datetime]):
    """An aware timestamp, stored in UTC on every database and read back aware in UTC.

    SQLite keeps it as naive UTC text (so that it compares correctly in SQL); PostgreSQL as
    ``timestamp with time zone``, or as ``timestamp`` (naive UTC) with ``timezone=False``.

    :raises ValueError: when given a naive datetime (its time zone would be a guess)
    """

    impl = sa.DateTime
    cache_ok = True

    def __init__(self, timezone: bool = True) -> None:
        super().__init__(timezone=timezone)
        self.timezone = timezone  # part of the statement cache key

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}; pass an aware one (tzinfo=UTC)")
        value = value if value.tzinfo is UTC else value.astimezone(UTC)
        return value if self.timezone and dialect.name != "sqlite" else value.replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def missing_columns(conn: sa.Connection, table: sa.Table) -> set[str]:
    """Columns of *table*'s definition that the database's table lacks (none if it is missing:
    reading it then fails with the database's own error). For ``conn.run_sync``."""
    inspector = sa.inspect(conn)
    if not inspector.has_table(table.name, schema=table.schema):
        return set()
    present = {c["name"] for c in inspector.get_columns(table.name, schema=table.schema)}
    return {c.name for c in table.columns if c.name not in present}


def add_missing_columns(conn: sa.Connection, table: sa.Table) -> list[str]:
    """Create *table* if it does not exist; else add the columns and indexes it lacks.

    Changes are additive only: each added column must be nullable (``NULL`` reads as "not
    known" in rows written before), so a replica of the older version keeps working beside
    one of the newer. Each column added is logged at WARNING. Only what is missing is created:
    on PostgreSQL even ``CREATE INDEX IF NOT EXISTS`` of an index that exists waits for every
    open transaction that wrote to the table (and holds up the writers queued behind it).
    Replicas may race: indexes are created ``IF NOT EXISTS``, and so are columns on
    PostgreSQL; on SQLite a lost race fails with "duplicate column", and trying again finds
    nothing to add (:func:`migrate_tables` does). For ``conn.run_sync``.

    :return: the names of the columns added
    :raises ValueError: naming the column, for a missing column that is not nullable
    """
    table.create(conn, checkfirst=True)
    quote = conn.dialect.identifier_preparer.quote
    added = []
    for name in sorted(missing_columns(conn, table)):
        column = table.c[name]
        if not column.nullable:
            raise ValueError(
                f"{table.name}.{name} is missing and not nullable, so it cannot be added in "
                "place; migrate the table by hand"
            )
        kind = column.type.compile(dialect=conn.dialect)
        exists = " IF NOT EXISTS" if conn.dialect.name == "postgresql" else ""
        conn.execute(
            sa.text(f"ALTER TABLE {quote(table.name)} ADD COLUMN{exists} {quote(name)} {kind}")
        )
        logger.warning("added column %s.%s to the existing table", table.name, name)
        added.append(name)
    inspector = sa.inspect(conn)
    inspector.clear_cache()  # it read the table before the columns were added
    present = {i["name"] for i in inspector.get_indexes(table.name, schema=table.schema)}
    for index in table.indexes:
        if not isinstance(index.name, str) or index.name not in present:
            conn.execute(sa.schema.CreateIndex(index, if_not_exists=True))
    return added


def _lacks_any(conn: sa.Connection, tables: Sequence[sa.Table]) -> bool:
    """Whether any of *tables*, or a column or named index of one, is missing."""
    inspector = sa.inspect(conn)
    for table in tables:
        if not inspector.has_table(table.name, schema=table.schema):
            return True
        if missing_columns(conn, table):
            return True
        present = {i["name"] for i in inspector.get_indexes(table.name, schema=table.schema)}
        if any(not isinstance(i.name, str) or i.name not in present for i in table.indexes):
            return True
    return False


#: How many times :func:`migrate_tables` tries before the database's error is raised.
MIGRATE_ATTEMPTS = 5


async def migrate_tables(
    engine: AsyncEngine, tables: Iterable[sa.Table], *, attempts: int = MIGRATE_ATTEMPTS
) -> list[str]:
    """Create each of *tables* that does not exist, and add to existing ones the columns and
    indexes they lack (:func:`add_missing_columns`), in one transaction (on SQLite, one that
    holds the write lock, taken only when something is missing).

    Processes starting together on one database (replicas of a new version, on a new database
    or on the older version's tables) race to create the same tables, columns and indexes:
    the loser's statement fails ("already exists", "duplicate column", a duplicate catalog row
    on PostgreSQL, a locked SQLite file), and its next attempt, after a short pause, finds
    them there.

    :param tables: in creation order (``metadata.sorted_tables``: a table before those whose
        foreign keys point at it)
    :param attempts: tries before the database's error is raised
    :return: the columns this call found missing and added, as ``table.column`` (on
        PostgreSQL, replicas racing may each report the same ones: ``IF NOT EXISTS``)
    :raises ValueError: naming the column, for a missing column that is not nullable (or for
        *attempts* below 1)
    :raises sqlalchemy.exc.DBAPIError: the database's error, if the last attempt fails too
    """
    if attempts < 1:
        raise ValueError(f"attempts={attempts!r} must be >= 1")
    tables = tuple(tables)
    attempt = 1
    while True:
        try:
            added: list[str] = []
            async with engine.begin() as conn:
                if conn.dialect.name == "sqlite":
                    # pysqlite opens no transaction for DDL: each statement would commit
                    # alone, and a replica losing a race halfway would not report what it
                    # added. Take the write lock first (replicas migrate in turn), but only
                    # when something is missing: a start never waits for the writers.
                    if not await conn.run_sync(_lacks_any, tables):
                        return []
                    await conn.exec_driver_sql("BEGIN IMMEDIATE")
                for table in tables:
                    names = await conn.run_sync(add_missing_columns, table)
                    added += [f"{table.name}.{name}" for name in names]
            return added
        except sa_exc.DBAPIError:
            if attempt >= attempts:
                raise
            await anyio.sleep(0.05 * attempt)
            attempt += 1
