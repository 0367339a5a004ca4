"""The console's logouts kept in SQL, so that a logout ends the session on every process that
serves the console (``Console(revocations=SqlSessionRevocations(engine))``).

A session cookie is signed, not stored: what makes a copy of it useless after a logout is the
record of that logout, which every process must read. Replicas of an application share a
database already (the failure table, the run table); this keeps the record there, in
``console_revoked_sessions`` (a session id and until when it is kept), read once per console
request. A row is deleted once the cookie it names would have expired anyway.
"""

from __future__ import annotations

from ..extras import missing_extra

if _missing := missing_extra(__name__, "sql"):
    raise _missing

from datetime import UTC, datetime, timedelta

import anyio
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from ..backends.sql import UTCDateTime, migrate_tables

__all__ = ["SqlSessionRevocations", "metadata", "revoked_sessions_table"]

metadata = sa.MetaData()

revoked_sessions_table = sa.Table(
    "console_revoked_sessions",
    metadata,
    sa.Column("sid", sa.String(64), primary_key=True),
    sa.Column("until", UTCDateTime, nullable=False),
    sa.Index("ix_console_revoked_sessions_until", "until"),
)


class SqlSessionRevocations:
    """The sessions ended by a logout, in a table every replica reads (a
    :class:`~eventbus.console.SessionRevocations`). The table is created on first use.

    Ownership: the engine is the caller's; nothing here closes it.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._ready = False
        self._lock = anyio.Lock()

    def __repr__(self) -> str:
        return f"SqlSessionRevocations({self.engine.url.render_as_string(hide_password=True)!r})"

    async def revoke(self, sid: str, *, ttl: timedelta) -> None:
        await self._create()
        t = revoked_sessions_table
        now = datetime.now(UTC)
        async with self.engine.begin() as conn:
            await conn.execute(t.delete().where(t.c.until < now))  # cookies expired by now
            updated = await conn.execute(t.update().where(t.c.sid == sid).values(until=now + ttl))
            if updated.rowcount == 0:
                await conn.execute(t.insert().values(sid=sid, until=now + ttl))

    async def is_revoked(self, sid: str) -> bool:
        await self._create()
        t = revoked_sessions_table
        query = sa.select(t.c.sid).where(t.c.sid == sid).where(t.c.until > datetime.now(UTC))
        async with self.engine.connect() as conn:
            return (await conn.execute(query)).first() is not None

    async def _create(self) -> None:
        if self._ready:
            return
        async with self._lock:
            if not self._ready:
                await migrate_tables(self.engine, metadata.sorted_tables)
                self._ready = True
