"""Lifecycle events the durable transport emits on its bus (declared in the default registry).

A bus with its own registry gets them through :func:`register_durable_events`. The alarms
(``group-recreated``, ``entries-lost``, ``stream-capped``) are also logged at ERROR;
``backlog-high`` at WARNING, once per episode, and ``backlog-normal`` ends the episode.
"""

from __future__ import annotations

from eventbus._events import Event, EventRegistry

__all__ = [
    "DURABLE_EVENTS",
    "BacklogHigh",
    "BacklogNormal",
    "DeadLettered",
    "DurableStarted",
    "DurableStopped",
    "EntriesLost",
    "GroupRecreated",
    "StreamCapped",
    "register_durable_events",
]


class DurableStarted(Event, name="eventbus.durable.started"):
    """The transport started: the relay, the consumers of ``groups`` and the janitor run."""

    service: str
    consumer: str
    groups: tuple[str, ...]


class DurableStopped(Event, name="eventbus.durable.stopped"):
    """The transport stopped; entries still in flight stay pending for another consumer."""

    service: str
    consumer: str
    unfinished: int


class DeadLettered(Event, name="eventbus.durable.dead-lettered"):
    """An event reached ``max_deliveries`` in ``group`` and went to the dead-letter stream
    (and to the failure table as ``dead``)."""

    event_name: str
    event_id: str
    group: str
    deliveries: int
    error: str
    failure_id: str


class GroupRecreated(Event, name="eventbus.durable.group-recreated"):
    """Alarm: a consumer group was missing (the stream flushed or evicted, or Redis restarted
    without persistence) and was created again at id 0; events may be lost: see
    ``republish(since=...)``."""

    stream: str
    group: str
    error: str


class EntriesLost(Event, name="eventbus.durable.entries-lost"):
    """Alarm: pending entries of ``group`` were deleted from the stream before they were
    processed (trimmed by a MAXLEN cap, or XDEL by hand)."""

    stream: str
    group: str
    entry_ids: tuple[str, ...]


class StreamCapped(Event, name="eventbus.durable.stream-capped"):
    """Alarm: a stream reached its MAXLEN cap, so its oldest entries are being trimmed whether
    or not every group has read them."""

    stream: str
    maxlen: int


class BacklogHigh(Event, name="eventbus.durable.backlog-high"):
    """Backpressure: the outbox holds more than ``bound`` unpublished rows (the relays fall
    behind the publishers, or Redis is unreachable). Once per episode and relay; no publish
    is refused: a publisher that can wait may slow down."""

    backlog: int
    bound: int
    oldest_age: float | None  #: seconds since the oldest unpublished row was written


class BacklogNormal(Event, name="eventbus.durable.backlog-normal"):
    """The episode of ``backlog-high`` is over: the backlog is back to half ``bound`` or less."""

    backlog: int
    bound: int
    seconds: float  #: how long the episode lasted


DURABLE_EVENTS: tuple[type[Event], ...] = (
    DurableStarted,
    DurableStopped,
    DeadLettered,
    GroupRecreated,
    EntriesLost,
    StreamCapped,
    BacklogHigh,
    BacklogNormal,
)


def register_durable_events(registry: EventRegistry) -> list[type[Event]]:
    """Declare the lifecycle events in *registry*; safe to repeat.

    :return: the events left out because *registry* declares their name as another class
    """
    return registry.declare(DURABLE_EVENTS)
