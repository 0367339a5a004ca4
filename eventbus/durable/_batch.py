"""Deliveries of one group taking ``tx``, several in one database transaction.

A listener taking ``tx`` commits once per event, and the commit is most of its cost (an fsync,
a round trip). When several entries wait in this process, they share one transaction: each
call runs inside its own ``SAVEPOINT`` together with its inbox row, so a call that raises
rolls back its own writes only (and goes the usual failure path: a retry, or its dead letter),
while the others commit together. Nothing is acknowledged before that commit; a commit that
fails fails every call of the batch. A process killed between the commit and the
acknowledgements is covered by the inbox: the entries come back, and find their rows.

Batches hold what is already queued (at most ``concurrency`` entries, read together) and
never wait for more; a lone entry takes the single-event path. On SQLite (one writer) the
transaction begins explicitly, so that the first ``SAVEPOINT`` does not start (and its
``RELEASE`` commit) a transaction of its own.
"""

from __future__ import annotations

from typing import Any

from .._codec import decode_payload
from .._events import Event
from ._context import Delivery, delivery_var
from ._delivery import failed, prepare, succeeded
from ._envelope import Envelope
from ._group import Entry, Group
from ._runtime import logger, utcnow

__all__ = ["deliver_batch"]


async def deliver_batch(group: Group, entries: list[Entry]) -> None:
    """Handle *entries* (of a group taking ``tx``) to their end in one transaction; never
    raises but for cancellation."""
    try:
        await _deliver_batch(group, entries)
    except Exception:  # a case not foreseen: the entries stay pending and come back
        logger.exception(
            "durable listener %r: a batch of %d entries could not be handled; they come back "
            "after the visibility time",
            group.listener.name,
            len(entries),
        )
    finally:
        for entry in entries:
            group.finish(entry)


async def _deliver_batch(group: Group, entries: list[Entry]) -> None:
    rt, listener = group.rt, group.listener
    ready: list[tuple[Entry, Envelope]] = []
    for entry in entries:
        env = await prepare(group, entry)
        if env is not None:
            ready.append((entry, env))
    if not ready:
        return
    outcomes: list[bool | Exception] = []
    events: list[Event | None] = []
    try:
        async with rt.engine.begin() as conn:
            if conn.dialect.name == "sqlite":
                await conn.exec_driver_sql("BEGIN")
            for entry, env in ready:
                event: Event | None = None
                token = delivery_var.set(
                    Delivery.of(
                        env, group=group.name, entry_id=entry.id, deliveries=entry.deliveries
                    )
                )
                try:
                    event = decode_payload(rt.registry, env.name, env.payload)
                    async with conn.begin_nested():
                        ran = await rt.inbox.claim(
                            conn, group=group.name, event_id=env.event_id, now=utcnow()
                        )
                        if ran:
                            call: Any = (
                                listener.fn(event, conn)
                                if listener.tx_positional
                                else listener.fn(event, tx=conn)
                            )
                            await call
                    outcomes.append(ran)
                except Exception as exc:
                    outcomes.append(exc)
                finally:
                    delivery_var.reset(token)
                events.append(event)
            await rt.fault("batch-committing")
    except Exception as exc:  # the commit (or the connection) failed: nothing was stored
        outcomes = [o if isinstance(o, Exception) else exc for o in outcomes]
        outcomes += [exc] * (len(ready) - len(outcomes))
        events += [None] * (len(ready) - len(events))
    await rt.fault("batch-committed")
    group.counters.batches += 1
    for (entry, env), event, outcome in zip(ready, events, outcomes, strict=True):
        if isinstance(outcome, Exception):
            await failed(group, entry, env, event, outcome)
        else:
            await succeeded(group, entry, env, outcome)
