"""The outbox and inbox tables of durable events (SQLAlchemy Core, SQLite and PostgreSQL).

The outbox holds one row per durable event, written in the publisher's own transaction; the
relay claims unpublished rows, adds them to Redis, and marks them published. Rows are
selected by status (``published_at IS NULL``), never by a high-water mark: ids are handed out
before commit, so transactions commit out of id order. A partial index over unpublished rows
keeps the relay's scan small however many published rows are retained.

The inbox holds one row per (consumer group, event) that a listener taking ``tx`` processed,
inserted in the listener's own transaction: a redelivered event finds its row and is skipped.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from ..backends.sql import UTCDateTime, migrate_tables

__all__ = [
    "DEFAULT_INBOX",
    "DEFAULT_OUTBOX",
    "create_durable_tables",
    "inbox_table",
    "metadata",
    "outbox_table",
]

DEFAULT_OUTBOX = "eventbus_outbox"
DEFAULT_INBOX = "eventbus_inbox"

#: Holds the default tables; add your own copies to your metadata with the functions below.
metadata = sa.MetaData()

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")  # SQLite: a rowid alias


def outbox_table(name: str = DEFAULT_OUTBOX, meta: sa.MetaData | None = None) -> sa.Table:
    """Define the outbox table in *meta* (a new ``MetaData`` by default).

    ``id`` is the sequence the envelope carries as ``seq``; ``available_at`` is when the relay
    may publish the row (later than ``created_at`` for a scheduled event); ``lease_owner``
    holds the token of the relay claim that may publish the row until ``lease_until``;
    ``attempts`` counts claims.
    """
    published_at: sa.Column[datetime] = sa.Column("published_at", UTCDateTime(), nullable=True)
    return sa.Table(
        name,
        meta if meta is not None else sa.MetaData(),
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("event_id", sa.String(64), nullable=False, unique=True),
        sa.Column("name", sa.String(255), nullable=False),
        # the event type's version that wrote the payload (NULL: a row from before versions, 1)
        sa.Column("event_version", sa.Integer(), nullable=True),
        sa.Column("aggregate_key", sa.String(255), nullable=True),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("headers", sa.Text(), nullable=True),
        sa.Column("causation_id", sa.String(64), nullable=True),
        sa.Column("correlation_id", sa.String(64), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("available_at", UTCDateTime(), nullable=False),
        sa.Column("lease_owner", sa.String(128), nullable=True),
        sa.Column("lease_until", UTCDateTime(), nullable=True),
        published_at,
        sa.Column("stream_id", sa.String(64), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Index(
            f"ix_{name}_unpublished",
            "id",
            postgresql_where=published_at.is_(None),
            sqlite_where=published_at.is_(None),
        ),
        sa.Index(f"ix_{name}_published_at", "published_at"),
        sa.Index(  # the relay's "when is the next scheduled row due?"
            f"ix_{name}_due",
            "available_at",
            postgresql_where=published_at.is_(None),
            sqlite_where=published_at.is_(None),
        ),
    )


def inbox_table(name: str = DEFAULT_INBOX, meta: sa.MetaData | None = None) -> sa.Table:
    """Define the inbox table in *meta*: primary key ``(group_name, event_id)``."""
    return sa.Table(
        name,
        meta if meta is not None else sa.MetaData(),
        sa.Column("group_name", sa.String(255), primary_key=True),
        sa.Column("event_id", sa.String(64), primary_key=True),
        sa.Column("processed_at", UTCDateTime(), nullable=False),
        sa.Index(f"ix_{name}_processed_at", "processed_at"),
    )


#: The default tables, in :data:`metadata`.
outbox = outbox_table(DEFAULT_OUTBOX, metadata)
inbox = inbox_table(DEFAULT_INBOX, metadata)


async def create_durable_tables(
    engine: AsyncEngine, *, tables: tuple[sa.Table, ...] = (outbox, inbox)
) -> None:
    """Create the outbox and inbox tables (and their indexes) that do not exist yet, and add to
    existing ones the nullable columns and indexes a newer version added.

    The durable transport calls this at start unless told not to; call it from deployment
    code when the application's database user may not run DDL at runtime. Processes starting
    together on a new database race to create the tables: the loser's statement fails, and
    its next attempt finds them (:func:`~eventbus.backends.sql.migrate_tables`).
    """
    await migrate_tables(engine, tables)
