"""Protocols that storage backends implement; concrete classes need not inherit from them."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from anyio.abc import TaskGroup

from ._failures import FailureRecord, FailureStatus

__all__ = ["FailureStore"]


@runtime_checkable
class FailureStore(Protocol):
    """**Protocol:** durable home of listener failures.

    * ``record()`` is synchronous and never blocks the publisher; a store that writes to a
      server buffers and writes from a background task.
    * ``start(task_group)`` is called by the bus on ``async with bus:``; background work runs
      in that task group. ``aclose()`` flushes everything accepted so far, and releases what
      the store built (an engine from a URL), never what it was given. (The stores of this
      package are also async context managers that close on exit; the bus needs only
      ``aclose()``.)
    * ``flush()`` returns once every record accepted before the call is queryable.
    * Queries return newest first. ``correlation`` (added after the first release) selects
      the records of one chain of causes: a store written before it must take the keyword.
    * Every field of a record reads as its declared type; ``traceback`` is ``str``. A record
      the bus made renders that text on the first read (tens of µs, once), so a store that
      writes later should read it when it writes, not in ``record()``.
    """

    def record(self, failure: FailureRecord) -> None:
        """Accept *failure* for storing; never blocks, never raises for a full buffer."""
        ...

    async def start(self, task_group: TaskGroup) -> None:
        """Run the store's background work (a batch writer) in *task_group*, if any."""
        ...

    async def flush(self) -> None:
        """Return once every record accepted before the call is queryable."""
        ...

    async def aclose(self) -> None:
        """Flush, stop the background work, and release what the store built."""
        ...

    async def query(
        self,
        *,
        status: FailureStatus | None = None,
        event: str | None = None,
        listener: str | None = None,
        since: datetime | None = None,
        limit: int | None = 100,
        correlation: str | None = None,
    ) -> list[FailureRecord]:
        """Records matching every filter given, newest first (*correlation*: one chain)."""
        ...

    async def get(self, failure_id: str) -> FailureRecord | None:
        """The record of *failure_id*, or ``None``."""
        ...

    async def update(self, failure: FailureRecord) -> None:
        """Replace the stored record of the same id (retry bookkeeping); ``KeyError`` if none."""
        ...

    async def purge(
        self, *, status: FailureStatus | None = None, before: datetime | None = None
    ) -> int:
        """Delete the matching records (all of them without filters); how many."""
        ...
