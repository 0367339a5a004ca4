"""What the commands of ``python -m eventbus`` share: the failure table behind ``--db``, a
failure found by id prefix, and ``WHEN`` arguments. Errors the user can fix are
:class:`eventbus.cli.InputError` (one line, exit code 2).
"""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from .._failures import FailureRecord
from ..cli import InputError

if TYPE_CHECKING:  # the 'sql' extra, imported when a command uses the failure table
    from ..backends.sql import SqlFailureStore

__all__ = ["DB_HELP", "check_table", "find_failure", "open_store", "store_for", "when"]

DB_HELP = (
    "a database URL (postgresql+asyncpg://user@host/db) or the path of a SQLite file "
    "(default: $EVENTBUS_DB, else ./eventbus.db)"
)


_RELATIVE = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def when(text: str) -> datetime:
    """ISO 8601 (naive means UTC) or an age such as ``30m``, ``12h``, ``7d`` before now."""
    m = _RELATIVE.match(text)
    if m:
        return datetime.now(UTC) - timedelta(**{_UNITS[m[2]]: int(m[1])})
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither an ISO 8601 time nor an age like 30m, 12h, 7d"
        ) from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def store_for(db: str | None) -> SqlFailureStore:
    """A store on the existing database *db* names (see ``database_url``); creates nothing."""
    from ..backends.sql import SqlFailureStore, database_url, default_db_url

    try:  # the URL first (driver, dialect), then the file: connecting would create it
        store = SqlFailureStore(database_url(db or default_db_url()), create_table=False)
        database_url(store.engine.url, must_exist=True)
    except (ValueError, FileNotFoundError) as exc:
        raise InputError(f"--db {exc}") from None
    return store


async def open_store(db: str | None) -> SqlFailureStore:
    """A store on an existing database and table; never creates either."""
    store = store_for(db)
    try:
        await check_table(store)
    except BaseException:
        await store.aclose()
        raise
    return store


async def check_table(store: SqlFailureStore) -> None:
    """An existing SQLite file (connecting would create it) with the failure table in it."""
    import sqlalchemy as sa

    from ..backends.sql import database_url, redact_url

    try:
        database_url(store.engine.url, must_exist=True)
    except FileNotFoundError as exc:
        raise InputError(str(exc)) from None
    name = store.table.name
    async with store.engine.connect() as conn:
        present = await conn.run_sync(lambda c: sa.inspect(c).has_table(name))
    if not present:
        raise InputError(
            f"no table {name!r} in {redact_url(store.engine.url)!r}; the application creates "
            "it when it starts (or call eventbus.backends.sql.create_tables(engine))"
        )


async def find_failure(store: SqlFailureStore, key: str) -> FailureRecord:
    """The failure with id *key*, or the one whose id starts with it.

    :raises InputError: if none does, or several do
    """
    import sqlalchemy as sa

    rec = await store.get(key)
    if rec is not None:
        return rec
    pattern = key.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    stmt = sa.select(store.table.c.id).where(store.table.c.id.like(pattern, escape="\\")).limit(2)
    async with store.engine.connect() as conn:
        ids = list((await conn.execute(stmt)).scalars())
    if len(ids) > 1:
        raise InputError(f"id prefix {key!r} matches several failures; give more characters")
    rec = await store.get(ids[0]) if ids else None
    if rec is None:
        raise InputError(f"no failure with id {key!r}; 'failures list' shows the ids")
    return rec
