"""Hold one engine's connection at a chosen point of its work, to force an interleaving.

A SQLAlchemy event handler is synchronous, but with an async engine it runs in the greenlet
of an awaited call: ``AdaptedConnection.run_async`` may await there, so the connection's task
waits for the test without blocking the event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import anyio
from sqlalchemy import event
from sqlalchemy.engine import AdaptedConnection, Connection
from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["Pause"]


class Pause:
    """Holds the first connection of *engine* for which *at* returns true, at *event_name*
    (a ``ConnectionEvents`` name whose handler gets the ``Connection`` first), until
    :meth:`release`; ``reached`` is set when it is held."""

    def __init__(self, engine: AsyncEngine, event_name: str, at: Callable[..., bool]) -> None:
        self.reached = anyio.Event()
        self._released = anyio.Event()
        self._at = at
        event.listen(engine.sync_engine, event_name, self._hook)

    def release(self) -> None:
        self._released.set()

    def _hook(self, conn: Connection, *args: Any) -> None:
        if self.reached.is_set() or not self._at(conn, *args):
            return
        self.reached.set()
        raw = cast(AdaptedConnection, conn.connection.dbapi_connection)
        raw.run_async(lambda _driver: self._released.wait())
