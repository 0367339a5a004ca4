"""Exceptions raised by the scheduler.

The tree::

    SchedulerError
     ├── CronSyntaxError    (ValueError)   a cron expression that cannot be parsed or never fires
     ├── LockLostError                     a job's lock was gone or taken over while it ran
     ├── JobLookupError     (LookupError)  ``remove()`` or ``trigger()`` names no job
     ├── IntervalTooShortError (ValueError) a user-supplied schedule fires too often
     ├── RunCancelledError                 a run was cancelled by ``remove(name, cancel=True)``
     └── RunTimeoutError    (TimeoutError) a run went past its job's ``timeout=``

Messages are built here from data, so that raise sites pass values, not prose.
"""

from __future__ import annotations

__all__ = [
    "CronSyntaxError",
    "IntervalTooShortError",
    "JobLookupError",
    "LockLostError",
    "RunCancelledError",
    "RunTimeoutError",
    "SchedulerError",
]


class SchedulerError(Exception):
    """Root of every error the scheduler raises on purpose."""


class CronSyntaxError(SchedulerError, ValueError):
    """A cron expression was rejected.

    It subclasses :class:`ValueError` so that code validating user input with
    ``except ValueError`` keeps working.

    :param expr: the whole expression as given
    :param field: the field at fault (``"second"`` ... ``"day-of-week"``), or ``"expression"``
        when the expression as a whole is wrong (field count, unknown preset)
    :param token: the part of the field that was rejected
    :param reason: why, and the fix where there is one
    """

    def __init__(self, expr: str, field: str, token: str, reason: str) -> None:
        self.expr = expr
        self.field = field
        self.token = token
        self.reason = reason
        super().__init__(f"invalid cron expression {expr!r}: {field} field {token!r}: {reason}")

    def __reduce__(self) -> tuple[type[CronSyntaxError], tuple[str, str, str, str]]:
        return type(self), (self.expr, self.field, self.token, self.reason)


class LockLostError(SchedulerError):
    """A job's lock expired or was taken by another owner while the job ran.

    :param name: the lock's name
    :param detail: what was observed (``"released but already gone"``, ``"renewal failed"``)
    """

    def __init__(
        self, name: str, detail: str = "the lock was gone or held by another owner"
    ) -> None:
        self.name = name
        self.detail = detail
        super().__init__(f"lock {name!r} was lost: {detail}; another replica may run the job too")

    def __reduce__(self) -> tuple[type[LockLostError], tuple[str, str]]:
        return type(self), (self.name, self.detail)


class JobLookupError(SchedulerError, LookupError):
    """No job is registered under the given name.

    :param name: the name that was looked up
    """

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"no job named {name!r}")

    def __reduce__(self) -> tuple[type[JobLookupError], tuple[str]]:
        return type(self), (self.name,)

    def __str__(self) -> str:
        # LookupError subclasses such as KeyError repr their argument; keep the sentence.
        return str(self.args[0])


class IntervalTooShortError(SchedulerError, ValueError):
    """A user-supplied schedule would fire more often than the scheduler allows.

    :param name: the job's name
    :param expr: the expression as given
    :param interval: its shortest gap between fires, in seconds
    :param minimum: the floor, in seconds (``Scheduler(min_interval=...)``)
    """

    def __init__(self, name: str, expr: str, interval: float, minimum: float) -> None:
        self.name = name
        self.expr = expr
        self.interval = interval
        self.minimum = minimum
        super().__init__(
            f"job {name!r}: {expr!r} fires every {interval:g}s, more often than the minimum "
            f"of {minimum:g}s for user-supplied schedules; choose a sparser schedule"
        )

    def __reduce__(self) -> tuple[type[IntervalTooShortError], tuple[str, str, float, float]]:
        return type(self), (self.name, self.expr, self.interval, self.minimum)


class RunCancelledError(SchedulerError):
    """A run was cancelled on purpose while it ran (recorded as its error).

    :param name: the job's name
    :param reason: who cancelled it (``"job removed"``)
    """

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"run of job {name!r} was cancelled: {reason}")

    def __reduce__(self) -> tuple[type[RunCancelledError], tuple[str, str]]:
        return type(self), (self.name, self.reason)


class RunTimeoutError(SchedulerError, TimeoutError):
    """A run took longer than its job's ``timeout=`` and was cancelled (its recorded error).

    :param name: the job's name
    :param timeout: the limit, in seconds
    """

    def __init__(self, name: str, timeout: float) -> None:
        self.name = name
        self.timeout = timeout
        super().__init__(f"run of job {name!r} took longer than timeout={timeout:g}s; cancelled")

    def __reduce__(self) -> tuple[type[RunTimeoutError], tuple[str, float]]:
        return type(self), (self.name, self.timeout)
