"""Triggers: when a job fires, as pure functions of time.

A trigger answers three questions, all from *scheduled* times (never from when a run ended,
so a schedule does not drift): the first fire after the scheduler starts, the fire after a
given one, and the first fire strictly after "now" (used to skip over missed fires).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Protocol
from zoneinfo import ZoneInfo

from ._cron import CronExpression
from ._records import TriggerKind

__all__ = [
    "AnyTrigger",
    "AtTrigger",
    "CronTrigger",
    "IntervalTrigger",
    "TimeoutTrigger",
    "Trigger",
]


class Trigger(Protocol):
    """**Protocol:** the fire times of one job; aware datetimes in, aware datetimes out."""

    @property
    def kind(self) -> TriggerKind:
        """What the run table's ``trigger`` column says of its fires."""
        ...

    @property
    def schedule(self) -> str:
        """The schedule as a person reads it: the expression, ``every 10s``, an instant."""
        ...

    @property
    def zone(self) -> tzinfo:
        """The zone its times are read in."""
        ...

    @property
    def tz(self) -> str:
        """The name of :attr:`zone`."""
        ...

    def first(self, start: datetime) -> datetime | None:
        """The first fire once a scheduler starts at ``start`` (``None``: never)."""
        ...

    def next(self, previous: datetime) -> datetime | None:
        """The fire after ``previous``, one of this series (``None``: no more)."""
        ...

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

    @property
    def schedule(self) -> str:
        return self.cron.expr

    @property
    def zone(self) -> tzinfo:
        return self.cron.tz

    @property
    def tz(self) -> str:
        return self.cron.tz.key

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

    @property
    def schedule(self) -> str:
        return f"every {self.seconds:g}s"

    @property
    def zone(self) -> tzinfo:
        return UTC

    @property
    def tz(self) -> str:
        return "UTC"

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

    @property
    def schedule(self) -> str:
        return f"once, {self.seconds:g}s after start"

    @property
    def zone(self) -> tzinfo:
        return UTC

    @property
    def tz(self) -> str:
        return "UTC"

    def first(self, start: datetime) -> datetime | None:
        return start + timedelta(seconds=self.seconds)

    def next(self, previous: datetime) -> datetime | None:
        return None

    def after(self, previous: datetime, now: datetime) -> datetime | None:
        return None


@dataclass(frozen=True, slots=True)
class AtTrigger:
    """Fires once, at an instant (an aware datetime), whenever the scheduler started.

    An instant already past at start does not fire from the loop: whether it runs late is
    the job's ``catch_up`` policy, checked against the run table (it runs at most once).
    """

    when: datetime

    def __post_init__(self) -> None:
        if self.when.tzinfo is None or self.when.utcoffset() is None:
            raise ValueError(
                f"when={self.when!r} is naive; pass an aware datetime "
                "(e.g. datetime(..., tzinfo=ZoneInfo('Europe/Paris')))"
            )

    @property
    def kind(self) -> TriggerKind:
        return "at"

    @property
    def schedule(self) -> str:
        return f"at {self.when.isoformat()}"

    @property
    def zone(self) -> tzinfo:
        assert self.when.tzinfo is not None
        return self.when.tzinfo

    @property
    def tz(self) -> str:
        zone = self.zone
        return zone.key if isinstance(zone, ZoneInfo) else str(zone)

    @property
    def instant(self) -> datetime:
        """``when`` in UTC."""
        return self.when.astimezone(UTC)

    def first(self, start: datetime) -> datetime | None:
        return self.instant if self.instant > start else None

    def next(self, previous: datetime) -> datetime | None:
        return None

    def after(self, previous: datetime, now: datetime) -> datetime | None:
        return None


AnyTrigger = CronTrigger | IntervalTrigger | TimeoutTrigger | AtTrigger
