"""One durable failure row's event back to the group that gave up on it: ``redeliver`` for a
dead row (what ``failures retry`` does), ``redrive`` for a pending row whose redelivery was
lost (``streams redrive``).

The event goes to the group's redelivery stream (``...:re:<group>``), read by that group's
consumers only, with the ``dead_*`` fields that let a consumer resolve the row when the event
finally succeeds. The row is ``pending`` from the moment before the entry is added until a
consumer of the group succeeds (``resolved``) or the event dies again (``dead``, attempts
added up). Nothing here needs the transport running.
"""

from __future__ import annotations

from typing import Any

from redis.exceptions import ResponseError
from sqlalchemy.exc import SQLAlchemyError

from .._failures import FailureRecord, FailureStatus, safe_str
from ._envelope import DeadInfo, Envelope, raw_value, text_fields
from ._link import DurableLink, link_of
from ._registry import create_group
from ._runtime import Runtime, logger
from ._status import DeadLetter, dead_letters

__all__ = ["redeliver", "redrive"]

CHUNK = 500  # redelivery stream entries per XRANGE


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def redeliver(rt: Runtime, failure: FailureRecord) -> str:
    """Hand a dead durable failure back to its group alone, with a fresh delivery count; its
    dead letter is removed. Return the new entry's id.

    The envelope is the original one, as the dead letter kept it; without the dead letter
    (trimmed by its cap, deleted), the retained outbox row's; without either, what the
    failure row holds (ids, payload, ``seq`` and time; not the aggregate key or headers).

    :raises ValueError: if *failure* is not a dead durable failure
    """
    link = link_of(failure)
    if failure.status is not FailureStatus.DEAD or link is None:
        raise ValueError(
            f"failure {failure.id!r} is not a dead durable failure (status "
            f"{failure.status.value!r}); in-process failures are retried by retry_failures()"
        )
    return await _hand_back(rt, failure, link)


async def redrive(rt: Runtime, failure: FailureRecord, *, force: bool = False) -> str:
    """Hand a *pending* durable failure back to its group once more: one redelivered before
    whose entry was lost (its stream trimmed or flushed, its group destroyed), so that no
    outcome will ever come. Return the new entry's id.

    :param force: hand it back even though its earlier redelivery is still on its way
        (pending in the group, or not read yet): the listener may then run twice
    :raises ValueError: if *failure* is not a pending durable failure, or (without *force*)
        its redelivery is still on its way, saying which entry
    """
    link = link_of(failure)
    if failure.status is not FailureStatus.PENDING or link is None:
        raise ValueError(
            f"failure {failure.id!r} is not a pending durable failure (status "
            f"{failure.status.value!r}); dead ones go back with failures retry (redeliver)"
        )
    if not force:
        on_its_way = await _on_its_way(rt, failure, link.group)
        if on_its_way is not None:
            raise ValueError(
                f"failure {failure.id!r} is still on its way to group {link.group!r}: "
                f"{on_its_way}; wait for its outcome, or force it (--force) and accept that "
                "the listener may run twice"
            )
    return await _hand_back(rt, failure, link)


async def _on_its_way(rt: Runtime, failure: FailureRecord, group: str) -> str | None:
    """How the failure's latest redelivery still stands to reach its group, if it does."""
    restream = rt.keys.redeliver(failure.event_name, group)
    try:
        groups = await rt.client.xinfo_groups(restream)
    except ResponseError:  # no redelivery stream: nothing on its way
        return None
    last = next((_text(g["last-delivered-id"]) for g in groups if _text(g["name"]) == group), None)
    cursor = "-"
    while batch := await rt.client.xrange(restream, min=cursor, max="+", count=CHUNK):
        for raw_id, raw in batch:
            if text_fields(raw or {}).get("dead_failure_id") != failure.id:
                continue
            entry_id = _text(raw_id)
            if last is None or _id(entry_id) > _id(last):
                return f"entry {entry_id} of {restream} is not read yet"
            pending = await rt.client.xpending_range(
                restream, group, min=entry_id, max=entry_id, count=1
            )
            if pending:
                return f"entry {entry_id} of {restream} is pending (in a listener call or a retry)"
        if len(batch) < CHUNK:
            break
        cursor = "(" + _text(batch[-1][0])
    return None


def _id(text: str) -> tuple[int, int]:
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


async def _hand_back(rt: Runtime, failure: FailureRecord, link: DurableLink) -> str:
    letters = await dead_letters(rt.client, rt.keys, failure.event_name, limit=None)
    mine = [d for d in letters if d.failure_id == failure.id]
    original = await _original_fields(rt, failure, link, mine[-1] if mine else None)
    dead = DeadInfo(
        group=link.group,
        entry_id=link.entry,
        deliveries=link.deliveries,
        error=f"{failure.error_type}: {failure.message}",
        failure_id=failure.id,
    )
    restream = rt.keys.redeliver(failure.event_name, link.group)
    await create_group(rt.client, restream, link.group, "0")
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
    logger.info("failure %s handed back to group %r as %s", failure.id, link.group, new_id)
    return new_id


async def _original_fields(
    rt: Runtime, failure: FailureRecord, link: DurableLink, letter: DeadLetter | None
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
            seq=link.seq or 0,
            occurred_at=link.occurred_at or failure.first_failed_at.isoformat(),
            causation_id=failure.causation_id,
            # recorded as the event's own id when the envelope had none
            correlation_id=None if correlation == failure.event_id else correlation,
            version=link.version or 1,
        )
    return env.fields()
