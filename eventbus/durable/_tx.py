"""A listener's call with ``tx``, and the check that its transaction can still commit.

On PostgreSQL a statement that fails inside a transaction aborts it; a listener that catches
the error (``try: insert / except IntegrityError: pass``) leaves a transaction whose COMMIT
is a rollback that raises nothing. Acknowledging its entry would lose the listener's writes
and the inbox row, so the transaction is checked before it commits.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import anyio
from sqlalchemy.ext.asyncio import AsyncConnection

from .._events import Event
from ._listener import DurableListener

__all__ = ["Patience", "TransactionAbortedError", "call_with_tx", "ensure_alive"]


class TransactionAbortedError(Exception):
    """A listener's transaction was aborted by a database error the listener caught."""


async def call_with_tx(listener: DurableListener, event: Event, conn: AsyncConnection) -> None:
    """Call *listener* with *event* and the transaction *conn*, as it declares ``tx``."""
    call: Any = listener.fn(event, conn) if listener.tx_positional else listener.fn(event, tx=conn)
    await call


async def ensure_alive(conn: AsyncConnection, listener: DurableListener) -> None:
    """:raises TransactionAbortedError: when *conn*'s transaction can only roll back (a
    database error inside it was caught): its commit would silently keep nothing"""
    if conn.dialect.name != "postgresql":
        return  # SQLite keeps the transaction after a failed statement
    try:
        await conn.exec_driver_sql("SELECT 1")
    except Exception as exc:
        raise TransactionAbortedError(
            f"durable listener {listener.name!r}: a database error inside its transaction was "
            "caught, which aborted the transaction; nothing of it was kept (use a savepoint, "
            "tx.begin_nested(), around a statement that may fail)"
        ) from exc


class Patience:
    """A deadline of ``db_timeout`` on the transport's own waits on the database (the
    connection, the inbox rows, the commit), none on the listeners' calls: a database gone
    silent ends the batch as failed calls instead of holding the group."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.scope = anyio.CancelScope(deadline=anyio.current_time() + seconds)

    def restart(self) -> None:
        self.scope.deadline = anyio.current_time() + self.seconds

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """A listener's own work: ``call_timeout`` and the listener bound it, not we."""
        self.scope.deadline = math.inf
        try:
            yield
        finally:
            self.restart()

    def error(self) -> TimeoutError:
        return TimeoutError(f"the database did not answer within db_timeout={self.seconds} s")
