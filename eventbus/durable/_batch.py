"""Deliveries of one group taking ``tx``, several in one database transaction.

A listener taking ``tx`` commits once per event, and each transaction costs statements of its
own (begin, the inbox row, commit) besides the listener's. When several entries wait in this
process, they share one transaction: one statement inserts every inbox row, then each
listener runs, then one commit. Nothing is acknowledged before that commit; a commit that
fails fails every call of the batch. A process killed between the commit and the
acknowledgements is covered by the inbox: the entries come back and find their rows.

When a call raises, or the transaction cannot commit (on PostgreSQL, a listener that caught a
database error inside ``tx`` leaves it aborted: the next call fails for it, and a COMMIT would
silently roll back), that transaction is rolled back and every call runs again in a
transaction where each has its own ``SAVEPOINT`` with its inbox row, checked before its
release: a failure rolls back only its own call's writes and is charged to that call (a
retry, or its dead letter), while the rest commit together. (A listener's effects outside
``tx`` may then happen twice, as with any redelivery; its writes through ``tx`` never do.)

Batches hold what is already queued (at most ``tx_batch`` of the entries read together) and
never wait for more; a lone entry takes the single-event path. On SQLite (one writer) the
transaction begins explicitly, so that a first ``SAVEPOINT`` does not start (and its
``RELEASE`` commit) a transaction of its own.
"""

from __future__ import annotations

import time

from sqlalchemy.ext.asyncio import AsyncConnection

from .._events import Event
from ._context import Delivery, delivery_var
from ._delivery import failed, ready, succeeded
from ._envelope import Envelope
from ._group import Entry, Group, note_call
from ._runtime import logger, utcnow
from ._tx import Patience, TransactionAbortedError, call_with_tx, ensure_alive

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


class _OneByOne(Exception):
    """The optimistic pass cannot commit (a call raised, or left the transaction aborted):
    it rolls back, and every call runs again in a savepoint of its own."""


#: one call of a batch: its entry, its envelope, its decoded event
Call = tuple[Entry, Envelope, Event]


async def _deliver_batch(group: Group, entries: list[Entry]) -> None:
    rt = group.rt
    calls: list[Call] = []
    for entry in entries:
        started = await ready(group, entry)
        if started is not None:
            calls.append((entry, *started))
    if not calls:
        return
    outcomes = await _together(group, calls)
    await rt.fault("batch-committed")
    group.counters.batches += 1
    for (entry, env, event), outcome in zip(calls, outcomes, strict=True):
        if isinstance(outcome, Exception):
            await failed(group, entry, env, event, outcome)
        else:
            await succeeded(group, entry, env, outcome)


async def _together(group: Group, calls: list[Call]) -> list[bool | Exception]:
    """Every call in one transaction, the inbox rows in one statement; when that cannot
    commit, :func:`_each_in_a_savepoint`."""
    rt = group.rt
    patience = Patience(rt.options.db_timeout)
    try:
        with patience.scope:
            async with rt.engine.begin() as conn:
                if conn.dialect.name not in ("postgresql", "sqlite"):
                    raise _OneByOne  # savepoints, one at a time
                ids = [env.event_id for _, env, _ in calls]
                fresh = await rt.inbox.claim_many(
                    conn, group=group.name, event_ids=ids, now=utcnow()
                )
                ran: list[bool | Exception] = []
                for entry, env, event in calls:
                    first = env.event_id in fresh
                    fresh.discard(env.event_id)  # the same event twice in a batch runs once
                    if first:
                        try:
                            with patience.paused():
                                await _call(group, conn, entry, env, event)
                        except Exception as exc:
                            raise _OneByOne from exc
                    ran.append(first)
                try:
                    await ensure_alive(conn, group.listener)
                except TransactionAbortedError as exc:
                    raise _OneByOne from exc
                await rt.fault("batch-committing")
                patience.restart()  # the commit
    except _OneByOne:
        return await _each_in_a_savepoint(group, calls)
    except Exception as exc:  # the commit (or the connection) failed: nothing was stored
        return [exc] * len(calls)
    if patience.scope.cancelled_caught:  # committed or not: a retry finds the inbox rows
        return [patience.error()] * len(calls)
    return ran


async def _each_in_a_savepoint(group: Group, calls: list[Call]) -> list[bool | Exception]:
    """Every call in one transaction, each in a savepoint with its inbox row."""
    rt = group.rt
    patience = Patience(rt.options.db_timeout)
    outcomes: list[bool | Exception] = []
    try:
        with patience.scope:
            async with rt.engine.begin() as conn:
                if conn.dialect.name == "sqlite":
                    await conn.exec_driver_sql("BEGIN")
                for entry, env, event in calls:
                    try:
                        async with conn.begin_nested():
                            ran = await rt.inbox.claim(
                                conn, group=group.name, event_id=env.event_id, now=utcnow()
                            )
                            if ran:
                                with patience.paused():
                                    await _call(group, conn, entry, env, event)
                                await ensure_alive(conn, group.listener)  # else roll it back
                        outcomes.append(ran)
                    except Exception as exc:
                        outcomes.append(exc)
                await rt.fault("batch-committing")
                patience.restart()  # the commit
    except Exception as exc:  # the commit (or the connection) failed: nothing was stored
        return _all_failed(outcomes, exc, len(calls))
    if patience.scope.cancelled_caught:  # committed or not: a retry finds the inbox rows
        return _all_failed(outcomes, patience.error(), len(calls))
    return outcomes


def _all_failed(
    outcomes: list[bool | Exception], exc: Exception, count: int
) -> list[bool | Exception]:
    """What nothing of was stored: each call failed, with its own error or *exc*."""
    lost: list[bool | Exception] = [exc] * (count - len(outcomes))
    return [o if isinstance(o, Exception) else exc for o in outcomes] + lost


async def _call(
    group: Group, conn: AsyncConnection, entry: Entry, env: Envelope, event: Event
) -> None:
    listener = group.listener
    token = delivery_var.set(
        Delivery.of(env, group=group.name, entry_id=entry.id, deliveries=entry.deliveries)
    )
    began = time.perf_counter()
    try:
        await call_with_tx(listener, event, conn)
    finally:
        delivery_var.reset(token)
        note_call(group, time.perf_counter() - began)
