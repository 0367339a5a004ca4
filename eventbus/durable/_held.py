"""Database connections a group taking ``tx`` keeps from one batch to the next.

Checking a connection out of a pool with ``pool_pre_ping`` (``make_engine``'s default) pings it
first, and on asyncpg a ping is three round trips (BEGIN, a query, ROLLBACK): more than a small
batch's own statements. So a transaction slot keeps its connection while batches follow each
other, and gives it back to the pool after ``HOLD_IDLE`` seconds without one (or at stop). The
process keeps no more than its pool's size less one (:class:`KeepBudget`): kept connections
never starve the publishers, the relay or another group of the pool. A kept connection the
server closed meanwhile fails at the batch's first statement, before any listener ran: the
batch then takes a fresh one, pinged, once.
"""

from __future__ import annotations

import contextlib
import time

import anyio
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

__all__ = ["HOLD_IDLE", "HeldConnection", "KeepBudget", "is_stale", "release_period"]

#: seconds a slot keeps its connection without a batch before giving it back to the pool
HOLD_IDLE = 5.0
#: the longest giving a connection back may take (it is shielded from a stop's cancellation)
CLOSE_PATIENCE = 5.0


def release_period() -> float:
    """How often a group looks for connections kept idle past ``HOLD_IDLE``."""
    return min(1.0, HOLD_IDLE)


def is_stale(exc: BaseException) -> bool:
    """The driver found the connection dead (closed by the server, a restart): another
    connection may well work."""
    return isinstance(exc, DBAPIError) and exc.connection_invalidated


class KeepBudget:
    """How many connections this process's groups may keep between batches: the pool's size
    less one, so that one pooled connection and the whole overflow stay for everybody else
    (the publishers, the relay, other groups); none for a pool of no fixed size."""

    __slots__ = ("left",)

    def __init__(self, engine: AsyncEngine) -> None:
        size = getattr(engine.sync_engine.pool, "size", None)
        self.left = max(0, int(size()) - 1) if callable(size) else 0

    def __repr__(self) -> str:
        return f"KeepBudget(left={self.left})"


class HeldConnection:
    """One transaction slot's connection: checked out for a batch, and kept for the next one
    while the process's :class:`KeepBudget` allows."""

    __slots__ = ("budget", "conn", "engine", "idle_since", "kept")

    def __init__(self, engine: AsyncEngine, budget: KeepBudget) -> None:
        self.engine = engine
        self.budget = budget
        self.conn: AsyncConnection | None = None
        self.idle_since = time.monotonic()
        self.kept = False  #: holds one of the budget's places

    def __repr__(self) -> str:
        return f"HeldConnection(held={self.conn is not None}, kept={self.kept})"

    @property
    def reused(self) -> bool:
        """Whether the next :meth:`get` gives a kept connection (not pinged just now)."""
        return self.conn is not None

    async def get(self) -> AsyncConnection:
        if self.conn is None:
            self.conn = await self.engine.connect()
        return self.conn

    async def after_batch(self) -> None:
        """Keep the connection for the next batch if the budget allows, else give it back."""
        if self.conn is None or self.kept:
            return
        if self.budget.left > 0:
            self.budget.left -= 1
            self.kept = True
        else:
            await self.release()

    def idle(self) -> bool:
        return self.conn is not None and time.monotonic() - self.idle_since >= HOLD_IDLE

    async def release(self) -> None:
        """Give the connection back to the pool; one that cannot even close is dropped (the
        pool replaces it)."""
        conn, self.conn = self.conn, None
        if self.kept:
            self.kept = False
            self.budget.left += 1
        if conn is None:
            return
        # a broken connection raises here: the pool has invalidated it already
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(CLOSE_PATIENCE),
            contextlib.suppress(Exception),
        ):
            await conn.close()
