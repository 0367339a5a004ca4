"""Cron expressions, jobs and the loop that runs them, in the same process as the bus.

The implementation lives in underscore modules; this module only re-exports it.
"""

from __future__ import annotations

from ._cron import CronExpression as CronExpression
from ._cron import min_interval as min_interval
from ._cron import validate_cron as validate_cron
from ._exceptions import CronSyntaxError as CronSyntaxError
from ._exceptions import JobLookupError as JobLookupError
from ._exceptions import LockLostError as LockLostError
from ._exceptions import SchedulerError as SchedulerError

__all__ = [
    "CronExpression",
    "CronSyntaxError",
    "JobLookupError",
    "LockLostError",
    "SchedulerError",
    "min_interval",
    "validate_cron",
]

# Show the public path in reprs and tracebacks: scheduler.CronExpression, not scheduler._cron.
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith(f"{__name__}._"):
        _obj.__module__ = __name__
del _name, _obj
