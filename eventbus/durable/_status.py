"""What operators ask of the streams: lengths and lag per group, pending entries, dead letters.

Read-only (``XINFO``, ``XPENDING``, ``XRANGE``, ``SCAN``); used by ``RedisStreams.status()``
and by ``python -m eventbus streams``. Needs no running transport.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from redis.exceptions import ResponseError

from ._envelope import DeadInfo, text_fields
from ._keys import StreamKeys
from ._pauses import PausedConsumer, paused_consumers
from ._registry import registered_groups
from ._runtime import AnyRedis

__all__ = [
    "DeadLetter",
    "GroupStatus",
    "PendingEntry",
    "StreamStatus",
    "dead_letters",
    "discover_events",
    "pending_entries",
    "stream_status",
]


@dataclasses.dataclass(frozen=True, slots=True)
class GroupStatus:
    """One consumer group of a stream, as ``XINFO GROUPS`` reports it."""

    name: str
    consumers: int
    pending: int  #: delivered and not acknowledged yet
    lag: int | None  #: entries not delivered yet (``None``: Redis cannot tell, after a trim)
    last_delivered: str
    redelivery_pending: int  #: entries of its redelivery stream not acknowledged yet
    #: the processes whose kill switch paused it now (each pauses on its own)
    paused: tuple[PausedConsumer, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class StreamStatus:
    """One event's stream: its length, groups, and dead letters."""

    event: str
    stream: str
    length: int
    first_id: str | None
    last_id: str | None
    groups: tuple[GroupStatus, ...]
    dead: int  #: entries in the dead-letter stream
    #: groups registered for the stream that do not exist on it (declared before their
    #: service's first start, or gone): the janitor keeps ``retention`` of entries for them
    absent_groups: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class PendingEntry:
    """One delivered, unacknowledged entry (``XPENDING``)."""

    stream: str
    group: str
    entry_id: str
    consumer: str
    idle_ms: int
    deliveries: int


@dataclasses.dataclass(frozen=True, slots=True)
class DeadLetter:
    """One entry of a dead-letter stream."""

    event: str
    dead_id: str
    event_id: str
    group: str
    entry_id: str
    deliveries: int
    error: str
    failure_id: str
    fields: dict[str, str]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def discover_events(client: AnyRedis, keys: StreamKeys) -> list[str]:
    """Names of the events that have a stream under this prefix (``SCAN ... TYPE stream``)."""
    names: set[str] = set()
    async for key in client.scan_iter(match=keys.scan_pattern(), count=1000, _type="stream"):
        parsed = keys.parse(key)
        if parsed is not None:
            names.add(parsed[0])
    return sorted(names)


async def stream_status(client: AnyRedis, keys: StreamKeys, name: str) -> StreamStatus:
    stream = keys.stream(name)
    registered = await registered_groups(client, keys, name)
    try:
        info = await client.xinfo_stream(stream)
    except ResponseError:  # no such key
        dead = await _length(client, keys.dead(name))
        return StreamStatus(name, stream, 0, None, None, (), dead, tuple(registered))
    groups = []
    pauses = await paused_consumers(client, keys, name)
    for g in await client.xinfo_groups(stream):
        gname = _text(g["name"])
        lag = g.get("lag")
        re_pending = 0
        try:
            for rg in await client.xinfo_groups(keys.redeliver(name, gname)):
                if _text(rg["name"]) == gname:
                    re_pending = int(rg["pending"])
        except ResponseError:
            pass
        groups.append(
            GroupStatus(
                name=gname,
                consumers=int(g["consumers"]),
                pending=int(g["pending"]),
                lag=None if lag is None else int(lag),
                last_delivered=_text(g["last-delivered-id"]),
                redelivery_pending=re_pending,
                paused=tuple(p for p in pauses if p.group == gname),
            )
        )
    first = info.get("first-entry")
    last = info.get("last-entry")
    return StreamStatus(
        event=name,
        stream=stream,
        length=int(info["length"]),
        first_id=_text(first[0]) if first else None,
        last_id=_text(last[0]) if last else None,
        groups=tuple(sorted(groups, key=lambda g: g.name)),
        dead=await _length(client, keys.dead(name)),
        absent_groups=tuple(r for r in registered if r not in {g.name for g in groups}),
    )


async def _length(client: AnyRedis, key: str) -> int:
    try:
        return int(await client.xlen(key))
    except ResponseError:
        return 0


async def pending_entries(
    client: AnyRedis, keys: StreamKeys, name: str, group: str, *, limit: int = 100
) -> list[PendingEntry]:
    """Pending entries of *group* on the event's stream and its redelivery stream."""
    out: list[PendingEntry] = []
    for stream in (keys.stream(name), keys.redeliver(name, group)):
        try:
            rows = await client.xpending_range(stream, group, min="-", max="+", count=limit)
        except ResponseError:  # no such group here
            continue
        out += [
            PendingEntry(
                stream=stream,
                group=group,
                entry_id=_text(r["message_id"]),
                consumer=_text(r["consumer"]),
                idle_ms=int(r["time_since_delivered"]),
                deliveries=int(r["times_delivered"]),
            )
            for r in rows
        ]
    return out[:limit]


async def dead_letters(
    client: AnyRedis,
    keys: StreamKeys,
    name: str,
    *,
    group: str | None = None,
    limit: int | None = 100,
    start: str = "-",
) -> list[DeadLetter]:
    """Dead letters of the event, oldest first, optionally of one group only."""
    out: list[DeadLetter] = []
    dead = keys.dead(name)
    cursor = start
    while limit is None or len(out) < limit:
        batch = await client.xrange(dead, min=cursor, max="+", count=500)
        if not batch:
            break
        for raw_id, raw in batch:
            fields = text_fields(raw or {})
            info = DeadInfo.from_fields(fields)
            if info is None or (group is not None and info.group != group):
                continue
            out.append(
                DeadLetter(
                    event=name,
                    dead_id=_text(raw_id),
                    event_id=fields.get("event_id", ""),
                    group=info.group,
                    entry_id=info.entry_id,
                    deliveries=info.deliveries,
                    error=info.error,
                    failure_id=info.failure_id,
                    fields=fields,
                )
            )
        if len(batch) < 500:
            break
        cursor = "(" + _text(batch[-1][0])
    return out if limit is None else out[:limit]
