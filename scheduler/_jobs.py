"""Job definitions and their triggers: when a job fires, as pure functions of time.

A trigger answers three questions, all from *scheduled* times (never from when a run ended,
so a schedule does not drift): the first fire after the scheduler starts, the fire after a
given one, and the first fire strictly after "now" (used to skip over missed fires).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from ._context import RunContext
from ._cron import CronExpression
from ._records import TriggerKind

__all__ = [
    "CronTrigger",
    "IntervalTrigger",
    "Job",
    "JobDefinition",
    "JobFunction",
    "TimeoutTrigger",
    "Trigger",
]

JobFunction = Callable[[RunContext], Awaitable[Any]]


class Trigger(Protocol):
    """**Protocol:** the fire times of one job; aware datetimes in, aware datetimes out."""

    @property
    def kind(self) -> TriggerKind: ...

    def first(self, start: datetime) -> datetime | None: ...

    def next(self, previous: datetime) -> datetime | None: ...

    def after(self, previous: datetime, now: datetime) -> datetime | None:
        """The first fire of this series strictly after ``now`` (``previous`` is one of it)."""
        ...


@dataclass(frozen=True, slots=True)
class CronTrigger:
    """Fires at the times of a cron expression in its zone."""

    cron: CronExpression

    @property
    def kind(self) -> TriggerKind:
        return "cron"

    def first(self, start: datetime) -> datetime | None:
        return self.cron.next_after(start)

    def next(self, previous: datetime) -> datetime | None:
        return self.cron.next_after(previous)

    def after(self, previous: datetime, now: datetime) -> datetime | None:
        return self.cron.next_after(now)


@dataclass(frozen=True, slots=True)
class IntervalTrigger:
    """Fires every ``seconds``, the first time one interval after the scheduler starts."""

    seconds: float

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise ValueError(f"seconds={self.seconds!r} must be a positive number of seconds")

    @property
    def kind(self) -> TriggerKind:
        return "interval"

    def first(self, start: datetime) -> datetime | None:
        return start + timedelta(seconds=self.seconds)

    def next(self, previous: datetime) -> datetime | None:
        return previous + timedelta(seconds=self.seconds)

    def after(self, previous: datetime, now: datetime) -> datetime | None:
        # Stay on the grid of the original schedule: previous + k * interval.
        steps = math.floor((now - previous).total_seconds() / self.seconds) + 1
        return previous + timedelta(seconds=self.seconds * max(steps, 1))


@dataclass(frozen=True, slots=True)
class TimeoutTrigger:
    """Fires once, ``seconds`` after the scheduler starts (or after the job is added)."""

    seconds: float

    def __post_init__(self) -> None:
        if not self.seconds >= 0:
            raise ValueError(f"seconds={self.seconds!r} must be zero or more seconds")

    @property
    def kind(self) -> TriggerKind:
        return "timeout"

    def first(self, start: datetime) -> datetime | None:
        return start + timedelta(seconds=self.seconds)

    def next(self, previous: datetime) -> datetime | None:
        return None

    def after(self, previous: datetime, now: datetime) -> datetime | None:
        return None


@dataclass(slots=True, kw_only=True)
class Job:
    """A registered job: what to run, when, and under which lock options.

    :param name: unique within a scheduler; also the lock key and the run table's task_name
    :param fn: ``async def fn(run: RunContext)``
    :param trigger: when it fires
    :param wait_for_completion: skip (not queue) a fire while a run of this job is going
    :param lock_ttl: seconds the job's lock lives; a run longer than this loses it unless
        ``renew`` is set
    :param renew: extend the lock every ``lock_ttl / 3`` and cancel the run if that fails
    :param misfire_grace: seconds a fire may be late and still run (``None``: the
        scheduler's default)
    """

    name: str
    fn: JobFunction
    trigger: CronTrigger | IntervalTrigger | TimeoutTrigger
    wait_for_completion: bool = True
    lock_ttl: float = 300.0
    renew: bool = False
    misfire_grace: float | None = None
    generation: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a job needs a non-empty name=")
        if not self.lock_ttl > 0:
            raise ValueError(f"lock_ttl={self.lock_ttl!r} must be a positive number of seconds")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobDefinition:
    """A job kept as data (a user's reminder), loaded from a job table at start.

    :param name: the job's name (``"reminder:42"``)
    :param expr: a cron expression, held to the scheduler's minimum interval
    :param tz: IANA zone the expression is read in
    :param enabled: disabled definitions are not registered
    :param payload: free text (JSON) for the job function to interpret
    """

    name: str
    expr: str
    tz: str = "UTC"
    enabled: bool = True
    payload: str | None = None
