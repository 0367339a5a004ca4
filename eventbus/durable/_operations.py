"""What operators do with the streams, whether or not the transport runs: status, dead
letters, a janitor round, republish, backfill, replay, redeliver, redrive, an early resume of
a paused group, and the groups a stream is kept for. :class:`~eventbus.durable.RedisStreams`
offers them as its methods."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from .._events import Event
from .._failures import FailureRecord
from ._handback import backfill, replay, republish
from ._keys import StreamKeys, validate_part
from ._pauses import request_resume
from ._redeliver import redeliver, redrive
from ._registry import forget_group, register_group
from ._relay import Relay
from ._runtime import AnyRedis, Runtime
from ._status import DeadLetter, StreamStatus, dead_letters, discover_events, stream_status
from ._tasks import Tasks

__all__ = ["StreamOperations"]


class StreamOperations:
    """The operators' methods of :class:`~eventbus.durable.RedisStreams` (its base)."""

    rt: Runtime
    client: AnyRedis
    keys: StreamKeys
    relay: Relay | None
    _tasks: Tasks

    async def status(self, events: Sequence[str] | None = None) -> list[StreamStatus]:
        """Length, groups (pending, lag) and dead letters of each event's stream (default:
        every stream under the prefix)."""
        names = (
            list(events) if events is not None else await discover_events(self.client, self.keys)
        )
        return [await stream_status(self.client, self.keys, n) for n in names]

    async def dead_letters(
        self, event: str, *, group: str | None = None, limit: int | None = 100
    ) -> list[DeadLetter]:
        """Dead letters of *event*, oldest first (of one *group* if given): what
        :meth:`replay` hands back, by their ``dead_id``."""
        return await dead_letters(self.client, self.keys, event, group=group, limit=limit)

    async def sweep(self, events: Sequence[str] | None = None) -> int:
        """Run the janitor once now, whoever's turn it is, over the streams of *events*
        (default: this process's listeners'); return the entries trimmed."""
        return await self._tasks.janitor.sweep(events, force=True)

    async def republish(self, *, since: datetime, events: Sequence[str] | None = None) -> int:
        """Publish again every retained outbox row published at or after *since*; see
        :func:`~eventbus.durable._handback.republish`."""
        n = await republish(self.rt, since=since, events=events)
        if self.relay is not None:
            self.relay.wake()
        return n

    async def declare_group(self, event: str | type[Event], group: str) -> bool:
        """Register *group* (``service:listener``) for *event*'s stream before its service
        first runs (a deployment step): until it exists, the janitor keeps ``retention`` of
        entries for it. Return whether it was new. See :mod:`~eventbus.durable._registry`."""
        return await register_group(self.rt, _event_name(event), group)

    async def forget_group(self, event: str | type[Event], group: str) -> bool:
        """Retire *group*: off the registry, destroyed on the stream, its redelivery stream
        deleted (its pending entries with it). Return whether there was anything to forget."""
        return await forget_group(self.rt, _event_name(event), group)

    async def backfill(self, event: str | type[Event], group: str, *, since: datetime) -> int:
        """Hand *group* alone the events since *since* its stream no longer holds, from the
        retained outbox rows; see :func:`~eventbus.durable._handback.backfill`."""
        return await backfill(self.rt, _event_name(event), group, since=since)

    async def replay(
        self, event: str, *, group: str | None = None, ids: Sequence[str] | None = None
    ) -> list[str]:
        """Hand dead letters back to their group; see :func:`~eventbus.durable._handback.replay`."""
        return await replay(self.rt, event, group=group, ids=ids)

    async def resume_group(self, event: str | type[Event], group: str) -> int:
        """Resume *group* now where its kill switch paused it: in this process at once, in
        the others at their next check (about a second). Return how many paused consumers
        were told (0: it was paused nowhere)."""
        name = _event_name(event)
        told = set()
        for consumer in self._tasks.consumers:
            g = consumer.group
            if g.name == group and g.listener.event_name == name and g.paused:
                g.resume_asked.set()
                told.add(self.rt.consumer)
        told.update(await request_resume(self.client, self.keys, name, group))
        return len(told)

    async def redeliver(self, failure: FailureRecord) -> str:
        """Hand one dead durable failure back to its group alone (``failures retry``); see
        :func:`~eventbus.durable._redeliver.redeliver`."""
        return await redeliver(self.rt, failure)

    async def redrive(self, failure: FailureRecord, *, force: bool = False) -> str:
        """Hand a pending durable failure whose redelivery was lost back once more
        (``streams redrive``); see :func:`~eventbus.durable._redeliver.redrive`."""
        return await redrive(self.rt, failure, force=force)


def _event_name(event: str | type[Event]) -> str:
    name = event if isinstance(event, str) else getattr(event, "__event_name__", "")
    return validate_part("event name", name)
