"""Cron expressions, jobs and the loop that runs them, in the same process as the bus.

The implementation lives in underscore modules; this module only re-exports it. The Redis and
SQL backends (``RedisLock``, ``SqlRunStore``, ``SqlJobStore``) are re-exported lazily:
``import scheduler`` loads neither redis nor SQLAlchemy, and the first access to one of those
names imports its ``scheduler.backends`` module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eventbus.lazy import lazy_exports, show_as_module

from ._context import RunContext as RunContext
from ._context import TraceIdFilter as TraceIdFilter
from ._context import current_run as current_run
from ._context import current_trace_id as current_trace_id
from ._core._clock import SystemClock as SystemClock
from ._core._clock import VirtualClock as VirtualClock
from ._core._loop import Scheduler as Scheduler
from ._core._loop import SchedulerStatistics as SchedulerStatistics
from ._core._registry import PauseScope as PauseScope
from ._cron import CronExpression as CronExpression
from ._cron import min_interval as min_interval
from ._cron import validate_cron as validate_cron
from ._events import LockLost as LockLost
from ._events import RunFailed as RunFailed
from ._events import RunSkipped as RunSkipped
from ._events import RunStarted as RunStarted
from ._events import RunSucceeded as RunSucceeded
from ._events import register_events as register_events
from ._exceptions import CronSyntaxError as CronSyntaxError
from ._exceptions import IntervalTooShortError as IntervalTooShortError
from ._exceptions import JobLookupError as JobLookupError
from ._exceptions import LockLostError as LockLostError
from ._exceptions import RunCancelledError as RunCancelledError
from ._exceptions import RunTimeoutError as RunTimeoutError
from ._exceptions import SchedulerError as SchedulerError
from ._jobs import Job as Job
from ._jobs import JobDefinition as JobDefinition
from ._jobs import JobOptions as JobOptions
from ._records import RunRecord as RunRecord
from ._triggers import AtTrigger as AtTrigger
from ._triggers import CronTrigger as CronTrigger
from ._triggers import IntervalTrigger as IntervalTrigger
from ._triggers import TimeoutTrigger as TimeoutTrigger
from .backends.local import LocalLock as LocalLock
from .backends.local import MemoryJobStore as MemoryJobStore
from .backends.local import MemoryRunStore as MemoryRunStore

if TYPE_CHECKING:
    __version__: str  # eventbus's: one distribution ships both packages
    from .backends.redis import RedisLock as RedisLock
    from .backends.sql import SqlJobStore as SqlJobStore
    from .backends.sql import SqlRunStore as SqlRunStore

__all__ = [
    "AtTrigger",
    "CronExpression",
    "CronSyntaxError",
    "CronTrigger",
    "IntervalTooShortError",
    "IntervalTrigger",
    "Job",
    "JobDefinition",
    "JobLookupError",
    "JobOptions",
    "LocalLock",
    "LockLost",
    "LockLostError",
    "MemoryJobStore",
    "MemoryRunStore",
    "PauseScope",
    "RedisLock",
    "RunCancelledError",
    "RunContext",
    "RunFailed",
    "RunRecord",
    "RunSkipped",
    "RunStarted",
    "RunSucceeded",
    "RunTimeoutError",
    "Scheduler",
    "SchedulerError",
    "SchedulerStatistics",
    "SqlJobStore",
    "SqlRunStore",
    "SystemClock",
    "TimeoutTrigger",
    "TraceIdFilter",
    "VirtualClock",
    "current_run",
    "current_trace_id",
    "min_interval",
    "register_events",
    "validate_cron",
]

# Names from backends whose client library is imported on first access, not here.
_LAZY = {
    "RedisLock": ".backends.redis",
    "SqlJobStore": ".backends.sql",
    "SqlRunStore": ".backends.sql",
}

if not TYPE_CHECKING:  # mypy sees the imports above; a __getattr__ would hide typos from it
    __getattr__, __dir__ = lazy_exports(__name__, {**_LAZY, "__version__": "eventbus"})


# Show the public path in reprs and tracebacks: scheduler.CronExpression, not scheduler._cron.
# The lazy names keep their public module path (scheduler.backends.redis).
show_as_module(__name__, *(globals()[name] for name in __all__ if name not in _LAZY))
