"""The outbox's SQL: write rows in the publisher's transaction, claim them with a lease,
mark them published, give them back, purge and republish them.

Every statement here is short: the relay never holds a transaction open while it talks to
Redis. A claim is one ``UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING``
(PostgreSQL skips rows another relay is claiming; SQLite, which has no row locks, runs one
writer at a time, so the statement is atomic there too). Marking requires the claim's token:
a relay whose lease expired, and whose rows another relay claimed, updates nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from .._codec import encode_payload
from .._events import Event
from .._exceptions import PayloadError
from ..backends.sql import UTCDateTime
from ._envelope import Envelope, check_publish_ids
from ._exceptions import NoTransactionError
from ._wake import wake_after_commit

__all__ = ["Backlog", "ClaimedRow", "Database", "Outbox", "ScheduledRow"]

#: why ``cancel_scheduled`` returned False (its INFO log line)
NOT_CANCELLED = (
    "not cancelled: no cancellable scheduled event has this id (not scheduled, already "
    "published, handed to a relay once, cancelled before, or unknown); it may be delivered"
)

#: where a statement runs: an engine (in a transaction of its own) or an open connection
Database = AsyncEngine | AsyncConnection


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimedRow:
    """One outbox row a relay claimed, as much as it needs to publish it."""

    id: int
    event_id: str
    name: str
    payload: str
    headers: str | None
    aggregate_key: str | None
    causation_id: str | None
    correlation_id: str | None
    created_at: datetime
    version: int | None = None  #: the event type's (``None``: a row from before versions)

    def envelope(self) -> Envelope:
        return Envelope(
            event_id=self.event_id,
            name=self.name,
            payload=self.payload,
            seq=self.id,
            occurred_at=self.created_at.isoformat(),
            aggregate_key=self.aggregate_key,
            causation_id=self.causation_id,
            correlation_id=self.correlation_id,
            headers=self.headers,
            version=self.version or 1,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduledRow:
    """An unpublished row due later: what ``streams scheduled`` lists."""

    due_at: datetime
    name: str
    aggregate_key: str | None
    event_id: str
    created_at: datetime


@dataclasses.dataclass(frozen=True, slots=True)
class Backlog:
    """Unpublished rows that are due: how many, and when the oldest fell due (``None``: none)."""

    count: int
    oldest_at: datetime | None

    def oldest_age(self, now: datetime) -> float | None:
        return None if self.oldest_at is None else max(0.0, (now - self.oldest_at).total_seconds())


class Outbox:
    """The statements of one outbox table (see the module docstring)."""

    def __init__(self, table: sa.Table) -> None:
        self.table = table
        self._marks: dict[str, sa.TextClause] = {}
        c = table.c
        self._returned = (
            c.id,
            c.event_id,
            c.name,
            c.payload,
            c.headers,
            c.aggregate_key,
            c.causation_id,
            c.correlation_id,
            c.created_at,
            c.event_version,
        )

    def __repr__(self) -> str:
        return f"Outbox(table={self.table.name!r})"

    # -- the publisher's side --------------------------------------------------------------------

    async def write(
        self,
        conn: AsyncConnection | AsyncSession,
        events: Sequence[Event],
        *,
        now: datetime,
        aggregate_key: str | None = None,
        causation_id: str | None = None,
        correlation_id: str | None = None,
        headers: Mapping[str, str] | None = None,
        available_at: datetime | None = None,
        wake: Callable[[], None] | None = None,
    ) -> list[str]:
        """Insert one row per event in the caller's open transaction; return the event ids.

        :param available_at: when the relay may publish the rows (default: *now*); a later time
            makes them scheduled until then
        :param wake: called once the transaction has ended (committed: the relay finds the
            rows; rolled back: it finds nothing), from SQLAlchemy's own hooks
        :raises NoTransactionError: if *conn* has no open transaction, or is in autocommit
        :raises PayloadError: if an event's payload cannot be encoded as JSON
        :raises ValueError: if an id is longer than its column or holds a NUL character
        """
        _require_async_connection(conn, events)
        check_publish_ids(
            aggregate_key=aggregate_key, causation_id=causation_id, correlation_id=correlation_id
        )
        if isinstance(conn, AsyncSession):
            conn = await conn.connection()
        _require_transaction(conn, events)
        header_text = json.dumps(dict(headers), sort_keys=True) if headers else None
        rows: list[dict[str, Any]] = []
        for event in events:
            payload, ok = encode_payload(event)
            if not ok:
                raise PayloadError(
                    event.__event_name__,
                    "payload cannot be encoded as JSON for the outbox; durable events need "
                    "fields the codec supports (see eventbus.encode_payload)",
                )
            rows.append(
                {
                    "event_id": uuid.uuid4().hex,
                    "name": event.__event_name__,
                    "event_version": event.__event_version__,
                    "aggregate_key": aggregate_key,
                    "payload": payload,
                    "headers": header_text,
                    "causation_id": causation_id,
                    "correlation_id": correlation_id,
                    "created_at": now,
                    "available_at": available_at if available_at is not None else now,
                    "attempts": 0,
                }
            )
        if rows:
            await conn.execute(sa.insert(self.table), rows)
            if wake is not None:
                wake_after_commit(conn, wake)
        return [r["event_id"] for r in rows]

    async def cancel(self, conn: AsyncConnection | AsyncSession, event_id: str) -> bool:
        """Delete the scheduled row of *event_id* in the caller's open transaction if no
        relay ever claimed it; return whether there was one to delete.

        Only a scheduled row (due later than it was written) is cancellable: an ordinary
        event stuck unpublished during an outage is not the caller's to drop. A row a relay
        has claimed once (``attempts > 0``) is left alone (``False``) even after its lease
        ran out or a failed publish gave it back: that relay's ``XADD`` may still be in
        flight, or may have reached Redis although it timed out, so deleting the row would
        not stop the delivery. On PostgreSQL a claim running at the same time takes the row
        first (the delete then sees ``attempts > 0``) or finds it deleted (row locks); on
        SQLite one writer runs at a time.

        :raises NoTransactionError: if *conn* has no open transaction, or is in autocommit
        """
        if isinstance(conn, AsyncSession):
            conn = await conn.connection()
        _require_transaction(conn, [], what=event_id, action="cancel_scheduled")
        c = self.table.c
        stmt = sa.delete(self.table).where(
            c.event_id == event_id,
            c.published_at.is_(None),
            c.available_at > c.created_at,
            c.attempts == 0,
        )
        return int((await conn.execute(stmt)).rowcount) > 0

    async def scheduled(
        self, engine: AsyncEngine, *, now: datetime, limit: int
    ) -> list[ScheduledRow]:
        """Up to *limit* unpublished rows due after *now*, soonest first."""
        c = self.table.c
        stmt = (
            sa.select(c.available_at, c.name, c.aggregate_key, c.event_id, c.created_at)
            .where(c.published_at.is_(None), c.available_at > now)
            .order_by(c.available_at, c.id)
            .limit(limit)
        )
        async with engine.connect() as conn:
            return [ScheduledRow(*row) for row in (await conn.execute(stmt)).all()]

    # -- the relay's side ------------------------------------------------------------------------

    async def next_due(self, db: Database, *, after: datetime) -> datetime | None:
        """When the soonest unpublished row due after *after* falls due (``None``: none is)."""
        c = self.table.c
        stmt = sa.select(sa.func.min(c.available_at)).where(
            c.published_at.is_(None), c.available_at > after
        )
        async with _transaction(db) as conn:
            due: datetime | None = (await conn.execute(stmt)).scalar()
        return due

    async def claim(
        self, db: Database, *, token: str, limit: int, lease: float, now: datetime
    ) -> list[ClaimedRow]:
        """Lease up to *limit* publishable rows to *token*, oldest first (one statement)."""
        t = self.table
        c = t.c
        pick = (
            sa.select(c.id)
            .where(
                c.published_at.is_(None),
                c.available_at <= now,
                sa.or_(c.lease_until.is_(None), c.lease_until < now),
            )
            .order_by(c.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        stmt = (
            sa.update(t)
            .where(c.id.in_(pick.scalar_subquery()))
            .values(
                lease_owner=token,
                lease_until=now + timedelta(seconds=lease),
                attempts=c.attempts + 1,
            )
            .returning(*self._returned)
        )
        async with _transaction(db) as conn:
            rows = (await conn.execute(stmt)).all()
        claimed = [ClaimedRow(*row) for row in rows]
        claimed.sort(key=lambda r: r.id)  # RETURNING promises no order
        return claimed

    async def mark(
        self,
        db: Database,
        *,
        token: str,
        stream_ids: Mapping[int, str],
        now: datetime,
    ) -> int:
        """Mark rows published where *token* still holds their lease; return how many.

        One statement whose text never changes (the ids travel as an array on PostgreSQL, as
        JSON on SQLite): building a ``CASE`` of a batch's ids cost more than running it.
        """
        if not stream_ids:
            return 0
        async with _transaction(db) as conn:
            dialect = conn.dialect.name
            params: dict[str, Any] = {"token": token, "now": now}
            if dialect == "postgresql":
                params |= {"ids": list(stream_ids), "sids": list(stream_ids.values())}
            elif dialect == "sqlite":
                params |= {
                    "ids": json.dumps(list(stream_ids)),
                    "sids": json.dumps({str(k): v for k, v in stream_ids.items()}),
                }
            else:
                return await self._mark_portably(conn, token, stream_ids, now)
            result = await conn.execute(self._mark_sql(dialect), params)
        return int(result.rowcount)

    def _mark_sql(self, dialect: str) -> sa.TextClause:
        stmt = self._marks.get(dialect)
        if stmt is None:
            name = self.table.name  # ours: checked like any SQL identifier by the dialect
            common = (
                "published_at = :now, lease_owner = NULL, lease_until = NULL, last_error = NULL"
            )
            if dialect == "postgresql":
                text = (
                    f'UPDATE "{name}" AS o SET stream_id = v.sid, {common} '
                    "FROM unnest(CAST(:ids AS BIGINT[]), CAST(:sids AS TEXT[])) AS v(id, sid) "
                    "WHERE o.id = v.id AND o.lease_owner = :token"
                )
            else:
                text = (
                    f'UPDATE "{name}" SET '
                    "stream_id = json_extract(:sids, '$.\"' || id || '\"'), "
                    f"{common} WHERE id IN (SELECT value FROM json_each(:ids)) "
                    "AND lease_owner = :token"
                )
            stmt = sa.text(text).bindparams(sa.bindparam("now", type_=UTCDateTime()))
            self._marks[dialect] = stmt
        return stmt

    async def _mark_portably(
        self, conn: AsyncConnection, token: str, stream_ids: Mapping[int, str], now: datetime
    ) -> int:
        c = self.table.c
        stmt = (
            sa.update(self.table)
            .where(c.id.in_(list(stream_ids)), c.lease_owner == token)
            .values(
                published_at=now,
                stream_id=sa.case(dict(stream_ids), value=c.id),
                lease_owner=None,
                lease_until=None,
                last_error=None,
            )
        )
        return int((await conn.execute(stmt)).rowcount)

    async def release(
        self,
        db: Database,
        *,
        token: str,
        ids: Iterable[int],
        error: str,
        retry_at: datetime,
    ) -> None:
        """Give claimed rows back after a failed publish: any relay may retry at *retry_at*."""
        c = self.table.c
        stmt = (
            sa.update(self.table)
            .where(c.id.in_(list(ids)), c.lease_owner == token)
            .values(lease_owner=None, lease_until=retry_at, last_error=error[:2000])
        )
        async with _transaction(db) as conn:
            await conn.execute(stmt)

    async def purge(self, engine: AsyncEngine, *, before: datetime, batch: int) -> int:
        """Delete published rows older than *before*, *batch* rows per transaction."""
        c = self.table.c
        total = 0
        while True:
            pick = (
                sa.select(c.id)
                .where(c.published_at < before)
                .order_by(c.id)
                .limit(batch)
                .scalar_subquery()
            )
            async with engine.begin() as conn:
                n = int((await conn.execute(sa.delete(self.table).where(c.id.in_(pick)))).rowcount)
            total += n
            if n < batch:
                return total

    async def published_since(
        self,
        engine: AsyncEngine,
        *,
        since: datetime,
        names: Sequence[str] | None,
        after: int,
        limit: int,
    ) -> list[tuple[int, str, str]]:
        """(id, name, event id) of up to *limit* rows published at or after *since*, with ids
        above *after*, in id order (``republish`` works through them in batches)."""
        c = self.table.c
        stmt = (
            sa.select(c.id, c.name, c.event_id)
            .where(c.published_at >= since, c.id > after)
            .order_by(c.id)
            .limit(limit)
        )
        if names:
            stmt = stmt.where(c.name.in_(list(names)))
        async with engine.connect() as conn:
            return [(row[0], row[1], row[2]) for row in (await conn.execute(stmt)).all()]

    async def published_envelopes(
        self, engine: AsyncEngine, *, name: str, since: datetime, after: int, limit: int
    ) -> list[tuple[int, str | None, Envelope]]:
        """(id, stream id, envelope) of up to *limit* rows of event *name* published at or
        after *since*, with ids above *after*, in id order."""
        c = self.table.c
        stmt = (
            sa.select(*self._returned, c.stream_id)
            .where(c.name == name, c.published_at >= since, c.id > after)
            .order_by(c.id)
            .limit(limit)
        )
        async with engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        return [(row[0], row[-1], ClaimedRow(*row[:-1]).envelope()) for row in rows]

    async def unpublish(self, engine: AsyncEngine, *, ids: Sequence[int], now: datetime) -> int:
        """Make published rows among *ids* publishable again; return how many."""
        c = self.table.c
        stmt = (
            sa.update(self.table)
            .where(c.id.in_(list(ids)), c.published_at.is_not(None))
            .values(
                published_at=None,
                stream_id=None,
                lease_owner=None,
                lease_until=None,
                available_at=now,
            )
        )
        async with engine.begin() as conn:
            return int((await conn.execute(stmt)).rowcount)

    async def envelope(self, engine: AsyncEngine, event_id: str) -> Envelope | None:
        """The envelope of a retained row (``None``: purged, or written elsewhere)."""
        stmt = sa.select(*self._returned).where(self.table.c.event_id == event_id)
        async with engine.connect() as conn:
            row = (await conn.execute(stmt)).first()
        return None if row is None else ClaimedRow(*cast(tuple[Any, ...], row)).envelope()

    async def backlog(self, engine: AsyncEngine, *, now: datetime | None = None) -> Backlog:
        """Rows due and not published yet; a scheduled row counts from its due time, not
        before (a reminder due tomorrow is not a backlog, nor a day old when it falls due)."""
        c = self.table.c
        now = now if now is not None else datetime.now(UTC)
        stmt = sa.select(sa.func.count(), sa.func.min(c.available_at)).where(
            c.published_at.is_(None), c.available_at <= now
        )
        async with engine.connect() as conn:
            count, oldest = (await conn.execute(stmt)).one()
        return Backlog(int(count), oldest)


@contextlib.asynccontextmanager
async def _transaction(db: Database) -> AsyncIterator[AsyncConnection]:
    """A transaction of its own on an engine; a connection (the relay's, in autocommit) as is:
    each statement here is atomic by itself."""
    if isinstance(db, AsyncEngine):
        async with db.begin() as conn:
            yield conn
    else:
        yield db


def _require_async_connection(conn: object, events: Sequence[Event]) -> None:
    """Refuse an engine, or a sync connection or session, with what is needed instead."""
    if isinstance(conn, AsyncConnection | AsyncSession):
        return
    name = events[0].__event_name__ if events else "?"
    given = f"{type(conn).__module__}.{type(conn).__qualname__}"
    if isinstance(conn, AsyncEngine):
        given = "an AsyncEngine, which has no transaction"
    elif isinstance(conn, sa.Connection | sa.Engine | Session):
        given = f"the sync {given}"
    raise TypeError(
        f"publish({name!r}) needs the AsyncConnection or AsyncSession of an open transaction "
        f"('async with engine.begin() as conn:'), got {given}"
    )


def _require_transaction(
    conn: AsyncConnection,
    events: Sequence[Event],
    *,
    what: str | None = None,
    action: str = "publish",
) -> None:
    name = what or (events[0].__event_name__ if events else "?")
    sync = conn.sync_connection
    autocommit = sync is not None and getattr(sync, "_is_autocommit_isolation", lambda: False)()
    if autocommit or not conn.in_transaction():
        why = "is in autocommit mode" if autocommit else "has no open transaction"
        raise NoTransactionError(name, why, action)
