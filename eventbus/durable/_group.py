"""The state one consumer group shares in this process: its streams, its entries in flight,
its counters, the acknowledgements waiting to be sent, and recovery from a missing group.

A group reads two streams: the event's stream, and its own redelivery stream, where replayed
dead letters and retried dead failures come back to this group only.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import time

import anyio
from redis.exceptions import ResponseError

from .._failures import safe_str
from ._events import GroupRecreated
from ._listener import DurableListener
from ._registry import create_group, register_group
from ._runtime import REDIS_ERRORS, Runtime, logger
from ._stats import GroupCounters, GroupStatistics

__all__ = ["Entry", "Group", "InFlight", "is_missing_group"]

#: pauses after a missing group: the first, the longest, and quiet seconds that reset them
NOGROUP_BACKOFF = 0.2
NOGROUP_MAX_BACKOFF = 10.0
NOGROUP_RESET = 60.0
#: the longest a shielded acknowledgement may hold up a stop
ACK_PATIENCE = 5.0
#: how long the ack task lets the acknowledgements of the next moments join its ``XACK``:
#: a caught-up consumer reads a few entries at a time, and one ``XACK`` per read was a
#: third of its round trips. A delayed ack only delays; a stop flushes what is queued.
ACK_LINGER = 0.005


def is_missing_group(exc: BaseException) -> bool:
    """A reply saying the stream or the group is gone (flushed, evicted, destroyed, a restart
    without persistence), as opposed to a server that is unreachable."""
    text = str(exc)
    return isinstance(exc, ResponseError) and (
        text.startswith("NOGROUP") or text.startswith("UNBLOCKED")
    )


@dataclasses.dataclass(slots=True)
class Entry:
    """One stream entry handed to this process, with Redis' delivery count for it."""

    stream: str
    id: str
    fields: dict[str, str]
    deliveries: int

    @property
    def key(self) -> tuple[str, str]:
        return (self.stream, self.id)


@dataclasses.dataclass(eq=False, slots=True)
class InFlight:
    """An entry whose listener call runs in this process; its lease is renewed until done."""

    entry: Entry
    lost: bool = False  #: another consumer reclaimed it (a renewal found it no longer ours)


class Group:
    """One durable listener's consumer group, as this process takes part in it."""

    def __init__(self, rt: Runtime, listener: DurableListener) -> None:
        self.rt = rt
        self.listener = listener
        self.name = listener.group
        self.stream = rt.keys.stream(listener.event_name)
        self.restream = rt.keys.redeliver(listener.event_name, listener.group)
        self.dead_stream = rt.keys.dead(listener.event_name)
        self.counters = GroupCounters()
        self.in_flight: dict[tuple[str, str], InFlight] = {}
        self._changed = anyio.Event()
        self._waiting = 0  # tasks in wait_finished(): finish() signals only when there are
        self._retries: list[float] = []  # monotonic times at which scheduled retries fall due
        self.reclaim_wakeup = anyio.Event()
        #: serialises lease renewals and retry scheduling (both set an entry's idle time)
        self.idle_lock = anyio.Lock()
        self._acks: dict[str, list[str]] = {}
        self._ack_ready = anyio.Event()
        self._nogroup_backoff = NOGROUP_BACKOFF
        self._last_nogroup = -NOGROUP_RESET
        self._recovering = anyio.Lock()
        #: event versions this group met and could not read (warned about once each)
        self.unreadable_versions: set[int] = set()

    def __repr__(self) -> str:
        return f"Group({self.name!r}, stream={self.stream!r})"

    @property
    def streams(self) -> tuple[str, str]:
        return (self.stream, self.restream)

    def statistics(self) -> GroupStatistics:
        c = self.counters
        return GroupStatistics(
            group=self.name,
            event=self.listener.event_name,
            listener=self.listener.name,
            in_flight=len(self.in_flight),
            **dataclasses.asdict(c),
        )

    def free_slots(self) -> int:
        return max(0, self.rt.options.concurrency - len(self.in_flight))

    def finish(self, entry: Entry) -> None:
        """Forget an entry this process no longer works on (done, retried later, or cancelled)."""
        if self.in_flight.pop(entry.key, None) is not None and self._waiting:
            self._changed.set()  # replaced by the next wait: not one new event per entry

    async def wait_finished(self) -> None:
        """Return after the next entry in flight finished (callers check again in a loop)."""
        if self._changed.is_set():
            self._changed = anyio.Event()
        self._waiting += 1
        try:
            await self._changed.wait()
        finally:
            self._waiting -= 1

    def retry_at(self, when: float) -> None:
        """Have the reclaim loop look again at *when* (monotonic): a retry falls due then."""
        heapq.heappush(self._retries, when)
        self.reclaim_wakeup.set()

    def next_retry(self) -> float | None:
        return self._retries[0] if self._retries else None

    def retries_due(self, now: float) -> None:
        """Forget the retry times up to *now* (the reclaim pass that follows takes them)."""
        while self._retries and self._retries[0] <= now:
            heapq.heappop(self._retries)

    # -- groups ----------------------------------------------------------------------------------

    async def ensure(self) -> None:
        """Create the group on both streams if missing (``MKSTREAM``; BUSYGROUP is fine).

        A new group starts at the stream's first entry (``0``), never at ``$``: events
        published before this service first started are delivered too; ``start="latest"``
        opts out. The redelivery stream always starts at ``0``. The group is registered for
        the stream first, so that the janitor keeps its entries should it vanish.
        """
        first = "0" if self.listener.start == "first" else "$"
        await register_group(self.rt, self.listener.event_name, self.name)
        for stream, start in ((self.stream, first), (self.restream, "0")):
            await create_group(self.rt.client, stream, self.name, start)

    async def recover(self, exc: BaseException) -> None:
        """The group (or its stream) is gone: recreate it at ``0``, raise the alarm, and pause
        with a growing backoff, so that a group that keeps vanishing cannot spin a loop.

        Several loops of the group may see the same loss; one recovers, the others wait.
        """
        if self._recovering.locked():
            async with self._recovering:
                return
        async with self._recovering:
            now = time.monotonic()
            if now - self._last_nogroup > NOGROUP_RESET:
                self._nogroup_backoff = NOGROUP_BACKOFF
            self._last_nogroup = now
            self.counters.recreated += 1
            logger.error(
                "consumer group %r of stream %r is missing (%s): recreating it at id 0. Entries "
                "added and not yet read before it vanished are lost to this group unless "
                "republished (RedisStreams.republish(since=...), 'streams republish')",
                self.name,
                self.stream,
                safe_str(exc),
            )
            self.rt.notify(GroupRecreated(stream=self.stream, group=self.name, error=str(exc)))
            try:
                await self.ensure()
            except REDIS_ERRORS as again:
                self.rt.log(
                    logging.ERROR,
                    ("recreate", self.name),
                    "could not recreate consumer group %r: %s",
                    self.name,
                    safe_str(again),
                )
            await anyio.sleep(self._nogroup_backoff)
            self._nogroup_backoff = min(self._nogroup_backoff * 2, NOGROUP_MAX_BACKOFF)

    # -- acknowledgements ------------------------------------------------------------------------

    def ack_later(self, entry: Entry) -> None:
        """Queue an acknowledgement; the ack task sends what accumulated in one ``XACK``."""
        self._acks.setdefault(entry.stream, []).append(entry.id)
        self._ack_ready.set()

    async def ack_loop(self) -> None:
        while True:
            await self._ack_ready.wait()
            await anyio.sleep(ACK_LINGER)
            await self.flush_acks()

    async def flush_acks(self) -> None:
        """Send the queued acknowledgements. One that fails leaves its entries pending: they
        come back after the visibility time, and the inbox (or the listener) absorbs them.

        Shielded (for a few seconds at most): a stop must not cancel acknowledgements of
        calls that succeeded."""
        self._ack_ready = anyio.Event()
        batch, self._acks = self._acks, {}
        for stream, ids in batch.items():
            try:
                with anyio.CancelScope(shield=True), anyio.move_on_after(ACK_PATIENCE):
                    await self.rt.client.xack(stream, self.name, *ids)
            except REDIS_ERRORS as exc:
                self.rt.log(
                    logging.WARNING,
                    ("ack", self.name),
                    "could not acknowledge %d entries of group %r (%s); they will be redelivered",
                    len(ids),
                    self.name,
                    safe_str(exc),
                )
