"""Cron expressions, jobs and the loop that runs them, in the same process as the bus.

The implementation lives in underscore modules; this module only re-exports it.
"""

from __future__ import annotations

from ._clock import SystemClock as SystemClock
from ._clock import VirtualClock as VirtualClock
from ._context import RunContext as RunContext
from ._context import TraceIdFilter as TraceIdFilter
from ._context import current_run as current_run
from ._context import current_trace_id as current_trace_id
from ._cron import CronExpression as CronExpression
from ._cron import min_interval as min_interval
from ._cron import validate_cron as validate_cron
from ._events import LockLost as LockLost
from ._events import RunFailed as RunFailed
from ._events import RunSkipped as RunSkipped
from ._events import RunStarted as RunStarted
from ._events import RunSucceeded as RunSucceeded
from ._exceptions import CronSyntaxError as CronSyntaxError
from ._exceptions import IntervalTooShortError as IntervalTooShortError
from ._exceptions import JobLookupError as JobLookupError
from ._exceptions import LockLostError as LockLostError
from ._exceptions import RunCancelledError as RunCancelledError
from ._exceptions import SchedulerError as SchedulerError
from ._jobs import CronTrigger as CronTrigger
from ._jobs import IntervalTrigger as IntervalTrigger
from ._jobs import Job as Job
from ._jobs import JobDefinition as JobDefinition
from ._jobs import TimeoutTrigger as TimeoutTrigger
from ._loop import Scheduler as Scheduler
from ._loop import SchedulerStatistics as SchedulerStatistics
from ._records import RunRecord as RunRecord
from .backends.local import LocalLock as LocalLock
from .backends.local import MemoryRunStore as MemoryRunStore

__all__ = [
    "CronExpression",
    "CronSyntaxError",
    "CronTrigger",
    "IntervalTooShortError",
    "IntervalTrigger",
    "Job",
    "JobDefinition",
    "JobLookupError",
    "LocalLock",
    "LockLost",
    "LockLostError",
    "MemoryRunStore",
    "RunCancelledError",
    "RunContext",
    "RunFailed",
    "RunRecord",
    "RunSkipped",
    "RunStarted",
    "RunSucceeded",
    "Scheduler",
    "SchedulerError",
    "SchedulerStatistics",
    "SystemClock",
    "TimeoutTrigger",
    "TraceIdFilter",
    "VirtualClock",
    "current_run",
    "current_trace_id",
    "min_interval",
    "validate_cron",
]

# Show the public path in reprs and tracebacks: scheduler.CronExpression, not scheduler._cron.
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith(f"{__name__}._"):
        _obj.__module__ = __name__
del _name, _obj
