"""Handing events back: after Redis lost data (``republish``), to a group that came after
its events were trimmed (``backfill``), dead letters to their group (``replay``), one dead
failure to its group (``redeliver``, what ``failures retry`` does).

A group's redelivery stream (``...:re:<group>``) is read by that group's consumers only, so
an event handed back reaches the listener that gave up on it, never the other groups. Nothing
here needs the transport running: an operator's command does it from anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from .._failures import FailureRecord, FailureStatus, safe_str
from ._delivery import parse_note
from ._envelope import DeadInfo, Envelope, raw_value
from ._registry import check_group, create_group, register_group
from ._runtime import Runtime, logger, utcnow
from ._status import DeadLetter, dead_letters

__all__ = ["backfill", "redeliver", "replay", "republish"]

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


async def redeliver(rt: Runtime, failure: FailureRecord) -> str:
    """Hand one dead durable failure back to its group alone: the event goes to the group's
    redelivery stream with a fresh delivery count, and its dead letter is removed. The row is
    ``pending`` until a consumer of the group succeeds (``resolved``) or it dies again
    (``dead``, attempts added up).

    The envelope is the original one, as the dead letter kept it; without the dead letter
    (trimmed by its cap, deleted), the retained outbox row's; without either, what the
    failure row holds (ids, payload, ``seq`` and time; not the aggregate key or headers).

    :raises ValueError: if *failure* is not a dead durable failure
    """
    info = parse_note(failure.note)
    if failure.status is not FailureStatus.DEAD or info is None or "group" not in info:
        raise ValueError(
            f"failure {failure.id!r} is not a dead durable failure (status "
            f"{failure.status.value!r}); in-process failures are retried by retry_failures()"
        )
    group = info["group"]
    letters = await dead_letters(rt.client, rt.keys, failure.event_name, limit=None)
    mine = [d for d in letters if d.failure_id == failure.id]
    original = await _original_fields(rt, failure, info, mine[-1] if mine else None)
    dead = DeadInfo(
        group=group,
        entry_id=info.get("entry", ""),
        deliveries=int(info.get("deliveries", "0")),
        error=f"{failure.error_type}: {failure.message}",
        failure_id=failure.id,
    )
    restream = rt.keys.redeliver(failure.event_name, group)
    await create_group(rt.client, restream, group, "0")
    # Pending before the entry exists: a consumer may resolve the row as soon as it does.
    await rt.failures.update(failure.replace(status=FailureStatus.PENDING))
    fields: dict[Any, Any] = {raw_value(k): raw_value(v) for k, v in original.items()}
    fields |= dead.fields()
    try:
        new_id = _text(await rt.client.xadd(restream, fields))
    except BaseException:
        await rt.failures.update(failure)
        raise
    if mine:
        await rt.client.xdel(rt.keys.dead(failure.event_name), *(d.dead_id for d in mine))
    logger.info("dead failure %s redelivered to group %r as %s", failure.id, group, new_id)
    return new_id


async def _original_fields(
    rt: Runtime, failure: FailureRecord, note: dict[str, str], letter: DeadLetter | None
) -> dict[str, str]:
    """The event's envelope fields, from the best source left (see :func:`redeliver`)."""
    if letter is not None:
        return {k: v for k, v in letter.fields.items() if not k.startswith("dead_")}
    try:
        env = await rt.outbox.envelope(rt.engine, failure.event_id)
    except SQLAlchemyError as exc:  # no outbox here: the publisher's database is elsewhere
        logger.info("no outbox row for event %s (%s)", failure.event_id, safe_str(exc))
        env = None
    if env is None:
        correlation = failure.correlation_id
        env = Envelope(
            event_id=failure.event_id,
            name=failure.event_name,
            payload=failure.payload,
            seq=int(note.get("seq", "0")),
            occurred_at=note.get("occurred_at", failure.first_failed_at.isoformat()),
            causation_id=failure.causation_id,
            # recorded as the event's own id when the envelope had none
            correlation_id=None if correlation == failure.event_id else correlation,
        )
    return env.fields()
