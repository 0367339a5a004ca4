"""The run table, the job table and the paused jobs (portable types; the UTC column type is
eventbus's), and the in-place migration that adds the columns newer versions need to tables
users already have.

Changes to an existing table are additive only: a new column is nullable (``NULL`` reads as
its default), and :func:`create_tables` adds what is missing at start, so a replica of the
newer version can run beside one of the older.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus.backends.sql import UTCDateTime, migrate_tables

__all__ = ["create_tables", "jobs_table", "metadata", "paused_table", "runs_table"]

metadata = sa.MetaData()

runs_table = sa.Table(
    "scheduler_runs",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("id", sa.String(32), nullable=False, unique=True),
    sa.Column("task_name", sa.String(200), nullable=False),
    sa.Column("trigger", sa.String(16), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("scheduled_at", UTCDateTime, nullable=True),
    sa.Column("started_at", UTCDateTime, nullable=False),
    sa.Column("finished_at", UTCDateTime, nullable=True),
    sa.Column("expires_at", UTCDateTime, nullable=True),
    sa.Column("cursor", sa.Text, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("trace_id", sa.String(32), nullable=False),
    sa.Column("replica", sa.String(200), nullable=False),
    sa.Column("fence", sa.BigInteger, nullable=True),
    sa.Column("lock_lost", sa.Boolean, nullable=False, default=False),
    # added after the first release: nullable, and added in place by create_tables()
    sa.Column("result", sa.Text, nullable=True),
    sa.Column("result_repr", sa.Boolean, nullable=True),
    sa.Column("traceback", sa.Text, nullable=True),
    sa.Index("ix_scheduler_runs_task_seq", "task_name", "seq"),
    sa.Index("ix_scheduler_runs_status", "status"),
    sa.Index("ix_scheduler_runs_task_scheduled", "task_name", "scheduled_at"),
)

jobs_table = sa.Table(
    "scheduler_jobs",
    metadata,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("expr", sa.String(200), nullable=False),
    sa.Column("tz", sa.String(64), nullable=False, default="UTC"),
    sa.Column("enabled", sa.Boolean, nullable=False, default=True),
    sa.Column("payload", sa.Text, nullable=True),
    # added after the first release: nullable (NULL: not paused), added in place
    sa.Column("paused", sa.Boolean, nullable=True),
)


paused_table = sa.Table(
    "scheduler_paused",
    metadata,
    # the jobs paused with Scheduler.pause() that are not in scheduler_jobs (written in code):
    # a row while paused, so every replica sharing the database skips their fires
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("paused_at", UTCDateTime, nullable=False),
)


async def create_tables(engine: AsyncEngine, *, tables: Sequence[sa.Table] | None = None) -> None:
    """Create the scheduler's tables (or only ``tables``) if they do not exist, and add to
    existing ones the columns and indexes they lack (each column logged at WARNING, once);
    replicas starting together retry (:func:`eventbus.backends.sql.migrate_tables`). Other
    tables are left as they are: a store migrates only its own."""
    await migrate_tables(engine, metadata.sorted_tables if tables is None else tables)
