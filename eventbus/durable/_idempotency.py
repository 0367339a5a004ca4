"""Is a durable listener idempotent? Delivery is at least once, so it has to be.

:func:`check_idempotency` delivers one event to a listener the ways a real transport can:
first; again as a redelivery (same event id, delivery count 2, as after a lost
acknowledgement or a reclaim); and, when the test says how to start the listener afresh
(``restart=``), again as a restarted process would after the first one died between its
commit and its acknowledgement (delivery count 3, the listener rebuilt, so whatever it kept
in process memory is gone). Without ``restart=`` the report says the restart was not
checked: a listener that remembers handled events in a set passes two deliveries in one
process and repeats its effect after a crash, and nothing in one process can show that.
Each delivery decodes the event from the stored payload, as the transports do, and goes
through the same path as ``RedisStreams`` and ``MemoryStreams`` (the inbox, for a listener
taking ``tx``). After each, it takes a snapshot of the given tables (or calls the user's
snapshot function) and reports whether anything changed after the first delivery.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from .._codec import encode_payload
from .._events import Event, EventRegistry, default_registry
from .._stored import decode_stored
from ._context import Delivery, delivery_var
from ._envelope import Envelope
from ._listener import make_listener
from ._memory import MemoryStreams
from ._tables import create_durable_tables

__all__ = ["DeliveryOutcome", "IdempotencyReport", "check_idempotency"]

Snapshot = Callable[[], Awaitable[Any]]

#: (label, delivery count, the listener rebuilt by ``restart=``) of each delivery
_DELIVERIES = (
    ("first delivery", 1, False),
    ("redelivery (same event id)", 2, False),
    ("after a crash between commit and acknowledgement (a restarted process)", 3, True),
)

_NO_RESTART = (
    "  restart not checked (no restart= given): a listener that remembers handled events in "
    "process memory passes here and repeats its effect after a crash; give restart= a "
    "function returning the listener as a new process builds it"
)


@dataclasses.dataclass(frozen=True, slots=True)
class DeliveryOutcome:
    """One delivery of the check: what changed in the snapshot compared with before it."""

    label: str
    deliveries: int
    changes: tuple[str, ...]  #: e.g. ``"sent_mail: +1 row"``; empty: nothing changed

    def line(self) -> str:
        what = "; ".join(self.changes) if self.changes else "no change"
        return f"  delivery {self.deliveries}, {self.label}: {what}"


@dataclasses.dataclass(frozen=True, slots=True)
class IdempotencyReport:
    """The verdict of :func:`check_idempotency` (``str()`` reads as a report)."""

    listener: str
    event_name: str
    event_id: str
    outcomes: tuple[DeliveryOutcome, ...]
    #: whether a delivery after a restart was made (``restart=`` given)
    restart_checked: bool = True

    @property
    def idempotent(self) -> bool:
        """No delivery after the first changed anything (of those made: see
        :attr:`restart_checked`)."""
        return not any(o.changes for o in self.outcomes[1:])

    def __bool__(self) -> bool:
        return self.idempotent

    def __str__(self) -> str:
        verdict = (
            "idempotent: deliveries after the first changed nothing"
            if self.idempotent and self.restart_checked
            else "idempotent in one process: a redelivery changed nothing (a restart was "
            "not checked)"
            if self.idempotent
            else "NOT idempotent: a delivery after the first changed what the first did "
            "(keep effects in the listener's 'tx', or key them by current_delivery().event_id)"
        )
        head = f"listener {self.listener!r} on {self.event_name!r} (event {self.event_id}): "
        lines = [head + verdict, *(o.line() for o in self.outcomes)]
        if not self.restart_checked:
            lines.append(_NO_RESTART)
        if not self.outcomes[0].changes:
            lines.append("  (the first delivery changed nothing watched: the check proves little)")
        return "\n".join(lines)

    def assert_idempotent(self) -> None:
        """:raises AssertionError: with the report, if it is not idempotent"""
        if not self.idempotent:
            raise AssertionError(str(self))


async def check_idempotency(
    listener: Callable[..., Any],
    event: Event,
    *,
    engine: AsyncEngine,
    tables: Sequence[sa.Table] = (),
    snapshot: Snapshot | None = None,
    registry: EventRegistry | None = None,
    service: str = "test",
    name: str | None = None,
    restart: Callable[[], Callable[..., Any]] | None = None,
) -> IdempotencyReport:
    """Deliver *event* to *listener* twice, and a third time after *restart* (see the module
    docstring); report whether its effects changed after the first.

    :param listener: the durable listener as written (``async def``, may take ``tx``)
    :param restart: called before the third delivery: returns the listener as a process
        started afresh has it (a new instance; or the same function after clearing what it
        keeps in memory). Without it there is no third delivery and the report says a
        restart was not checked
    :param engine: the test's database: the inbox lives there, ``tx`` is a connection to it
    :param tables: tables whose rows are compared (all columns, in any order)
    :param name: the listener's name in the report (default: the function's)
    :param snapshot: or (and) an ``async`` function returning anything comparable with
        ``==`` (the e-mails a fake provider holds, a file's contents)
    :raises ValueError: if neither *tables* nor *snapshot* is given
    :raises Exception: whatever the listener raises: each delivery must succeed
    """
    if not tables and snapshot is None:
        raise ValueError("check_idempotency: give tables= or snapshot= (what the listener changes)")
    if registry is None:
        registry = getattr(type(event), "__registry__", None) or default_registry
    if name is None:  # the function's own name (a test's local function has no stable path)
        name = re.sub(r"[^A-Za-z0-9_.:@-]", "_", getattr(listener, "__name__", "listener"))
    made = make_listener(service, type(event), listener, name=name)
    await create_durable_tables(engine)
    payload, _ = encode_payload(event)
    env = Envelope(
        event_id=uuid.uuid4().hex,
        name=event.__event_name__,
        payload=payload,
        seq=1,
        occurred_at=datetime.now(UTC).isoformat(),
        aggregate_key=None,
        causation_id=None,
        correlation_id=None,
        headers=None,
        version=event.__event_version__,
    )

    async def take() -> tuple[Any, ...]:
        rows = tuple([await _rows(engine, t) for t in tables])
        return rows, (await snapshot() if snapshot is not None else None)

    transport = MemoryStreams(engine, service=service, registry=registry, create_tables=False)
    outcomes: list[DeliveryOutcome] = []
    before = await take()
    for label, count, restarted in _DELIVERIES:
        if restarted:
            if restart is None:
                break
            made = make_listener(service, type(event), restart(), name=made.name)
        # each delivery reads the stored payload, as a transport does: never the caller's object
        stored = decode_stored(registry, env.name, env.payload, env.version).event
        delivery = Delivery.of(env, group=made.group, entry_id=f"1-{count}", deliveries=count)
        token = delivery_var.set(delivery)
        try:
            await transport._call(made, stored, env)
        finally:
            delivery_var.reset(token)
        after = await take()
        outcomes.append(DeliveryOutcome(label, count, _changes(tables, before, after)))
        before = after
    return IdempotencyReport(
        made.name, env.name, env.event_id, tuple(outcomes), restart_checked=restart is not None
    )


async def _rows(engine: AsyncEngine, table: sa.Table) -> list[tuple[Any, ...]]:
    async with engine.connect() as conn:
        rows = [tuple(r) for r in (await conn.execute(sa.select(table))).all()]
    return sorted(rows, key=repr)


def _changes(
    tables: Sequence[sa.Table], before: tuple[Any, ...], after: tuple[Any, ...]
) -> tuple[str, ...]:
    out: list[str] = []
    for table, old, new in zip(tables, before[0], after[0], strict=True):
        # rows as multisets: one more copy of an existing row is a row added
        added = (Counter(new) - Counter(old)).total()
        removed = (Counter(old) - Counter(new)).total()
        parts = [f"+{added} row{'s' if added != 1 else ''}"] if added else []
        parts += [f"-{removed} row{'s' if removed != 1 else ''}"] if removed else []
        if parts:
            out.append(f"{table.name}: {', '.join(parts)}")
    if before[1] != after[1]:
        out.append(f"snapshot: {before[1]!r} -> {after[1]!r}")
    return tuple(out)
