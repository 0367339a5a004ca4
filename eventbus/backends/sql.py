"""The failure table in SQL (SQLAlchemy 2 async): SQLite through aiosqlite, or PostgreSQL.

``record()`` only appends to a bounded in-memory buffer; a writer task, run in the task group
handed to ``start()``, inserts the buffer in batches, one transaction per batch. When the
database is unavailable the writer keeps the records and retries with backoff; what does not
fit the buffer is logged at ERROR with its full content and counted, never dropped silently.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import os
from collections.abc import Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Self

import anyio
import sqlalchemy as sa
from anyio.abc import TaskGroup
from anyio.lowlevel import checkpoint
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncEngine

from .._failures import FailureRecord, FailureStatus
from ._sql_common import UTCDateTime as UTCDateTime
from ._sql_common import database_url as database_url
from ._sql_common import make_engine as make_engine
from ._sql_common import redact_url as redact_url
from ._sql_table import DEFAULT_TABLE as DEFAULT_TABLE
from ._sql_table import _DriverInsert, _record, _row, _utc
from ._sql_table import create_tables as create_tables
from ._sql_table import failure_table as failure_table
from ._sql_table import failures_table as failures_table
from ._sql_table import metadata as metadata

__all__ = [
    "DEFAULT_DB_URL",
    "SqlFailureStore",
    "SqlStoreStatistics",
    "UTCDateTime",
    "create_tables",
    "database_url",
    "default_db_url",
    "failure_table",
    "failures_table",
    "make_engine",
    "metadata",
    "redact_url",
]

# The schema and the shared plumbing live in private modules; reprs and tracebacks show the
# path users import from.
for _obj in (UTCDateTime, create_tables, database_url, failure_table, make_engine, redact_url):
    _obj.__module__ = __name__
del _obj

logger = logging.getLogger("eventbus.failures")

#: The library's and the CLI's default database: a file in the current directory, unless the
#: ``EVENTBUS_DB`` environment variable holds another URL.
DEFAULT_DB_URL = "sqlite+aiosqlite:///eventbus.db"


def default_db_url() -> str:
    """``$EVENTBUS_DB`` if set, else :data:`DEFAULT_DB_URL` (read at call time)."""
    return os.environ.get("EVENTBUS_DB") or DEFAULT_DB_URL


@dataclasses.dataclass(frozen=True, slots=True)
class SqlStoreStatistics:
    """Counters of a :class:`SqlFailureStore`, for health checks and tests."""

    buffered: int  #: accepted, not yet written
    written: int  #: rows inserted
    overflowed: int  #: refused because the buffer was full (each logged at ERROR)
    rejected: int  #: refused by the database itself, e.g. too long (each logged at ERROR)
    lost: int  #: still unwritten when close gave up waiting (each logged at ERROR)
    outage: bool  #: the last write attempt failed


# Errors that mean "this row is bad", as opposed to "the database is not available right now"
# (anything else: the writer keeps the batch and retries with backoff).
_ROW_ERRORS = (sa_exc.IntegrityError, sa_exc.DataError)


def _is_row_error(exc: sa_exc.DBAPIError) -> bool:
    """Whether *exc* blames the data; asyncpg reports a data exception (SQLSTATE class 22,
    e.g. a value longer than its column) as a plain ``DBAPIError``, not a ``DataError``.
    """
    if isinstance(exc, _ROW_ERRORS):
        return True
    state = getattr(exc.orig, "sqlstate", None)
    return isinstance(state, str) and state[:2] in {"22", "23"}


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

    :param engine_or_url: an ``AsyncEngine``, or a URL or SQLite path (default:
        :func:`default_db_url`)
    :param table: the table name (default ``eventbus_failures``)
    :param batch_size: most rows per insert transaction
    :param buffer_size: most records kept while waiting to be written
    :param retry_backoff: first delay after a failed write, doubling up to *max_backoff*
    :param max_backoff: longest delay between write attempts
    :param close_timeout: how long :meth:`aclose` waits for an unavailable database before
        logging the unwritten records at ERROR and giving up
    :param create_table: create the table (if missing) before the first write
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
        buffer_size: int = 100_000,
        retry_backoff: float = 0.1,
        max_backoff: float = 5.0,
        close_timeout: float = 10.0,
        create_table: bool = True,
        busy_timeout: float = 5.0,
    ) -> None:
        if batch_size < 1 or buffer_size < 1:
            raise ValueError(
                f"batch_size={batch_size!r} and buffer_size={buffer_size!r} must be >= 1"
            )
        if retry_backoff <= 0 or max_backoff < retry_backoff or close_timeout < 0:
            raise ValueError(
                "retry_backoff must be > 0, max_backoff >= retry_backoff, close_timeout >= 0"
            )
        if isinstance(engine_or_url, AsyncEngine):
            self.engine, self._owns_engine = engine_or_url, False
        else:
            url = engine_or_url or default_db_url()
            self.engine, self._owns_engine = make_engine(url, busy_timeout=busy_timeout), True
        self.table = failures_table if table == DEFAULT_TABLE else failure_table(table)
        self.batch_size = batch_size
        self.buffer_size = buffer_size
        self.retry_backoff = retry_backoff
        self.max_backoff = max_backoff
        self.close_timeout = close_timeout
        self._create_table = create_table
        self._table_ready = False
        self._buffer: collections.deque[FailureRecord] = collections.deque()
        self._accepted = 0  # records ever appended to the buffer
        self._done = 0  # records ever taken off the buffer (written, rejected or lost)
        self._written = 0
        self._overflowed = 0
        self._rejected = 0
        self._lost = 0
        self._outage: BaseException | None = None
        self._backoff = retry_backoff
        self._driver_insert: _DriverInsert | None = None
        self._lock = anyio.Lock()
        self._wake = anyio.Event()
        self._progress = anyio.Event()
        self._running = False
        self._closing = False
        self._stopped: anyio.Event | None = None
        self._scope: anyio.CancelScope | None = None

    def __repr__(self) -> str:
        url = self.engine.url.render_as_string(hide_password=True)
        return (
            f"SqlFailureStore({url!r}, table={self.table.name!r}, batch_size={self.batch_size}, "
            f"buffer_size={self.buffer_size}, buffered={len(self._buffer)})"
        )

    def statistics(self) -> SqlStoreStatistics:
        return SqlStoreStatistics(
            buffered=len(self._buffer),
            written=self._written,
            overflowed=self._overflowed,
            rejected=self._rejected,
            lost=self._lost,
            outage=self._outage is not None,
        )

    # -- recording -------------------------------------------------------------------------------

    def record(self, failure: FailureRecord) -> None:
        """Accept *failure* for writing; never blocks and never raises for a full buffer."""
        if len(self._buffer) >= self.buffer_size:
            self._overflowed += 1
            logger.error(
                "failure buffer full (%d records, database %s); this record is NOT stored: %r",
                self.buffer_size,
                "unavailable" if self._outage is not None else "slow",
                failure,
            )
            return
        self._buffer.append(failure)
        self._accepted += 1
        self._wake.set()

    # -- lifecycle -------------------------------------------------------------------------------

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
        if self._running:
            raise RuntimeError(f"{self!r} is already started; start it once per task group")
        self._running = True
        self._stopped = anyio.Event()
        self._scope = anyio.CancelScope()
        task_group.start_soon(self._writer, name=f"{self!r} writer")
        await checkpoint()

    async def flush(self) -> None:
        """Return once every record accepted before the call is written (or refused and logged).

        Not started, it writes the buffer itself; while the database is unavailable, it waits.
        """
        target = self._accepted
        while self._done < target:
            if self._running:
                self._wake.set()
                progress = self._progress
                await progress.wait()
            else:
                await self._write_batch()

    async def aclose(self) -> None:
        """Flush (waiting up to ``close_timeout`` for the database), stop the writer, dispose
        the engine if this store built it. Whatever could not be written is logged at ERROR.
        """
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(self.close_timeout):
                await self.flush()
                if self._running:  # let the writer finish its statement: no cancel mid-query
                    assert self._stopped is not None
                    self._closing = True
                    self._wake.set()
                    await self._stopped.wait()
            if self._running:  # the database hung past close_timeout
                assert self._scope is not None and self._stopped is not None
                self._scope.cancel()
                await self._stopped.wait()
            self._closing = False
            self._give_up()
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

    def _give_up(self) -> None:
        while self._buffer:
            rec = self._buffer.popleft()
            self._lost += 1
            self._done += 1
            logger.error(
                "failure store closed with the database unavailable (%s); record NOT stored: %r",
                self._outage,
                rec,
            )
        self._signal_progress()

    # -- writing ---------------------------------------------------------------------------------

    async def _writer(self) -> None:
        assert self._scope is not None and self._stopped is not None
        try:
            with self._scope:
                # The table is made now if it can be (so that the CLI finds it even before the
                # first failure); if the database is not there yet, the first write retries.
                async with self._lock:
                    try:
                        await self._ensure_table()
                    except Exception as exc:
                        logger.debug("failure table not created yet: %r", exc)
                while True:
                    if not self._buffer:
                        if self._closing:
                            return
                        self._wake = anyio.Event()
                        await self._wake.wait()
                        continue
                    await self._write_batch()
        finally:
            self._running = False
            self._stopped.set()
            self._signal_progress()  # a waiting flush() now writes the buffer itself

    async def _write_batch(self) -> None:
        """Write up to ``batch_size`` buffered records in one transaction, or back off."""
        async with self._lock:
            batch = [self._buffer[i] for i in range(min(self.batch_size, len(self._buffer)))]
            if not batch:
                return
            try:
                await self._ensure_table()
                rejected = await self._insert(batch)
            except Exception as exc:  # unavailable, locked, read-only: keep and retry
                self._table_ready = False  # the table may have been dropped meanwhile
                await self._back_off(exc, len(self._buffer))
                return
            if self._outage is not None:
                logger.warning(
                    "failure store %r: database available again; writing %d buffered records",
                    self,
                    len(self._buffer),
                )
                self._outage = None
            self._backoff = self.retry_backoff
            for _ in batch:
                self._buffer.popleft()
            self._done += len(batch)
            self._written += len(batch) - rejected
            self._rejected += rejected
            self._signal_progress()

    async def _insert(self, batch: Sequence[FailureRecord]) -> int:
        """Insert *batch*; return how many rows the database refused (each logged at ERROR)."""
        if self._driver_insert is None:
            self._driver_insert = _DriverInsert.build(self.table, self.engine.dialect)
        if self._driver_insert:
            try:
                params = self._driver_insert.params(batch)
            except Exception:
                params = None  # a malformed record: the portable path below sorts it out
            if params is not None:
                try:
                    async with self.engine.begin() as conn:
                        await conn.exec_driver_sql(self._driver_insert.sql, params)
                    return 0
                except sa_exc.DBAPIError as exc:
                    if not _is_row_error(exc):
                        raise
        rows: list[dict[str, Any]] = []
        rejected = 0
        for rec in batch:
            try:
                rows.append(_row(rec))
            except Exception as exc:
                rejected += 1
                logger.error("failure record cannot be stored (%r); NOT stored: %r", exc, rec)
        if not rows:
            return rejected
        try:
            async with self.engine.begin() as conn:
                await conn.execute(sa.insert(self.table), rows)
            return rejected
        except sa_exc.DBAPIError as exc:
            if not _is_row_error(exc):
                raise
        # A bad row, or a batch that committed before its reply was lost: one row per
        # transaction, skipping ids already stored, so that one row cannot hold back the rest.
        for row in rows:
            try:
                async with self.engine.begin() as conn:
                    exists = await conn.scalar(
                        sa.select(sa.func.count()).where(self.table.c.id == row["id"])
                    )
                    if not exists:
                        await conn.execute(sa.insert(self.table), [row])
            except sa_exc.DBAPIError as exc:
                if not _is_row_error(exc):
                    raise
                rejected += 1
                logger.error("the database refused a failure record (%s); NOT stored: %r", exc, row)
        return rejected

    async def _back_off(self, exc: BaseException, pending: int) -> None:
        if self._outage is None:
            logger.warning(
                "failure store %r cannot write (%s: %s); keeping %d records and retrying with "
                "backoff (logged once per outage)",
                self,
                type(exc).__name__,
                exc,
                pending,
            )
        else:
            logger.debug("failure store still unavailable: %s", exc)
        self._outage = exc
        delay = self._backoff
        self._backoff = min(delay * 2, self.max_backoff)
        self._signal_progress()
        await anyio.sleep(delay)

    async def _ensure_table(self) -> None:
        if self._table_ready or not self._create_table:
            return
        async with self.engine.begin() as conn:
            await conn.run_sync(self.table.create, checkfirst=True)
        self._table_ready = True

    def _signal_progress(self) -> None:
        self._progress.set()
        self._progress = anyio.Event()

    # -- queries ---------------------------------------------------------------------------------

    async def query(
        self,
        *,
        status: FailureStatus | None = None,
        event: str | None = None,
        listener: str | None = None,
        since: datetime | None = None,
        limit: int | None = 100,
    ) -> list[FailureRecord]:
        """Records matching every given filter, newest first; *since* compares the last failure."""
        await self.flush()
        c = self.table.c
        stmt = sa.select(self.table).order_by(c.seq.desc())
        if status is not None:
            stmt = stmt.where(c.status == FailureStatus(status).value)
        if event is not None:
            stmt = stmt.where(c.event_name == event)
        if listener is not None:
            stmt = stmt.where(c.listener == listener)
        if since is not None:
            stmt = stmt.where(c.last_failed_at >= _utc(since))
        if limit is not None:
            stmt = stmt.limit(limit)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(stmt)).mappings().all()
        return [_record(r) for r in rows]

    async def get(self, failure_id: str) -> FailureRecord | None:
        await self.flush()
        async with self.engine.connect() as conn:
            row = (
                (await conn.execute(sa.select(self.table).where(self.table.c.id == failure_id)))
                .mappings()
                .first()
            )
        return None if row is None else _record(row)

    async def update(self, failure: FailureRecord) -> None:
        """Replace the stored record of the same id.

        :raises KeyError: if no record has that id
        """
        await self.flush()
        values = _row(failure)
        del values["id"]
        async with self.engine.begin() as conn:
            result = await conn.execute(
                sa.update(self.table).where(self.table.c.id == failure.id).values(**values)
            )
        if result.rowcount == 0:
            raise KeyError(failure.id)

    async def purge(
        self, *, status: FailureStatus | None = None, before: datetime | None = None
    ) -> int:
        """Delete the matching records (all of them without filters); return how many."""
        await self.flush()
        stmt = sa.delete(self.table)
        if status is not None:
            stmt = stmt.where(self.table.c.status == FailureStatus(status).value)
        if before is not None:
            stmt = stmt.where(self.table.c.last_failed_at < _utc(before))
        async with self.engine.begin() as conn:
            result = await conn.execute(stmt)
        return int(result.rowcount)
