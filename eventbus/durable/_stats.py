"""Counters of the durable transport and the frozen snapshots ``statistics()`` returns."""

from __future__ import annotations

import dataclasses

__all__ = [
    "DurableStatistics",
    "GroupCounters",
    "GroupStatistics",
    "JanitorStatistics",
    "RelayCounters",
    "RelayStatistics",
]


@dataclasses.dataclass(slots=True)
class RelayCounters:
    """Mutable counters of one relay; snapshot with :meth:`snapshot`."""

    published: int = 0
    deduplicated: int = 0
    batches: int = 0
    errors: int = 0
    leases_lost: int = 0
    capped: int = 0
    purged: int = 0
    backlog: int | None = None
    oldest_age: float | None = None
    backlog_high: bool = False

    def snapshot(self) -> RelayStatistics:
        return RelayStatistics(**dataclasses.asdict(self))


@dataclasses.dataclass(frozen=True, slots=True)
class RelayStatistics:
    """What the relay of this process did since it started."""

    published: int  #: entries added to streams
    deduplicated: int  #: rows found already added by their publish key (a relay crashed or stalled)
    batches: int  #: claims that found rows
    errors: int  #: batches that failed (Redis or the database); their rows were given back
    leases_lost: int  #: rows another relay claimed before this one could mark them
    capped: int  #: additions that found their stream at its MAXLEN cap (an alarm)
    purged: int  #: published rows deleted after the retention period
    backlog: int | None  #: unpublished rows at the last check (``None``: not checked yet)
    oldest_age: float | None  #: seconds since the oldest unpublished row was written
    #: the backlog passed ``backlog_high`` and has not come back to half of it since
    #: (backpressure: publishers commit faster than the relays publish, or Redis is down)
    backlog_high: bool


@dataclasses.dataclass(slots=True)
class GroupCounters:
    """Mutable counters of one consumer group in this process."""

    delivered: int = 0
    succeeded: int = 0
    failed: int = 0
    dead: int = 0
    reclaimed: int = 0
    duplicates: int = 0
    lost: int = 0
    recreated: int = 0
    leases_lost: int = 0
    redelivered: int = 0
    retried: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class GroupStatistics:
    """What this process's consumer of one group did since it started."""

    group: str
    event: str
    listener: str
    delivered: int  #: calls of the listener (first deliveries, retries and reclaims)
    succeeded: int  #: calls that returned (acknowledged)
    failed: int  #: calls that raised (each is retried, or dead-lettered at the last one)
    dead: int  #: entries moved to the dead-letter stream
    reclaimed: int  #: entries taken over after their visibility time (crashed consumers, retries)
    duplicates: int  #: events the inbox had already seen, acknowledged without a call
    lost: int  #: pending entries Redis reported deleted from the stream (an alarm)
    recreated: int  #: times the group was missing (NOGROUP) and created again (an alarm)
    leases_lost: int  #: in-flight entries another consumer reclaimed before they finished
    redelivered: int  #: entries read from the group's redelivery stream (replays, retries)
    retried: int  #: failed calls scheduled for another delivery after a growing delay
    in_flight: int  #: listener calls running now


@dataclasses.dataclass(frozen=True, slots=True)
class JanitorStatistics:
    """What the janitor of this process did since it started."""

    trimmed: int  #: stream entries trimmed (below what every group still needs)
    consumers_deleted: int  #: idle consumers with nothing pending, deleted


@dataclasses.dataclass(frozen=True, slots=True)
class DurableStatistics:
    """A snapshot of the durable transport of one process, for health checks and tests."""

    service: str
    consumer: str
    running: bool
    relay: RelayStatistics
    janitor: JanitorStatistics
    groups: tuple[GroupStatistics, ...]

    def group(self, name: str) -> GroupStatistics:
        """The statistics of the group of listener *name* (or of the group *name*).

        :raises KeyError: naming the listener, if it has no group here
        """
        for g in self.groups:
            if name in (g.listener, g.group):
                return g
        raise KeyError(f"no durable listener or group {name!r} in this process")
