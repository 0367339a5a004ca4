"""The SQL failure store's writing side: a bounded buffer, a batch writer, a spill file.

``record()`` appends to the buffer, or, when it is full (the database is slow or down), to the
spill queue; nothing else happens on the publisher's path. Two tasks run in the task group
handed to ``start()``: the *writer* inserts the buffer in batches (larger while the buffer is
deep and batches are quick) and re-ingests the spill file once it has caught up; the *spiller*
appends the spill queue to the spill file in a worker thread. While the database is unavailable
the writer keeps its batch and retries with doubling backoff (one WARNING per outage, one when
it is back). What it logs is worded in :mod:`eventbus.backends._sql_writer_log`.
"""

from __future__ import annotations

import collections
import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import sqlalchemy as sa
from anyio.abc import TaskGroup
from anyio.lowlevel import checkpoint
from sqlalchemy.ext.asyncio import AsyncEngine

from .._failures import FailureRecord
from ._sql_common import add_missing_columns
from ._sql_insert import BatchInsert
from ._sql_spill import SpillBacklog, SpillFile
from ._sql_writer_log import WriterLog

__all__ = ["FailureWriter"]

#: A batch that took less than this doubles the next one (up to ``max_batch_size``) while the
#: buffer is deep; one that took more than twice this halves it (down to ``batch_size``).
TARGET_BATCH_SECONDS = 0.25


class FailureWriter:
    """Owns the buffer, the spill queue and the two tasks of one ``SqlFailureStore``."""

    def __init__(
        self,
        engine: AsyncEngine,
        table: sa.Table,
        spill: SpillFile,
        *,
        batch_size: int,
        max_batch_size: int,
        buffer_size: int,
        retry_backoff: float,
        max_backoff: float,
        close_timeout: float,
        create_table: bool,
        describe: Callable[[], str],
    ) -> None:
        self.engine, self.table, self.spill = engine, table, spill
        self.batch_size, self.max_batch_size = batch_size, max_batch_size
        self.buffer_size, self.close_timeout = buffer_size, close_timeout
        self.retry_backoff, self.max_backoff = retry_backoff, max_backoff
        self._create_table, self._table_ready = create_table, False
        self._log = WriterLog(describe)
        self._insert = BatchInsert(engine, table, self._log.refused)
        self._batch_limit, self._backoff = batch_size, retry_backoff
        self.outage: BaseException | None = None
        # the buffer: accepted counts appends, done counts records taken off it
        self.buffer: collections.deque[FailureRecord] = collections.deque()
        self._accepted = self._done = 0
        # the spill: accepted counts records routed to it, handled those appended to the file
        # (or lost), ingested_mark the handled count whose records are all in the table
        self._spill_queue: list[FailureRecord] = []
        self._spill_accepted = self._spill_handled = self._ingested_mark = 0
        self._ingest_due = self._orphans = False  # set when this store spills, or by start()
        self._backlog = SpillBacklog(spill)
        self._reading = False  # a round of reading the spill back is under way
        self._claim_mark = 0  # _spill_handled when that round claimed the file
        self._chunk: list[FailureRecord] = []
        # counters of statistics()
        self.written = self.overflowed = self.spilled = self.reingested = 0
        self.rejected = self.lost = 0
        # tasks: one writer of the table, one appender of the spill file at a time
        self._lock, self._spill_lock = anyio.Lock(), anyio.Lock()
        self._wake, self._spill_wake, self._progress = anyio.Event(), anyio.Event(), anyio.Event()
        self.running = self._closing = False
        self._scopes: list[anyio.CancelScope] = []
        self._stopped: list[anyio.Event] = []

    # -- the publisher's path --------------------------------------------------------------------

    def record(self, failure: FailureRecord) -> None:
        if len(self.buffer) < self.buffer_size:
            self.buffer.append(failure)
            self._accepted += 1
            self._wake.set()
            return
        self.overflowed += 1
        self._spill_queue.append(failure)
        self._spill_accepted += 1
        if len(self._spill_queue) < self.buffer_size:
            self._spill_wake.set()
            return
        # The spiller has had no turn for buffer_size records (a publisher that never awaits,
        # or a store not started): write here rather than hold more in memory or drop any.
        batch, self._spill_queue = self._spill_queue, []
        try:
            bad: list[tuple[FailureRecord, Exception]] | OSError = self.spill.append(batch)
        except OSError as exc:
            bad = exc
        self._appended(batch, bad, "did not fit the buffer")

    @property
    def waiting(self) -> int:
        """Records accepted and not yet in the table: buffered, or spilled and not read back."""
        return len(self.buffer) + self._spill_accepted - self._ingested_mark

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, task_group: TaskGroup, name: str) -> None:
        self.running = True
        self._closing = False
        self._ingest_due = self._orphans = True  # a previous run may have left a spill file
        self._scopes = [anyio.CancelScope(), anyio.CancelScope()]
        self._stopped = [anyio.Event(), anyio.Event()]
        for loop, scope, stopped, what in zip(
            (self._writer_loop, self._spiller_loop),
            self._scopes,
            self._stopped,
            ("writer", "spill"),
            strict=True,
        ):
            task_group.start_soon(self._run, loop, scope, stopped, name=f"{name} {what}")

    async def flush(self) -> None:
        """Return once every record accepted before the call is in the table (or refused and
        logged); spilled records too, once the writer re-ingested them."""
        target, spill_target = self._accepted, self._spill_accepted
        while self._done < target or self._ingested_mark < spill_target:
            if self.running:
                self._wake.set()
                self._spill_wake.set()
                progress = self._progress
                await progress.wait()
            else:
                await self._spill_batch()
                if not await self._step():
                    break
        await checkpoint()

    async def ensure_table(self) -> None:
        """Make the table now if the writer has not yet: a query or purge can come before the
        writer's first turn (which makes it before the first write). An unavailable database
        raises here, as the statement itself would."""
        if not self._create_table or self._table_ready:
            return
        async with self._lock:  # one migration at a time (concurrent DDL races on PostgreSQL)
            if not self._table_ready:
                async with self.engine.begin() as conn:
                    await conn.run_sync(add_missing_columns, self.table)
                self._table_ready = True

    async def aclose(self) -> None:
        """Flush for up to ``close_timeout`` seconds, stop the tasks, then move whatever is still in
        memory to the spill file (re-ingested at the next start)."""
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(self.close_timeout):
                await self.flush()
                if self.running:  # let the writer finish its statement: no cancel mid-query
                    self._closing = True
                    self._wake.set()
                    self._spill_wake.set()
                    for stopped in self._stopped:
                        await stopped.wait()
            if self.running:  # the database hung past the timeout
                for scope in self._scopes:
                    scope.cancel()
                for stopped in self._stopped:
                    await stopped.wait()
            self._closing = False
            await self._spill_leftovers()
            self._log.closed(
                overflowed=self.overflowed,
                spilled=self.spilled,
                reingested=self.reingested,
                rejected=self.rejected,
                lost=self.lost,
                waiting=self.spill.path if self._spill_handled > self._ingested_mark else None,
            )

    async def _run(
        self, loop: Callable[[], Any], scope: anyio.CancelScope, stopped: anyio.Event
    ) -> None:
        try:
            with scope:
                await loop()
        finally:
            if all(e.is_set() or e is stopped for e in self._stopped):
                self.running = False
            stopped.set()
            self._signal_progress()  # a waiting flush() now writes the buffer itself

    async def _writer_loop(self) -> None:
        while True:
            if await self._step():
                continue
            if self._closing:
                return
            self._wake = anyio.Event()
            await self._wake.wait()

    async def _spiller_loop(self) -> None:
        while True:
            if self._spill_queue:
                await self._spill_batch()
                continue
            if self._closing:
                return
            self._spill_wake = anyio.Event()
            await self._spill_wake.wait()

    # -- writing the table -----------------------------------------------------------------------

    async def _step(self) -> bool:
        """One unit of work: make the table, or write one batch, or re-ingest one chunk of the
        spill file once the buffer is empty. False when there is nothing to do."""
        async with self._lock:
            if self._create_table and not self._table_ready:
                try:
                    async with self.engine.begin() as conn:
                        await conn.run_sync(add_missing_columns, self.table)
                except Exception as exc:  # locked, unreachable, read-only: an outage
                    await self._back_off(exc)
                    return True
                self._table_ready = True
                self._recovered()
            if self.buffer:
                await self._write_batch()
                return True
            if self._ingest_due:
                await self._ingest_chunk()
                return True
            return False

    async def _write_batch(self) -> None:
        n = min(len(self.buffer), self._batch_limit)
        batch = list(itertools.islice(self.buffer, n))
        started = time.monotonic()
        try:
            rejected = await self._insert(batch)
        except Exception as exc:  # unavailable, locked, read-only: keep and retry
            await self._back_off(exc)
            return
        self._adapt(n, time.monotonic() - started)
        self._recovered()
        for _ in range(n):
            self.buffer.popleft()
        self._done += n
        self.written += n - rejected
        self.rejected += rejected
        self._signal_progress()

    def _adapt(self, n: int, seconds: float) -> None:
        if n >= self._batch_limit and seconds < TARGET_BATCH_SECONDS:
            self._batch_limit = min(self._batch_limit * 2, self.max_batch_size)
        elif seconds > 2 * TARGET_BATCH_SECONDS:
            self._batch_limit = max(self._batch_limit // 2, self.batch_size)

    async def _back_off(self, exc: BaseException) -> None:
        self._table_ready = False  # the table may have been dropped meanwhile
        self._batch_limit = self.batch_size
        kept = len(self.buffer) + len(self._chunk)
        self._log.outage(exc, kept, first=self.outage is None)
        self.outage = exc
        delay = self._backoff
        self._backoff = min(delay * 2, self.max_backoff)
        self._signal_progress()
        await anyio.sleep(delay)

    def _recovered(self) -> None:
        if self.outage is not None:
            self._log.recovered(len(self.buffer))
            self.outage = None
        self._backoff = self.retry_backoff

    def _signal_progress(self) -> None:
        self._progress.set()
        self._progress = anyio.Event()

    # -- the spill file --------------------------------------------------------------------------

    async def _spill_batch(self) -> None:
        """Append the spill queue to the spill file, in a worker thread."""
        async with self._spill_lock:
            batch, self._spill_queue = self._spill_queue, []
            if batch:
                await self._append(batch, "did not fit the buffer")

    async def _append(
        self, batch: list[FailureRecord], why: str, when: str = "when the writer catches up"
    ) -> None:
        try:
            bad: list[tuple[FailureRecord, Exception]] | OSError = await anyio.to_thread.run_sync(
                self.spill.append, batch
            )
        except OSError as exc:
            bad = exc
        self._appended(batch, bad, why, when)

    def _appended(
        self,
        batch: list[FailureRecord],
        bad: list[tuple[FailureRecord, Exception]] | OSError,
        why: str,
        when: str = "when the writer catches up",
    ) -> None:
        """Count (and log, rate-limited) a batch appended to the spill file, or not."""
        self._spill_handled += len(batch)
        self._ingest_due = True
        self._wake.set()
        self._signal_progress()
        if isinstance(bad, OSError):
            self._lose(batch, f"the spill file {str(self.spill.path)!r} cannot be written ({bad})")
            return
        for rec, error in bad:
            self.rejected += 1
            self._log.refused(f"failure record cannot be stored ({error!r})", rec)
        self.spilled += len(batch) - len(bad)
        self._log.spilled(
            len(batch),
            why,
            outage=self.outage is not None,
            path=self.spill.path,
            total=self.spilled,
            when=when,
        )

    async def _ingest_chunk(self) -> None:
        """Insert the next chunk of the spill file; claim the file first, delete it at its end."""
        if not self._chunk:
            try:
                await self._read_chunk()
            except OSError as exc:  # the lines stay in their file, for a later start
                self._log.unreadable_spill(exc)
                self._backlog.close()
                self._reading = False
                self._ingested(self._spill_handled)
            if not self._chunk:
                return
        try:
            rejected = await self._insert(self._chunk)
        except Exception as exc:
            await self._back_off(exc)
            return
        self._recovered()
        self.reingested += len(self._chunk) - rejected
        self.rejected += rejected
        self._chunk = []
        self._signal_progress()

    async def _read_chunk(self) -> None:
        """The next chunk of the spill files into ``_chunk``, in a worker thread."""
        if not self._reading:  # a new round: what was spilled so far is in the file it claims
            self._reading, self._claim_mark = True, self._spill_handled
        orphans, self._orphans = self._orphans, False
        records, bad, finished = await anyio.to_thread.run_sync(
            self._backlog.next_chunk, self._batch_limit, orphans
        )
        for line in bad:
            self.rejected += 1
            self._log.refused(f"unreadable line in {str(self._backlog.reading)!r}", line[:500])
        if finished:
            self._reading = False
            self._ingested(self._claim_mark)
        self._chunk = records

    def _ingested(self, mark: int) -> None:
        self._ingested_mark = max(self._ingested_mark, mark)
        self._ingest_due = self._spill_handled > self._ingested_mark
        self._signal_progress()

    async def _spill_leftovers(self) -> None:
        """At close: what is still in memory goes to the spill file, for the next start."""
        await self._spill_batch()
        if self.buffer:
            batch = list(self.buffer)
            self.buffer.clear()
            self._done += len(batch)
            self._spill_accepted += len(batch)
            await self._append(batch, "were not written before close", "at the next start")
        self._backlog.close()  # a file half read stays claimed: the next start reads it again
        self._reading, self._chunk = False, []
        self._signal_progress()

    # -- records that are not stored -------------------------------------------------------------

    def _lose(self, records: Sequence[FailureRecord], why: str) -> None:
        self.lost += len(records)
        self._log.lost(records, why)
