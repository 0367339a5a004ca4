"""What the scheduler's loop tests share: a fixed start time and a scheduler on a virtual
clock with an in-memory run store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler import MemoryRunStore, Scheduler, VirtualClock

__all__ = ["T0", "at", "make"]

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """*seconds* after :data:`T0`."""
    return T0 + timedelta(seconds=seconds)


def make(**options: Any) -> tuple[Scheduler, VirtualClock, MemoryRunStore]:
    """A scheduler on a virtual clock at :data:`T0` with a memory run store; *options* go to
    ``Scheduler``."""
    clock = VirtualClock(T0)
    runs = MemoryRunStore()
    return Scheduler(clock=clock, runs=runs, **options), clock, runs
