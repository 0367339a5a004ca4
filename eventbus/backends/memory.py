"""In-process failure store: the embedded default and a verified fake of the SQL store."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime

from anyio.abc import AsyncResource, TaskGroup
from anyio.lowlevel import checkpoint

from .._failures import FailureRecord, FailureStatus, check_failure_ids, check_offset

__all__ = ["MemoryFailureStore"]

logger = logging.getLogger("eventbus.failures")


class MemoryFailureStore(AsyncResource):
    """Keeps failures in a dict, in insertion order; lost with the process.

    ``async with store:`` returns the store and closes it on exit (closing keeps the records:
    they stay queryable).

    :param max_records: oldest records are evicted beyond this many (``None``: unbounded);
        each record was logged at ERROR when it was made, and evictions are logged at WARNING
        (the first, then every 1,000th) and counted in ``evicted``
    """

    def __init__(self, *, max_records: int | None = 100_000) -> None:
        # ordered: popitem(last=False) evicts in constant time, where popping next(iter())
        # of a dict scans the holes left by earlier pops (quadratic over a storm)
        self._records: OrderedDict[str, FailureRecord] = OrderedDict()
        self._max = max_records
        self.evicted = 0

    def __repr__(self) -> str:
        return f"MemoryFailureStore(records={len(self._records)}, max_records={self._max})"

    def __len__(self) -> int:
        return len(self._records)

    def record(self, failure: FailureRecord) -> None:
        self._records[failure.id] = failure
        if self._max is not None and len(self._records) > self._max:
            _, oldest = self._records.popitem(last=False)
            self.evicted += 1
            if self.evicted % 1000 == 1:
                logger.warning(
                    "memory failure store is full (max_records=%d): evicted %d record(s) so far, "
                    "the latest %s of %r by %r; use a SqlFailureStore to keep them",
                    self._max,
                    self.evicted,
                    oldest.id,
                    oldest.event_name,
                    oldest.listener,
                )

    async def start(self, task_group: TaskGroup) -> None:
        await checkpoint()

    async def flush(self) -> None:
        await checkpoint()

    async def aclose(self) -> None:
        """Nothing to flush or release (a checkpoint)."""
        await checkpoint()

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
        """Records matching every given filter, newest first, after skipping *offset*."""
        skip = check_offset(offset)
        await checkpoint()
        out: list[FailureRecord] = []
        for rec in reversed(self._records.values()):
            if status is not None and rec.status != status:
                continue
            if event is not None and rec.event_name != event:
                continue
            if listener is not None and rec.listener != listener:
                continue
            if since is not None and rec.last_failed_at < since:
                continue
            if until is not None and rec.last_failed_at >= until:
                continue
            if correlation is not None and rec.correlation_id != correlation:
                continue
            if skip:
                skip -= 1
                continue
            out.append(rec)
            if limit is not None and len(out) >= limit:
                break
        return out

    async def get(self, failure_id: str) -> FailureRecord | None:
        await checkpoint()
        return self._records.get(failure_id)

    async def update(self, failure: FailureRecord) -> None:
        await checkpoint()
        if failure.id not in self._records:
            raise KeyError(failure.id)
        self._records[failure.id] = failure

    async def purge(
        self,
        *,
        status: FailureStatus | None = None,
        before: datetime | None = None,
        ids: Sequence[str] | None = None,
    ) -> int:
        """Delete the records matching every given filter; how many."""
        only = None if ids is None else set(check_failure_ids(ids, call="purge"))
        await checkpoint()
        doomed = [
            r.id
            for r in self._records.values()
            if (only is None or r.id in only)
            and (status is None or r.status == status)
            and (before is None or r.last_failed_at < before)
        ]
        for fid in doomed:
            del self._records[fid]
        return len(doomed)
