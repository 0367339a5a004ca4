"""The failure table's definition and row mapping.

Split from :mod:`eventbus.backends.sql` (which re-exports the public names): this module knows
the schema and how a :class:`~eventbus.FailureRecord` becomes a row and back; ``_sql_insert``
how batches of rows get in, ``_sql_writer`` the buffer and the writer task, the store in
``sql`` its API and the queries.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from .._failures import FailureRecord, FailureStatus
from ._sql_common import UTCDateTime, migrate_tables

__all__ = [
    "DEFAULT_TABLE",
    "create_tables",
    "failure_table",
    "failures_table",
    "metadata",
]

DEFAULT_TABLE = "eventbus_failures"

#: a durable delivery's link to its group and stream (``FailureRecord.durable_*``)
DURABLE_COLUMNS = (
    "durable_group",
    "durable_stream",
    "durable_entry",
    "durable_deliveries",
    "durable_seq",
)

metadata = sa.MetaData()


def failure_table(name: str = DEFAULT_TABLE, meta: sa.MetaData | None = None) -> sa.Table:
    """Define the failure table in *meta* with portable types and the CLI's indexes.

    ``seq`` orders rows by insertion (newest first, like the memory store); ``id`` is the
    record's own id. Timestamps are timezone-aware and always written in UTC.
    """
    return sa.Table(
        name,
        meta if meta is not None else sa.MetaData(),
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("id", sa.String(64), nullable=False, unique=True),
        sa.Column("event_id", sa.String(64), nullable=False),
        sa.Column("event_name", sa.String(255), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("payload_ok", sa.Boolean(), nullable=False),
        sa.Column("listener", sa.String(255), nullable=False),
        sa.Column("error_type", sa.String(255), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("traceback", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("first_failed_at", UTCDateTime(), nullable=False),
        sa.Column("last_failed_at", UTCDateTime(), nullable=False),
        sa.Column("resolved_at", UTCDateTime(), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        # added after the first release: nullable, added in place (add_missing_columns)
        sa.Column("causation_id", sa.String(64), nullable=True),
        sa.Column("correlation_id", sa.String(64), nullable=True),
        sa.Column("durable_group", sa.String(255), nullable=True),
        sa.Column("durable_stream", sa.String(512), nullable=True),
        sa.Column("durable_entry", sa.String(64), nullable=True),
        sa.Column("durable_deliveries", sa.Integer(), nullable=True),
        sa.Column("durable_seq", sa.BigInteger(), nullable=True),
        sa.Index(f"ix_{name}_status_seq", "status", "seq"),
        sa.Index(f"ix_{name}_correlation_seq", "correlation_id", "seq"),
        sa.Index(f"ix_{name}_event_seq", "event_name", "seq"),
        sa.Index(f"ix_{name}_listener_seq", "listener", "seq"),
        sa.Index(f"ix_{name}_last_failed_at", "last_failed_at"),
    )


#: The default table, ``eventbus_failures``, in :data:`metadata`.
failures_table = failure_table(DEFAULT_TABLE, metadata)


async def create_tables(engine: AsyncEngine) -> None:
    """Create the tables in :data:`metadata` that do not exist yet (``eventbus_failures``), and
    add to existing ones the columns and indexes a newer version added (in place).

    The store also does this lazily; call it from deployment code when the application's
    database user may not run DDL at runtime (then pass ``create_table=False``). Processes
    starting together retry (see :func:`~eventbus.backends.sql.migrate_tables`).
    """
    await migrate_tables(engine, metadata.sorted_tables)


def _utc(value: datetime) -> datetime:
    """Aware values in UTC; a naive value is taken to be UTC already."""
    if value.tzinfo is UTC:
        return value
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _row(rec: FailureRecord) -> dict[str, Any]:
    return {
        "id": rec.id,
        "event_id": rec.event_id,
        "event_name": rec.event_name,
        "payload": rec.payload,
        "payload_ok": rec.payload_ok,
        "listener": rec.listener,
        "error_type": rec.error_type,
        "message": rec.message,
        "traceback": rec.traceback,
        "attempts": rec.attempts,
        "status": FailureStatus(rec.status).value,
        "first_failed_at": _utc(rec.first_failed_at),
        "last_failed_at": _utc(rec.last_failed_at),
        "resolved_at": None if rec.resolved_at is None else _utc(rec.resolved_at),
        "note": rec.note,
        "causation_id": rec.causation_id,
        "correlation_id": rec.correlation_id,
        **{name: getattr(rec, name) for name in DURABLE_COLUMNS},
    }


def _record(row: Any) -> FailureRecord:
    resolved = row["resolved_at"]
    return FailureRecord(
        id=row["id"],
        event_id=row["event_id"],
        event_name=row["event_name"],
        payload=row["payload"],
        payload_ok=bool(row["payload_ok"]),
        listener=row["listener"],
        error_type=row["error_type"],
        message=row["message"],
        traceback=row["traceback"],
        attempts=row["attempts"],
        status=FailureStatus(row["status"]),
        first_failed_at=_utc(row["first_failed_at"]),
        last_failed_at=_utc(row["last_failed_at"]),
        resolved_at=None if resolved is None else _utc(resolved),
        note=row["note"],
        causation_id=row.get("causation_id"),
        correlation_id=row.get("correlation_id"),
        **{name: row.get(name) for name in DURABLE_COLUMNS},
    )
