"""The failure table in SQL (SQLAlchemy 2 async): SQLite through aiosqlite, or PostgreSQL.

``record()`` only appends to a bounded in-memory buffer; a writer task, run in the task group
handed to ``start()``, inserts the buffer in batches. When the database is unavailable or falls
behind, nothing is lost: records that do not fit the buffer go to a spill file (JSON lines) and
are written to the table when the writer catches up, or at the next start. The writing side
lives in :mod:`eventbus.backends._sql_writer`; this module holds the store's API and queries.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from .._public import show_as_module
from ..extras import missing_extra

if _missing := missing_extra(__name__, "sql"):
    raise _missing

import sqlalchemy as sa
from anyio.abc import TaskGroup
from anyio.lowlevel import checkpoint
from sqlalchemy.ext.asyncio import AsyncEngine

from .._failures import FailureRecord, FailureStatus, check_failure_ids, check_offset
from ._sql_common import UTCDateTime as UTCDateTime
from ._sql_common import add_missing_columns as add_missing_columns
from ._sql_common import check_async_engine as check_async_engine
from ._sql_common import database_url as database_url
from ._sql_common import make_engine as make_engine
from ._sql_common import migrate_tables as migrate_tables
from ._sql_common import missing_columns as missing_columns
from ._sql_common import redact_url as redact_url
from ._sql_spill import SpillFile, default_spill_path, spill_dir
from ._sql_table import DEFAULT_TABLE as DEFAULT_TABLE
from ._sql_table import _record, _row, _utc
from ._sql_table import create_tables as create_tables
from ._sql_table import failure_table as failure_table
from ._sql_table import failures_table as failures_table
from ._sql_table import metadata as metadata
from ._sql_writer import FailureWriter

__all__ = [
    "DEFAULT_DB_URL",
    "SqlFailureStore",
    "SqlStoreStatistics",
    "UTCDateTime",
    "add_missing_columns",
    "check_async_engine",
    "create_tables",
    "database_url",
    "default_db_url",
    "failure_table",
    "failures_table",
    "make_engine",
    "metadata",
    "migrate_tables",
    "missing_columns",
    "redact_url",
]

# The schema and the shared plumbing live in private modules; reprs and tracebacks show the
# path users import from.
show_as_module(
    __name__,
    UTCDateTime,
    add_missing_columns,
    check_async_engine,
    create_tables,
    database_url,
    failure_table,
    make_engine,
    migrate_tables,
    missing_columns,
    redact_url,
    within="eventbus.backends",
)

#: The library's and the CLI's default database: a file in the current directory, unless the
#: ``EVENTBUS_DB`` environment variable holds another URL.
DEFAULT_DB_URL = "sqlite+aiosqlite:///eventbus.db"


def default_db_url() -> str:
    """``$EVENTBUS_DB`` if set, else :data:`DEFAULT_DB_URL` (read at call time)."""
    return os.environ.get("EVENTBUS_DB") or DEFAULT_DB_URL


@dataclasses.dataclass(frozen=True, slots=True)
class SqlStoreStatistics:
    """Counters of a :class:`SqlFailureStore`, for health checks and tests.

    Every record accepted ends up counted once in ``written``, ``reingested`` (after it was
    ``spilled``), ``rejected`` or ``lost``, or is still ``buffered`` or in the spill file.
    """

    buffered: int  #: accepted, in memory, not yet written
    written: int  #: rows inserted from the buffer
    overflowed: int  #: did not fit the buffer, so went to the spill file instead
    spilled: int  #: appended to the spill file (overflow, and what close could not write)
    reingested: int  #: read back from the spill file into the table
    rejected: int  #: refused by the database (e.g. too long) or unreadable in the spill file
    lost: int  #: stored nowhere: the spill file could not take them either (logged at ERROR)
    outage: bool  #: the last write attempt failed
    #: accepted and not yet in the table: buffered, or in the spill file and not read back
    waiting: int = 0


class SqlFailureStore:
    """Failure records in a SQL table, written in batches by a background task.

    Ownership: a store never disposes an engine it was given, and always disposes an engine it
    built from a URL (in :meth:`aclose`), with :func:`make_engine`: for SQLite that sets
    ``journal_mode=WAL`` and ``synchronous=NORMAL`` and waits *busy_timeout* for a lock; a
    given engine is left as configured.

    Concurrency: ``record()`` is synchronous and O(1); only the writer task (or a ``flush()``
    when the store is not started) writes batches, serialised by a lock. Queries flush first,
    so they see every record accepted before the call; while the database is unavailable
    they wait for it (bound them with ``anyio.fail_after``). asyncio only.

    Spill file: records that do not fit the buffer, and those still unwritten when
    :meth:`aclose` gives up, are appended to *spill_path* as JSON lines (in a worker thread)
    and inserted into the table when the writer has caught up, or when a store on the same
    spill file starts; ids already stored are skipped. Several processes may share one file.

    :param engine_or_url: an ``AsyncEngine``, or a URL or SQLite path (default:
        :func:`default_db_url`)
    :param table: the table name (default ``eventbus_failures``)
    :param batch_size: rows per insert transaction to start with
    :param max_batch_size: the most rows per transaction: batches double up to it while the
        buffer is deep and each takes under a quarter of a second
    :param buffer_size: most records kept in memory while waiting to be written
    :param spill_path: the spill file; default: in the directory ``$EVENTBUS_SPILL_DIR``
        names, if set; else next to a SQLite file (``app.db-eventbus_failures-spill.jsonl``);
        else in the user's state directory (``~/.local/state/eventbus`` on Linux, created
        private to the user), named after the database
        (``eventbus-spill-postgresql-host-5432-app-eventbus_failures.jsonl``). The first
        WARNING about spilled records says where.
    :param retry_backoff: first delay after a failed write, doubling up to *max_backoff*
    :param max_backoff: longest delay between write attempts
    :param close_timeout: how long :meth:`aclose` waits for an unavailable database before
        moving the unwritten records to the spill file
    :param create_table: create the table (if missing) before the first write, and add to
        an existing one the columns a newer version added (``causation_id``,
        ``correlation_id``); without it, a table that lacks them is read as it is (they read
        as ``None``) and :func:`create_tables` adds them at deployment
    :param busy_timeout: the writer's patience with a SQLite file another connection holds
        write-locked, in seconds (an engine built from a URL); past it, the store reports an
        outage and retries with backoff
    """

    def __init__(
        self,
        engine_or_url: AsyncEngine | str | os.PathLike[str] | sa.URL | None = None,
        *,
        table: str = DEFAULT_TABLE,
        batch_size: int = 2_000,
        max_batch_size: int = 20_000,
        buffer_size: int = 100_000,
        spill_path: str | os.PathLike[str] | None = None,
        retry_backoff: float = 0.1,
        max_backoff: float = 5.0,
        close_timeout: float = 10.0,
        create_table: bool = True,
        busy_timeout: float = 5.0,
    ) -> None:
        if batch_size < 1 or buffer_size < 1 or max_batch_size < batch_size:
            raise ValueError(
                f"batch_size={batch_size!r} and buffer_size={buffer_size!r} must be >= 1, and "
                f"max_batch_size={max_batch_size!r} >= batch_size"
            )
        if retry_backoff <= 0 or max_backoff < retry_backoff or close_timeout < 0:
            raise ValueError(
                "retry_backoff must be > 0, max_backoff >= retry_backoff, close_timeout >= 0"
            )
        check_async_engine(engine_or_url, "SqlFailureStore", url_ok=True)
        if isinstance(engine_or_url, AsyncEngine):
            self.engine, self._owns_engine = engine_or_url, False
        else:
            url = engine_or_url or default_db_url()
            self.engine, self._owns_engine = make_engine(url, busy_timeout=busy_timeout), True
        self.table = failures_table if table == DEFAULT_TABLE else failure_table(table)
        self._create_table = create_table
        self._absent: set[str] | None = None  # columns the table lacks (create_table=False)
        self.spill_path = (
            Path(spill_path).absolute()
            if spill_path is not None
            else default_spill_path(self.engine.url, self.table.name)
        )
        chosen = spill_path is None and self.spill_path.parent == spill_dir()
        self._writer = FailureWriter(
            self.engine,
            self.table,
            SpillFile(self.spill_path, make_dir=chosen),
            batch_size=batch_size,
            max_batch_size=max_batch_size,
            buffer_size=buffer_size,
            retry_backoff=retry_backoff,
            max_backoff=max_backoff,
            close_timeout=close_timeout,
            create_table=create_table,
            describe=self.__repr__,
        )

    def __repr__(self) -> str:
        w = self._writer
        return (
            f"SqlFailureStore({redact_url(self.engine.url)!r}, table={self.table.name!r}, "
            f"batch_size={w.batch_size}, buffer_size={w.buffer_size}, buffered={len(w.buffer)})"
        )

    @property
    def batch_size(self) -> int:
        return self._writer.batch_size

    @property
    def buffer_size(self) -> int:
        return self._writer.buffer_size

    @property
    def close_timeout(self) -> float:
        return self._writer.close_timeout

    def statistics(self) -> SqlStoreStatistics:
        w = self._writer
        return SqlStoreStatistics(
            buffered=len(w.buffer),
            written=w.written,
            overflowed=w.overflowed,
            spilled=w.spilled,
            reingested=w.reingested,
            rejected=w.rejected,
            lost=w.lost,
            outage=w.outage is not None,
            waiting=w.waiting,
        )

    # -- recording and lifecycle -----------------------------------------------------------------

    def record(self, failure: FailureRecord) -> None:
        """Accept *failure* for writing; never blocks, never raises for a full buffer."""
        self._writer.record(failure)

    async def start(self, task_group: TaskGroup) -> None:
        """Run the writer in *task_group*; succeeds even while the database is unavailable.

        :raises RuntimeError: if not running on asyncio (SQLAlchemy's async engine needs it)
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "SqlFailureStore needs asyncio (SQLAlchemy's async engine does not run on trio); "
                "run the bus on asyncio, or give it a MemoryFailureStore"
            ) from None
        if self._writer.running:
            raise RuntimeError(f"{self!r} is already started; start it once per task group")
        self._writer.start(task_group, repr(self))
        await checkpoint()

    async def flush(self) -> None:
        """Return once every record accepted before the call is written (or refused and
        logged), spilled ones included. Not started, it writes them itself; while the database
        is unavailable, it waits."""
        await self._writer.flush()

    async def aclose(self) -> None:
        """Flush (waiting up to ``close_timeout`` for the database), stop the writer, dispose
        the engine if this store built it. What could not be written goes to the spill file.
        """
        await self._writer.aclose()
        if self._owns_engine:
            await self.engine.dispose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- queries ---------------------------------------------------------------------------------

    async def query(
        self,
        *,
        status: FailureStatus | None = None,
        event: str | None = None,
        listener: str | None = None,
        since: datetime | None = None,
        limit: int | None = 100,
        correlation: str | None = None,
        until: datetime | None = None,
        offset: int = 0,
    ) -> list[FailureRecord]:
        """Records matching every given filter, newest first; *since* (inclusive) and *until*
        (exclusive) compare the last failure; *correlation* is a correlation id (one chain of
        causes); *offset* skips that many (``OFFSET``: the rows before it are still read)."""
        check_offset(offset)
        await self.flush()
        c = self.table.c
        columns = await self._columns()
        if correlation is not None and c.correlation_id not in columns:
            return []  # a table of the older version: no row knows its chain
        stmt = sa.select(*columns).order_by(c.seq.desc())
        if status is not None:
            stmt = stmt.where(c.status == FailureStatus(status).value)
        if event is not None:
            stmt = stmt.where(c.event_name == event)
        if listener is not None:
            stmt = stmt.where(c.listener == listener)
        if since is not None:
            stmt = stmt.where(c.last_failed_at >= _utc(since))
        if until is not None:
            stmt = stmt.where(c.last_failed_at < _utc(until))
        if correlation is not None:
            stmt = stmt.where(c.correlation_id == correlation)
        if limit is not None:
            stmt = stmt.limit(limit)
        if offset:
            stmt = stmt.offset(offset)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(stmt)).mappings().all()
        return [_record(r) for r in rows]

    async def get(self, failure_id: str) -> FailureRecord | None:
        await self.flush()
        stmt = sa.select(*await self._columns()).where(self.table.c.id == failure_id)
        async with self.engine.connect() as conn:
            row = (await conn.execute(stmt)).mappings().first()
        return None if row is None else _record(row)

    async def _columns(self) -> list[sa.Column[Any]]:
        """The table's columns that the database has: all, unless the store may not migrate
        it (``create_table=False``) and it is of an older version."""
        if self._create_table:
            await self._writer.ensure_table()
            return list(self.table.columns)
        if self._absent is None:
            async with self.engine.connect() as conn:
                self._absent = await conn.run_sync(missing_columns, self.table)
        return [c for c in self.table.columns if c.name not in self._absent]

    async def update(self, failure: FailureRecord) -> None:
        """Replace the stored record of the same id.

        :raises KeyError: if no record has that id
        """
        await self.flush()
        present = {c.name for c in await self._columns()}
        values = {k: v for k, v in _row(failure).items() if k in present and k != "id"}
        async with self.engine.begin() as conn:
            result = await conn.execute(
                sa.update(self.table).where(self.table.c.id == failure.id).values(**values)
            )
        if result.rowcount == 0:
            raise KeyError(failure.id)

    async def purge(
        self,
        *,
        status: FailureStatus | None = None,
        before: datetime | None = None,
        ids: Sequence[str] | None = None,
    ) -> int:
        """Delete the records matching every given filter (all of them without filters, none
        for ``ids=[]``); return how many. Ids go 500 a statement, in one transaction (SQLite
        caps the parameters of a statement)."""
        only = None if ids is None else sorted(set(check_failure_ids(ids, call="purge")))
        await self.flush()
        await self._writer.ensure_table()
        stmt = sa.delete(self.table)
        if status is not None:
            stmt = stmt.where(self.table.c.status == FailureStatus(status).value)
        if before is not None:
            stmt = stmt.where(self.table.c.last_failed_at < _utc(before))
        async with self.engine.begin() as conn:
            if only is None:
                return int((await conn.execute(stmt)).rowcount)
            removed = 0
            for start in range(0, len(only), 500):
                chunk = only[start : start + 500]
                result = await conn.execute(stmt.where(self.table.c.id.in_(chunk)))
                removed += int(result.rowcount)
        return removed
