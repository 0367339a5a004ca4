"""The domain's SQL tables, defined in one place, and the few dialect-specific statements.

Portable types only (text, integers, aware timestamps stored as UTC); SQLite (aiosqlite) is
the embedded default and PostgreSQL (asyncpg) the one for several replicas. Dialect-specific
constructs are picked by ``engine.dialect.name`` here, so the services stay portable.

Timestamps use the shared :class:`eventbus.backends.sql.UTCDateTime` with ``timezone=False``:
naive UTC on every database (``timestamp without time zone`` on PostgreSQL), the columns the
domain's tables have had from the start.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Column, Index, Integer, MetaData, String, Table, Text, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus.backends.sql import UTCDateTime

from ._public import shown_as_domain

__all__ = [
    "article_view_history",
    "articles",
    "create_tables",
    "flush_ledger",
    "insert_ignore",
    "metadata",
    "schedule_records",
    "short_links",
    "shortlink_pool",
    "upsert",
]


metadata = MetaData()

articles = Table(
    "articles",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("title", Text, nullable=False),
    Column("status", String(16), nullable=False, server_default="draft"),
    Column("view_count", BigInteger, nullable=False, server_default="0"),
    Column("published_at", UTCDateTime(timezone=False), nullable=True),
)

short_links = Table(
    "short_links",
    metadata,
    Column("code", String(64), primary_key=True),
    Column("url", Text, nullable=False),
    Column("is_alias", Integer, nullable=False, server_default="0"),
    Column("clicks", BigInteger, nullable=False, server_default="0"),
    Column("created_at", UTCDateTime(timezone=False), nullable=False),
    Column("expires_at", UTCDateTime(timezone=False), nullable=True),
)

# Every code in use has a row here (pool codes and aliases alike), so the unique index on
# ``code`` is the one arbiter of "taken", and a refill can never mint an alias already used.
shortlink_pool = Table(
    "shortlink_pool",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("code", String(64), nullable=False),
    Column("status", String(16), nullable=False),  # idle | claimed | alias
    Column("created_at", UTCDateTime(timezone=False), nullable=False),
    Column("claimed_at", UTCDateTime(timezone=False), nullable=True),
    Index("ux_shortlink_pool_code", "code", unique=True),
    Index("ix_shortlink_pool_status", "status"),
)

schedule_records = Table(
    "schedule_records",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("target_id", Integer, nullable=False),
    Column("type", String(32), nullable=False),
    Column("execution_time", UTCDateTime(timezone=False), nullable=False),
    Column("status", String(16), nullable=False),  # pending | done | cancelled
    Column("created_at", UTCDateTime(timezone=False), nullable=False),
    Column("updated_at", UTCDateTime(timezone=False), nullable=False),
    Index("ix_schedule_records_execution_time", "execution_time"),
    # At most one pending record per target and type: rescheduling updates it (upsert).
    Index(
        "ux_schedule_records_pending",
        "target_id",
        "type",
        unique=True,
        sqlite_where=text("status = 'pending'"),
        postgresql_where=text("status = 'pending'"),
    ),
)

# One row per counter flush applied to SQL, written in the same transaction as its deltas:
# the row's presence is the proof that a staged flush was applied (see domain.counters).
flush_ledger = Table(
    "flush_ledger",
    metadata,
    Column("flush_id", String(64), primary_key=True),
    Column("counter", String(64), nullable=False),
    Column("items", Integer, nullable=False),
    Column("total", BigInteger, nullable=False),
    Column("applied_at", UTCDateTime(timezone=False), nullable=False),
)

# Samples of ``articles.view_count`` taken after each views flush that changed it, for the
# console's "views over time" chart; a row only when the count moved.
article_view_history = Table(
    "article_view_history",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("article_id", Integer, nullable=False),
    Column("at", UTCDateTime(timezone=False), nullable=False),
    Column("view_count", BigInteger, nullable=False),
    Index("ix_article_view_history_article_at", "article_id", "at"),
)


async def create_tables(engine: AsyncEngine) -> None:
    """Create the domain tables that do not exist yet (idempotent)."""
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)


def insert_ignore(engine: AsyncEngine, table: Table) -> Any:
    """``INSERT OR IGNORE`` (SQLite) / ``ON CONFLICT DO NOTHING`` (PostgreSQL) into *table*."""
    name = engine.dialect.name
    if name == "sqlite":
        return sqlite.insert(table).on_conflict_do_nothing()
    if name == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing()
    raise NotImplementedError(f"insert-or-ignore is not written for dialect {name!r}")


def upsert(
    engine: AsyncEngine,
    table: Table,
    values: dict[str, Any],
    *,
    index_elements: list[str],
    index_where: Any,
    update: dict[str, Any],
) -> Any:
    """``INSERT ... ON CONFLICT (cols) WHERE ... DO UPDATE`` for SQLite and PostgreSQL."""
    name = engine.dialect.name
    if name == "sqlite":
        stmt: Any = sqlite.insert(table).values(values)
    elif name == "postgresql":
        stmt = postgresql.insert(table).values(values)
    else:
        raise NotImplementedError(f"upsert is not written for dialect {name!r}")
    return stmt.on_conflict_do_update(
        index_elements=index_elements, index_where=index_where, set_=update
    )


shown_as_domain(create_tables)
