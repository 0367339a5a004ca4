"""Waking the relay once a transaction that wrote outbox rows has ended (see
:func:`wake_after_commit`), from SQLAlchemy's own connection hooks."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncConnection

__all__ = ["wake_after_commit"]

_WAKE = "eventbus.durable.wake"  # key in a connection's info: wakers to call after commit

_hooked: weakref.WeakSet[Engine] = weakref.WeakSet()


def wake_after_commit(conn: AsyncConnection, wake: Callable[[], None]) -> None:
    """Call *wake* once the current transaction of *conn* has ended.

    SQLAlchemy's ``commit`` hook runs *before* the database commits, when a relay woken by it
    could still miss the row. So the wake is left on the connection and called by the next
    thing that can only happen after the commit: the connection starting another transaction,
    or going back to the pool (the end of ``async with engine.begin()``). Either also follows
    a rollback, which wakes the relay for nothing: harmless.
    """
    sync = conn.sync_connection
    if sync is None:
        return
    engine = sync.engine
    if engine not in _hooked:
        sa.event.listen(engine, "begin", _on_begin)
        sa.event.listen(engine, "checkin", _on_checkin)
        _hooked.add(engine)
    wakers: set[Callable[[], None]] = sync.info.setdefault(_WAKE, set())
    wakers.add(wake)


def _on_begin(conn: sa.Connection) -> None:
    _call(conn.info.pop(_WAKE, None))


def _on_checkin(_dbapi_conn: object, record: Any) -> None:
    if record is not None:
        _call(record.info.pop(_WAKE, None))


def _call(wakers: set[Callable[[], None]] | None) -> None:
    for wake in wakers or ():
        try:
            wake()
        except Exception:  # a relay that is gone; the poll covers the rest
            pass
