"""Lifecycle events the scheduler emits on the bus, declared in the default registry.

A bus with its own registry gets them through :func:`register_events`: call it yourself to
subscribe before a scheduler exists; the scheduler calls it again when built. If that registry
already holds a *different* class under one of these names, the scheduler does not emit that
event (logged once at DEBUG) rather than fail at start.
"""

from __future__ import annotations

import logging
from datetime import datetime

from eventbus import Event, EventBus, EventRegistry

__all__ = [
    "SCHEDULER_EVENTS",
    "BusEmitter",
    "LockLost",
    "RunFailed",
    "RunSkipped",
    "RunStarted",
    "RunSucceeded",
    "register_events",
]

logger = logging.getLogger("scheduler")


class RunStarted(Event, name="scheduler.run.started"):
    """A run of ``job`` began (it holds the lock, if there is one)."""

    job: str
    run_id: str
    trigger: str
    trace_id: str
    scheduled_at: datetime | None
    replica: str


class RunSucceeded(Event, name="scheduler.run.succeeded"):
    """A run returned normally."""

    job: str
    run_id: str
    trace_id: str
    duration: float


class RunFailed(Event, name="scheduler.run.failed"):
    """A run raised, or was cancelled: by ``remove(cancel=True)``, by losing its lock, at
    shutdown, or with the caller of ``trigger()``."""

    job: str
    run_id: str
    trace_id: str
    error: str


class RunSkipped(Event, name="scheduler.run.skipped"):
    """A fire did not run: ``reason`` is ``running``, ``locked``, ``claimed``, ``missed``,
    ``lock-error``, ``removed``, ``paused`` or ``stopped`` (the scheduler stopped while the
    fire waited out its jitter)."""

    job: str
    run_id: str
    trigger: str
    scheduled_at: datetime | None
    reason: str


class LockLost(Event, name="scheduler.lock.lost"):
    """Alarm: a run's lock expired or was taken while it ran; another replica may have run."""

    job: str
    run_id: str
    trace_id: str
    detail: str


SCHEDULER_EVENTS: tuple[type[Event], ...] = (
    RunStarted,
    RunSucceeded,
    RunFailed,
    RunSkipped,
    LockLost,
)


def register_events(registry: EventRegistry) -> list[type[Event]]:
    """Declare the scheduler's lifecycle events (``scheduler.run.*``, ``scheduler.lock.lost``)
    in ``registry``, so that a bus built on it can subscribe to them before any scheduler exists.

    Safe to repeat. A name that ``registry`` already declares as a *different* class is left
    alone rather than raise; a scheduler on a bus with that registry does not emit that event.

    :param registry: the bus's registry (the default registry declares them already)
    :return: the events left out because their name was taken (normally none)
    """
    return registry.declare(SCHEDULER_EVENTS)


class BusEmitter:
    """Emits the scheduler's events on ``bus`` (if any), leaving out those whose name the
    bus's registry declares as another class; never raises into the scheduler."""

    def __init__(self, bus: EventBus | None) -> None:
        self.bus = bus
        self._muted: set[type[Event]] = set()
        if bus is not None:
            for cls in register_events(bus.registry):
                logger.debug("bus registry declares %r differently; not emitting it", cls)
                self._muted.add(cls)

    def emit(self, event: Event) -> None:
        if self.bus is None or type(event) in self._muted:
            return
        try:
            self.bus.emit(event)
        except Exception:
            logger.warning("could not emit %r on the bus", event.event_name, exc_info=True)
