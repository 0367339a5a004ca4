"""The inbox's SQL: one row per (consumer group, event) a listener taking ``tx`` processed.

The row is inserted first in the listener's transaction; if it is already there (a
redelivery after a lost acknowledgement, a reclaim, a republish) nothing is inserted and the
listener is not called. On PostgreSQL a concurrent second delivery waits on the first one's
row until that transaction ends, then finds it: the check cannot race, unlike a select
followed by an insert.
"""

from __future__ import annotations

import functools
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

__all__ = ["Inbox"]


class Inbox:
    """The statements of one inbox table."""

    def __init__(self, table: sa.Table) -> None:
        self.table = table

    def __repr__(self) -> str:
        return f"Inbox(table={self.table.name!r})"

    async def claim(
        self, conn: AsyncConnection, *, group: str, event_id: str, now: datetime
    ) -> bool:
        """Insert the row in *conn*'s transaction; ``False`` if it was already there."""
        values = {"group_name": group, "event_id": event_id, "processed_at": now}
        keys = ["group_name", "event_id"]
        dialect = conn.dialect.name
        stmt: sa.Executable
        if dialect == "postgresql":
            stmt = (
                postgresql.insert(self.table)
                .values(values)
                .on_conflict_do_nothing(index_elements=keys)
            )
        elif dialect == "sqlite":
            stmt = (
                sqlite.insert(self.table).values(values).on_conflict_do_nothing(index_elements=keys)
            )
        else:  # no portable insert-or-ignore: a duplicate raises, rolling the listener back
            stmt = sa.insert(self.table).values(values)
        result = await conn.execute(stmt)
        return bool(result.rowcount == 1)

    async def claim_many(
        self, conn: AsyncConnection, *, group: str, event_ids: list[str], now: datetime
    ) -> set[str]:
        """Insert the rows of several events in one statement in *conn*'s transaction;
        return the event ids inserted (the others were there already). PostgreSQL and
        SQLite only (``ON CONFLICT DO NOTHING ... RETURNING``).

        :raises NotImplementedError: on another database
        """
        dialect = conn.dialect.name
        if dialect == "postgresql":
            params = {"group_name": group, "event_ids": event_ids, "processed_at": now}
            result = await conn.execute(self._claim_unnest, params)
            return {row[0] for row in result}
        if dialect != "sqlite":
            raise NotImplementedError(dialect)
        values = [{"group_name": group, "event_id": e, "processed_at": now} for e in event_ids]
        stmt = sqlite.insert(self.table).values(values)
        stmt = stmt.on_conflict_do_nothing(index_elements=["group_name", "event_id"])
        result = await conn.execute(stmt.returning(self.table.c.event_id))
        return {row[0] for row in result}

    @functools.cached_property
    def _claim_unnest(self) -> sa.Executable:
        """PostgreSQL's many-row claim as one statement for any number of rows: the ids as one
        array parameter, so that its plan and SQLAlchemy's compiled form are made once (a
        ``VALUES`` list of N rows is a new statement for each N, and costs per row to build)."""
        c = self.table.c
        rows = sa.select(
            sa.bindparam("group_name", type_=c.group_name.type),
            sa.func.unnest(sa.bindparam("event_ids", type_=postgresql.ARRAY(c.event_id.type))),
            sa.bindparam("processed_at", type_=c.processed_at.type),
        )
        insert = postgresql.insert(self.table).from_select(
            ["group_name", "event_id", "processed_at"], rows
        )
        return insert.on_conflict_do_nothing(index_elements=["group_name", "event_id"]).returning(
            c.event_id
        )

    async def seen(self, engine: AsyncEngine, *, group: str, event_id: str) -> bool:
        c = self.table.c
        stmt = sa.select(sa.literal(1)).where(c.group_name == group, c.event_id == event_id)
        async with engine.connect() as conn:
            return (await conn.execute(stmt)).first() is not None

    async def purge(self, engine: AsyncEngine, *, before: datetime, batch: int) -> int:
        """Delete rows processed before *before*, *batch* rows per transaction."""
        c = self.table.c
        total = 0
        while True:
            pick = (
                sa.select(c.group_name, c.event_id)
                .where(c.processed_at < before)
                .limit(batch)
                .subquery()
            )
            stmt = sa.delete(self.table).where(
                sa.tuple_(c.group_name, c.event_id).in_(
                    sa.select(pick.c.group_name, pick.c.event_id)
                )
            )
            async with engine.begin() as conn:
                n = int((await conn.execute(stmt)).rowcount)
            total += n
            if n < batch:
                return total
