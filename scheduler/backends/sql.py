"""The run table (with the paused jobs) and the job-definition table in SQL (SQLAlchemy 2
async).

SQLite through aiosqlite by default; PostgreSQL (asyncpg) for replicas. Types are portable:
text, integers, booleans, JSON as text, and timestamps stored as UTC (SQLite keeps them
naive, so they are read back as UTC).
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from typing import Any

from eventbus.extras import missing_extra
from eventbus.lazy import show_as_module

if _missing := missing_extra(__name__, "sql"):
    raise _missing

import anyio
import anyio.lowlevel
import sqlalchemy as sa
from anyio.abc import AsyncResource
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus.backends.sql import make_engine, missing_columns

from .._jobs import JobDefinition
from .._records import RunRecord, RunStatus, abandoned_error
from ._sql_schema import create_tables, jobs_table, metadata, paused_table, runs_table

__all__ = [
    "SqlJobStore",
    "SqlRunStore",
    "create_tables",
    "jobs_table",
    "make_engine",  # eventbus.backends.sql's, re-exported: the one engine builder
    "metadata",
    "paused_table",
    "runs_table",
]

# Defined in _sql_schema; this module is its public home.
show_as_module(__name__, create_tables, within="scheduler.backends")


def _row_to_record(row: sa.Row[Any]) -> RunRecord:
    m = row._mapping
    return RunRecord(
        id=m["id"],
        task_name=m["task_name"],
        trigger=m["trigger"],
        status=m["status"],
        scheduled_at=m["scheduled_at"],
        started_at=m["started_at"],
        finished_at=m["finished_at"],
        expires_at=m["expires_at"],
        cursor=None if m["cursor"] is None else json.loads(m["cursor"]),
        error=m["error"],
        trace_id=m["trace_id"],
        replica=m["replica"],
        fence=m["fence"],
        lock_lost=bool(m["lock_lost"]),
        result=None if m.get("result") is None else json.loads(m["result"]),
        result_repr=bool(m.get("result_repr")),
    )


def _values(record: RunRecord) -> dict[str, Any]:
    return {
        "task_name": record.task_name,
        "trigger": record.trigger,
        "status": record.status,
        "scheduled_at": record.scheduled_at,
        "started_at": record.started_at,
        "finished_at": record.finished_at,
        "expires_at": record.expires_at,
        "cursor": None if record.cursor is None else json.dumps(record.cursor),
        "error": record.error,
        "trace_id": record.trace_id,
        "replica": record.replica,
        "fence": record.fence,
        "lock_lost": record.lock_lost,
        "result": None if record.result is None else json.dumps(record.result),
        "result_repr": record.result_repr,
    }


class SqlRunStore(AsyncResource):
    """The run table in SQL, and the paused state of the jobs that are not in a job table
    (``scheduler_paused``); every call is one short transaction.

    Ownership: an engine passed in is never disposed by the store; one built by
    :meth:`from_url` is disposed by :meth:`aclose` (and on leaving ``async with``). Tables are
    created on first use unless ``create=False``.

    :param engine: an async engine
    :param create: create the tables (if missing) before the first statement
    """

    def __init__(self, engine: AsyncEngine, *, create: bool = True) -> None:
        self.engine = engine
        self._owns_engine = False
        self._tables = _Tables(engine, create=create, tables=(runs_table, paused_table))

    @classmethod
    def from_url(cls, url: str | os.PathLike[str] | sa.URL, *, create: bool = True) -> SqlRunStore:
        """A store on its own engine for ``url``, a URL or a SQLite path (see
        :func:`eventbus.backends.sql.make_engine`: WAL, a 30 s wait for a lock), closed by
        aclose."""
        store = cls(make_engine(url), create=create)
        store._owns_engine = True
        return store

    def __repr__(self) -> str:
        return f"SqlRunStore({self.engine.url.render_as_string(hide_password=True)!r})"

    async def _begin(self) -> Any:
        await self._tables.ready()
        return self.engine.begin()

    async def add(self, record: RunRecord) -> None:
        async with await self._begin() as conn:
            await conn.execute(runs_table.insert().values(id=record.id, **_values(record)))

    async def update(self, record: RunRecord) -> None:
        async with await self._begin() as conn:
            await conn.execute(
                runs_table.update().where(runs_table.c.id == record.id).values(**_values(record))
            )

    async def checkpoint(self, run_id: str, cursor: Any) -> None:
        async with await self._begin() as conn:
            await conn.execute(
                runs_table.update()
                .where(runs_table.c.id == run_id)
                .values(cursor=json.dumps(cursor))
            )

    async def touch(self, run_id: str, expires_at: datetime) -> None:
        async with await self._begin() as conn:
            await conn.execute(
                runs_table.update().where(runs_table.c.id == run_id).values(expires_at=expires_at)
            )

    async def resume_cursor(self, task_name: str) -> Any:
        t = runs_table
        query = (
            sa.select(t.c.status, t.c.cursor)
            .where(t.c.task_name == task_name)
            .where(t.c.status.in_(("succeeded", "failed", "abandoned")))
            .order_by(t.c.seq.desc())
            .limit(1)
        )
        async with await self._begin() as conn:
            row = (await conn.execute(query)).first()
        if row is None or row.status == "succeeded" or row.cursor is None:
            return None
        return json.loads(row.cursor)

    async def abandon_stale(self, task_name: str, now: datetime) -> int:
        t = runs_table
        stale = (
            sa.select(t.c.id, t.c.expires_at)
            .where(t.c.task_name == task_name)
            .where(t.c.status == "running")
            .where(t.c.expires_at < now)
        )
        count = 0
        async with await self._begin() as conn:
            for row in (await conn.execute(stale)).all():
                result = await conn.execute(
                    t.update()
                    .where(t.c.id == row.id)
                    .where(t.c.status == "running")  # a replica may have marked it meanwhile
                    .values(status="abandoned", error=abandoned_error(row.expires_at))
                )
                count += result.rowcount
        return count

    async def last_scheduled(self, task_name: str) -> datetime | None:
        t = runs_table
        query = sa.select(sa.func.max(t.c.scheduled_at)).where(t.c.task_name == task_name)
        async with await self._begin() as conn:
            value: datetime | None = (await conn.execute(query)).scalar()
        return value

    async def fire_started(self, task_name: str, scheduled_at: datetime) -> bool:
        t = runs_table
        query = (
            sa.select(t.c.id)
            .where(t.c.task_name == task_name)
            .where(t.c.scheduled_at == scheduled_at)
            .where(t.c.status != "skipped")
            .limit(1)
        )
        async with await self._begin() as conn:
            return (await conn.execute(query)).first() is not None

    async def get(self, run_id: str) -> RunRecord | None:
        async with await self._begin() as conn:
            row = (
                await conn.execute(self._tables.select(runs_table).where(runs_table.c.id == run_id))
            ).first()
        return None if row is None else _row_to_record(row)

    async def query(
        self,
        *,
        task_name: str | None = None,
        status: RunStatus | None = None,
        limit: int | None = 100,
    ) -> list[RunRecord]:
        t = runs_table
        await self._tables.ready()  # which columns there are
        q = self._tables.select(t).order_by(t.c.seq.desc())
        if task_name is not None:
            q = q.where(t.c.task_name == task_name)
        if status is not None:
            q = q.where(t.c.status == status)
        if limit is not None:
            q = q.limit(limit)
        async with await self._begin() as conn:
            rows = (await conn.execute(q)).all()
        return [_row_to_record(r) for r in rows]

    async def set_job_paused(self, task_name: str, paused: bool) -> None:
        """Keep job ``task_name`` paused (a row in ``scheduler_paused``), or resume it: every
        replica on this database reads it at each fire, and it outlives a restart."""
        t = paused_table
        try:
            async with await self._begin() as conn:
                await conn.execute(t.delete().where(t.c.name == task_name))
                if paused:
                    now = datetime.now(UTC)
                    await conn.execute(t.insert().values(name=task_name, paused_at=now))
        except sa.exc.IntegrityError:  # another replica paused it between our two statements
            if not paused:
                raise

    async def job_paused(self, task_name: str) -> bool:
        """Whether job ``task_name`` is paused (see :meth:`set_job_paused`)."""
        query = sa.select(paused_table.c.name).where(paused_table.c.name == task_name)
        async with await self._begin() as conn:
            return (await conn.execute(query)).first() is not None

    async def aclose(self) -> None:
        """Dispose the engine if this store built it (:meth:`from_url`)."""
        if self._owns_engine:
            await self.engine.dispose()
        else:
            await anyio.lowlevel.checkpoint()


class SqlJobStore(AsyncResource):
    """Job definitions kept as rows (user reminders), loaded by ``Scheduler`` at start; the
    paused state of each is kept in its row. A :class:`~scheduler.abc.JobStore`.

    Ownership as :class:`SqlRunStore`: a given engine is never disposed (so :meth:`aclose`
    releases nothing). Tables are created (or given the columns they lack) on first use unless
    ``create=False``.
    """

    def __init__(self, engine: AsyncEngine, *, create: bool = True) -> None:
        self.engine = engine
        self._tables = _Tables(engine, create=create, tables=(jobs_table,))

    def __repr__(self) -> str:
        return f"SqlJobStore({self.engine.url.render_as_string(hide_password=True)!r})"

    async def _begin(self) -> Any:
        await self._tables.ready()
        return self.engine.begin()

    async def put(self, definition: JobDefinition) -> None:
        """Insert or replace the definition of that name."""
        values = {
            "expr": definition.expr,
            "tz": definition.tz,
            "enabled": definition.enabled,
            "payload": definition.payload,
            "paused": definition.paused,
        }
        async with await self._begin() as conn:
            updated = await conn.execute(
                jobs_table.update().where(jobs_table.c.name == definition.name).values(**values)
            )
            if updated.rowcount == 0:
                await conn.execute(jobs_table.insert().values(name=definition.name, **values))

    async def delete(self, name: str) -> bool:
        """Delete the definition *name*; whether there was one."""
        async with await self._begin() as conn:
            result = await conn.execute(jobs_table.delete().where(jobs_table.c.name == name))
        return bool(result.rowcount)

    async def load(self) -> list[JobDefinition]:
        """Every definition, enabled or not, by name."""
        async with await self._begin() as conn:
            query = self._tables.select(jobs_table).order_by(jobs_table.c.name)
            rows = (await conn.execute(query)).all()
        return [
            JobDefinition(
                name=r.name,
                expr=r.expr,
                tz=r.tz,
                enabled=bool(r.enabled),
                payload=r.payload,
                paused=bool(r._mapping.get("paused")),
            )
            for r in rows
        ]

    async def set_paused(self, name: str, paused: bool) -> bool:
        """Store the paused state of definition ``name``; whether it exists."""
        async with await self._begin() as conn:
            result = await conn.execute(
                jobs_table.update().where(jobs_table.c.name == name).values(paused=paused)
            )
        return bool(result.rowcount)

    async def is_paused(self, name: str) -> bool | None:
        """The stored paused state of definition ``name``; ``None`` if there is none."""
        query = sa.select(jobs_table.c.paused).where(jobs_table.c.name == name)
        async with await self._begin() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else bool(row.paused)

    async def aclose(self) -> None:
        """Nothing to release: the engine is the caller's (a checkpoint)."""
        await anyio.lowlevel.checkpoint()


class _Tables:
    """Creates (or migrates) a store's own tables once, before its first statement.

    A store told not to create them (``create=False``: a command-line reader) reads tables
    of an older version as they are: the columns they lack read as their defaults.
    """

    def __init__(self, engine: AsyncEngine, *, create: bool, tables: tuple[sa.Table, ...]) -> None:
        self.engine = engine
        self._create = create
        self._own = tables
        self._ready = False
        self._lock: anyio.Lock | None = None
        self._missing: set[tuple[str, str]] = set()

    def select(self, table: sa.Table) -> sa.Select[Any]:
        """``SELECT`` of the columns of ``table`` that the database has."""
        return sa.select(*(c for c in table.columns if (table.name, c.name) not in self._missing))

    async def ready(self) -> None:
        if self._ready:
            return
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            if self._ready:
                return
            if self._create:  # replicas starting together retry there
                await create_tables(self.engine, tables=self._own)
            else:
                async with self.engine.connect() as conn:
                    self._missing = await conn.run_sync(_missing_columns, self._own)
            self._ready = True


def _missing_columns(conn: sa.Connection, tables: tuple[sa.Table, ...]) -> set[tuple[str, str]]:
    """(table, column) pairs the existing tables lack (a table that is missing lacks none:
    reading it fails with the database's own error)."""
    return {(table.name, name) for table in tables for name in missing_columns(conn, table)}
