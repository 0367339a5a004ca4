"""Deliveries of one group taking ``tx``, several in one database transaction.

A listener taking ``tx`` commits once per event, and each transaction costs statements of its
own (begin, the inbox row, commit) besides the listener's. When several entries wait in this
process, they share one transaction: one statement inserts every inbox row, then each
listener runs, then one commit. Nothing is acknowledged before that commit; a commit that
fails fails every call of the batch. A process killed between the commit and the
acknowledgements is covered by the inbox: the entries come back and find their rows.

When a call raises, that transaction is rolled back: the call is charged with its error (a
retry, or its dead letter), the calls before it run again and the calls after it run, in a
transaction where each has its own ``SAVEPOINT`` with its inbox row, checked before its
release, so that a further failure rolls back only its own call's writes while the rest
commit together. When the transaction cannot commit although no call raised (on PostgreSQL,
a listener that caught a database error inside ``tx`` leaves it aborted: a COMMIT would
silently roll back), every call runs again that way. (A listener's effects outside ``tx`` may
then happen twice, as with any redelivery; its writes through ``tx`` never do.)

A batch holds what was queued when its transaction slot came free (at most ``tx_batch``, fewer
as calls take longer: ``batch_limit``) and never waits for more: a lone entry is a batch of
one. Each slot keeps its connection between batches (``_held``). On SQLite (one writer) the
savepoint pass begins its transaction explicitly, so that a first ``SAVEPOINT`` does not start
(and its ``RELEASE`` commit) a transaction of its own.
"""

from __future__ import annotations

import time

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection

from .._events import Event
from ._context import Delivery, delivery_var
from ._delivery import failed, ready, succeeded
from ._envelope import Envelope
from ._group import Entry, Group, note_call
from ._held import HeldConnection, is_stale
from ._runtime import logger, utcnow
from ._tx import Patience, TransactionAbortedError, call_with_tx, ensure_alive

__all__ = ["deliver_batch"]


async def deliver_batch(group: Group, entries: list[Entry], held: HeldConnection) -> None:
    """Handle *entries* (of a group taking ``tx``) to their end in one transaction on
    *held*'s connection; never raises but for cancellation."""
    try:
        await _deliver_batch(group, entries, held)
    except Exception:  # a case not foreseen: the entries stay pending and come back
        await held.release()
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
    """The optimistic pass cannot commit: the call at *index* raised *error* (``None``: the
    transaction is aborted, by which call is not known). It rolls back, and the calls run
    again in a savepoint each (but a known culprit)."""

    def __init__(self, index: int | None = None, error: Exception | None = None) -> None:
        super().__init__(index, error)
        self.index = index
        self.error = error


#: one call of a batch: its entry, its envelope, its decoded event
Call = tuple[Entry, Envelope, Event]
#: a call's outcome: ran (``True``), ran before (``False``: its inbox row was there), failed
Outcome = bool | Exception


async def _deliver_batch(group: Group, entries: list[Entry], held: HeldConnection) -> None:
    rt = group.rt
    calls: list[Call] = []
    for entry in entries:
        started = await ready(group, entry)
        if started is not None:
            calls.append((entry, *started))
    if not calls:
        return
    try:
        outcomes = await _together(group, calls, held)
    except _OneByOne as retry:
        outcomes = await _each_in_a_savepoint(group, calls, held, retry)
    await rt.fault("batch-committed")
    group.counters.batches += 1
    for (entry, env, event), outcome in zip(calls, outcomes, strict=True):
        if isinstance(outcome, Exception):
            await failed(group, entry, env, event, outcome)
        else:
            await succeeded(group, entry, env, outcome)


async def _together(group: Group, calls: list[Call], held: HeldConnection) -> list[Outcome]:
    """Every call in one transaction, the inbox rows in one statement first.

    :raises _OneByOne: when that cannot commit (the transaction is rolled back)
    """
    rt = group.rt
    patience = Patience(rt.options.db_timeout)
    ids = sorted({env.event_id for _, env, _ in calls})  # one order: no deadlock between slots
    ran: list[Outcome] = []
    try:
        with patience.scope:
            for last_try in (False, True):
                reused = held.reused
                conn = await held.get()
                if conn.dialect.name not in ("postgresql", "sqlite"):
                    raise _OneByOne  # no insert-or-ignore of many rows: a savepoint each
                try:
                    async with conn.begin():
                        pinged = last_try or not reused
                        ran = await _calls(group, conn, calls, ids, patience, pinged)
                        try:
                            await ensure_alive(conn, group.listener)
                        except TransactionAbortedError as exc:
                            raise _OneByOne from exc
                        await rt.fault("batch-committing")
                        patience.restart()  # the commit
                    break
                except _Stale:
                    await held.release()  # once more, on a fresh connection (pinged)
    except _OneByOne:
        raise
    except Exception as exc:  # the commit (or the connection) failed: nothing was stored
        await held.release()
        return [exc] * len(calls)
    if patience.scope.cancelled_caught:  # committed or not: a retry finds the inbox rows
        await held.release()
        return [patience.error()] * len(calls)
    return ran


class _Stale(Exception):
    """A kept connection turned out dead at the batch's first statement: no call ran yet."""


async def _calls(
    group: Group,
    conn: AsyncConnection,
    calls: list[Call],
    ids: list[str],
    patience: Patience,
    fresh_connection: bool,
) -> list[Outcome]:
    """The inbox rows, then each call whose row was not there yet, in *conn*'s transaction.

    :raises _OneByOne: for the first call that raised
    :raises _Stale: if a kept connection was found dead by the inbox's statement
    """
    try:
        fresh = await group.rt.inbox.claim_many(conn, group=group.name, event_ids=ids, now=utcnow())
    except Exception as exc:
        if not fresh_connection and is_stale(exc):
            raise _Stale from exc
        raise
    ran: list[Outcome] = []
    failure: tuple[int, Exception] | None = None
    with patience.paused():  # the listeners' own work: call_timeout and they bound it, not we
        for index, (entry, env, event) in enumerate(calls):
            first = env.event_id in fresh
            fresh.discard(env.event_id)  # the same event twice in a batch runs once
            if first:
                try:
                    await _call(group, conn, entry, env, event)
                except Exception as exc:
                    failure = (index, exc)
                    break
            ran.append(first)
    if failure is None:
        return ran
    index, error = failure  # our check below waits on the database: under db_timeout again
    if any(ran) and not await _own_fault(conn, group, error):  # others ran before it
        raise _OneByOne from error
    raise _OneByOne(index, error) from error


async def _own_fault(conn: AsyncConnection, group: Group, exc: Exception) -> bool:
    """Whether a call that raised after others ran in its transaction is surely the one at
    fault: not when it raised a database error, nor when the transaction is aborted (on
    PostgreSQL an earlier call that caught a database error leaves it so, and the next
    statement fails, whatever the next listener then raises)."""
    if _is_database_error(exc):
        return False
    try:
        await ensure_alive(conn, group.listener)
    except TransactionAbortedError:
        return False
    return True


async def _each_in_a_savepoint(
    group: Group, calls: list[Call], held: HeldConnection, retry: _OneByOne
) -> list[Outcome]:
    """Every call in one transaction, each in a savepoint with its inbox row; the call that
    raised in the optimistic pass is charged with that error, not called twice."""
    if retry.error is not None and len(calls) == 1:  # nothing to run again
        return [retry.error]
    rt = group.rt
    patience = Patience(rt.options.db_timeout)
    outcomes: list[Outcome] = []
    try:
        with patience.scope:
            conn = await held.get()
            async with conn.begin():
                if conn.dialect.name == "sqlite":
                    await conn.exec_driver_sql("BEGIN")
                culprit = calls[retry.index][1].event_id if retry.index is not None else None
                for index, (entry, env, event) in enumerate(calls):
                    if retry.error is not None and (
                        index == retry.index or env.event_id == culprit  # the same event again
                    ):
                        outcomes.append(retry.error)
                        continue
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
        await held.release()
        return _all_failed(outcomes, exc, len(calls))
    if patience.scope.cancelled_caught:  # committed or not: a retry finds the inbox rows
        await held.release()
        return _all_failed(outcomes, patience.error(), len(calls))
    return outcomes


def _is_database_error(exc: BaseException) -> bool:
    """Whether *exc* is, or was raised while handling, a database error."""
    visited: set[int] = set()
    seen: BaseException | None = exc
    while seen is not None and id(seen) not in visited:
        if isinstance(seen, SQLAlchemyError):
            return True
        visited.add(id(seen))
        seen = seen.__cause__ or seen.__context__
    return False


def _all_failed(outcomes: list[Outcome], exc: Exception, count: int) -> list[Outcome]:
    """What nothing of was stored: each call failed, with its own error or *exc*."""
    lost: list[Outcome] = [exc] * (count - len(outcomes))
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
