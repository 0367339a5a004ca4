"""Handing events back: after Redis lost data (``republish``), to a group that came after
its events were trimmed (``backfill``), dead letters to their group (``replay``). One failure
row's event goes back to its group in :mod:`~eventbus.durable._redeliver`.

A group's redelivery stream (``...:re:<group>``) is read by that group's consumers only, so
an event handed back reaches the listener that gave up on it, never the other groups. Nothing
here needs the transport running: an operator's command does it from anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ._registry import check_group, create_group, register_group
from ._runtime import Runtime, logger, utcnow
from ._status import dead_letters

__all__ = ["backfill", "replay", "republish"]

#: outbox rows per republish step (one DEL, one UPDATE)
REPUBLISH_BATCH = 500


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def republish(rt: Runtime, *, since: datetime, events: Sequence[str] | None) -> int:
    """Make every retained outbox row published at or after *since* unpublished again, so
    that the relays add it again: after a restart without persistence, a failover, a flush.
    Listeners taking ``tx`` skip what they processed already; others may see an event twice.

    In batches, each in this order: delete the rows' publish keys, *then* reset the rows. A
    relay can claim a row only once it is reset, and then finds no key: it adds the event.
    (The other order let a relay claim a reset row, find its old key, and mark it published
    without adding it.)

    :return: how many rows the relays will publish again
    """
    total, after = 0, 0
    while rows := await rt.outbox.published_since(
        rt.engine, since=since, names=events, after=after, limit=REPUBLISH_BATCH
    ):
        await rt.client.delete(*(rt.keys.published(name, eid) for _, name, eid in rows))
        await rt.fault("republish")
        total += await rt.outbox.unpublish(rt.engine, ids=[r[0] for r in rows], now=utcnow())
        after = rows[-1][0]
    logger.warning("republish: %d outbox rows since %s will be published again", total, since)
    return total


async def backfill(rt: Runtime, event: str, group: str, *, since: datetime) -> int:
    """Hand *group* alone the events of *event* published since *since* that its stream no
    longer holds (trimmed before the group existed), from the retained outbox rows, through
    the group's redelivery stream. Other groups see nothing again (a republish would send
    them everything twice); the group is registered, so the janitor waits for it.

    :return: how many events were handed over
    """
    check_group(group)
    await register_group(rt, event, group)
    restream = rt.keys.redeliver(event, group)
    await create_group(rt.client, restream, group, "0")
    first = await _first_id(rt, rt.keys.stream(event))
    total, after = 0, 0
    while rows := await rt.outbox.published_envelopes(
        rt.engine, name=event, since=since, after=after, limit=REPUBLISH_BATCH
    ):
        after = rows[-1][0]
        lost = [env for _, sid, env in rows if first is None or _older(sid, first)]
        if lost:
            async with rt.client.pipeline(transaction=False) as pipe:
                for env in lost:
                    pipe.xadd(restream, env.fields())  # type: ignore[arg-type]
                await pipe.execute()
        total += len(lost)
    logger.warning("backfill: %d events of %r handed to group %r", total, event, group)
    return total


async def _first_id(rt: Runtime, stream: str) -> tuple[int, int] | None:
    found = await rt.client.xrange(stream, count=1)
    return _id(_text(found[0][0])) if found else None


def _id(text: str) -> tuple[int, int]:
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def _older(stream_id: str | None, first: tuple[int, int]) -> bool:
    return stream_id is None or _id(stream_id) < first


async def replay(
    rt: Runtime, event: str, *, group: str | None = None, ids: Sequence[str] | None = None
) -> list[str]:
    """Move dead letters of *event* to the redelivery stream of the group that gave up on
    each (the ``REDELIVER`` script); return the new entry ids. Their failure rows become
    ``resolved`` when a consumer succeeds.

    :param group: only dead letters of this group
    :param ids: only these dead-letter ids (default: all that match)
    """
    letters = await dead_letters(rt.client, rt.keys, event, group=group, limit=None)
    if ids is not None:
        wanted = set(ids)
        letters = [d for d in letters if d.dead_id in wanted]
    by_group: dict[str, list[str]] = {}
    for letter in letters:
        by_group.setdefault(letter.group, []).append(letter.dead_id)
    out: list[str] = []
    for gname, dead_ids in by_group.items():
        reply = await rt.scripts.redeliver(
            keys=[rt.keys.dead(event), rt.keys.redeliver(event, gname)],
            args=[gname, 0, *dead_ids],
        )
        out += [_text(r) for r in reply if r]
    return out
