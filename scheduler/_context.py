"""What a job function sees of its run: the :class:`RunContext`, and the trace id that ties
the run's log lines together.

The trace id lives in a :class:`~contextvars.ContextVar`, so every log record emitted while a
run is in progress (by the job, or by libraries it calls) can carry it: add
:class:`TraceIdFilter` to a handler and put ``%(trace_id)s`` in its format.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._records import TriggerKind

__all__ = ["RunContext", "TraceIdFilter", "current_run", "current_trace_id"]

_current_run: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar(
    "scheduler_run", default=None
)


def current_run() -> RunContext | None:
    """The run whose code is executing in this task, if any."""
    return _current_run.get()


def current_trace_id() -> str | None:
    """The trace id of the run executing in this task, if any."""
    run = _current_run.get()
    return None if run is None else run.trace_id


class TraceIdFilter(logging.Filter):
    """Adds ``record.trace_id`` (the current run's, or ``"-"``) to every log record.

    Attach it to a handler, not a logger, so that records from child loggers get it too.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "trace_id"):
            record.trace_id = current_trace_id() or "-"
        return True


class RunContext:
    """What a job function receives: who it is, why it runs, and where to resume.

    :param name: the job's name
    :param trigger: what started the run
    :param trace_id: the id in every log line of the run
    :param scheduled_at: the fire time (``None`` for a manual run)
    :param cursor: where the previous run stopped, if it failed or died; else ``None``
    :param fence: the fencing token of this acquisition of the job's lock (``None`` without a
        lock); pass it along with writes so that storage can reject a stale holder
    """

    __slots__ = (
        "_save",
        "cursor",
        "fence",
        "name",
        "run_id",
        "scheduled_at",
        "trace_id",
        "trigger",
    )

    def __init__(
        self,
        *,
        name: str,
        trigger: TriggerKind,
        run_id: str,
        trace_id: str,
        scheduled_at: datetime | None,
        cursor: Any,
        fence: int | None,
        save: Callable[[Any], Awaitable[None]],
    ) -> None:
        self.name = name
        self.trigger = trigger
        self.run_id = run_id
        self.trace_id = trace_id
        self.scheduled_at = scheduled_at
        self.cursor = cursor
        self.fence = fence
        self._save = save

    def __repr__(self) -> str:
        return (
            f"RunContext(name={self.name!r}, trigger={self.trigger!r}, "
            f"trace_id={self.trace_id!r}, cursor={self.cursor!r}, fence={self.fence!r})"
        )

    async def checkpoint(self, cursor: Any) -> None:
        """Persist ``cursor`` in the run record; a retry after a failure starts from it.

        :param cursor: a JSON-serialisable value (an id, an offset, a timestamp string)
        """
        self.cursor = cursor
        await self._save(cursor)
