"""Property: every failure lands in the SQL table once, whatever the listeners, batches and mode."""

from __future__ import annotations

import dataclasses
import sqlite3
import uuid
from collections import Counter
from decimal import Decimal
from pathlib import Path

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventbus import Event, EventBus, decode_payload, matches
from eventbus.backends.sql import SqlFailureStore
from tests.eventbus.helpers import OrderPaid, OrderShipped, UserRegistered, reg

PATTERNS = ["order.paid", "order.shipped", "order.*", "*.paid", "**", "user.*"]


@dataclasses.dataclass(frozen=True)
class Spec:
    pattern: str
    is_async: bool
    fails: bool


specs = st.builds(Spec, st.sampled_from(PATTERNS), st.booleans(), st.booleans())
names = st.sampled_from(["order.paid", "order.shipped", "user.registered"])
amounts = st.decimals(min_value=0, max_value=10**6, places=2, allow_nan=False)


def make(name: str, n: int, amount: Decimal) -> Event:
    if name == "order.paid":
        return OrderPaid(order_id=n, user_id=n, amount=amount)
    if name == "order.shipped":
        return OrderShipped(order_id=n)
    return UserRegistered(user_id=n, email=f"u{n}@example.com")


def subscribe(bus: EventBus, spec: Spec, tag: str) -> None:
    if spec.is_async:

        async def a(e: Event) -> None:
            await anyio.lowlevel.checkpoint()
            if spec.fails:
                raise ValueError(tag)

        bus.on(spec.pattern, a, name=tag)
    else:

        def s(e: Event) -> None:
            if spec.fails:
                raise ValueError(tag)

        bus.on(spec.pattern, s, name=tag)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    listeners=st.lists(specs, max_size=6),
    emitted=st.lists(st.tuples(names, amounts), min_size=1, max_size=6),
    background=st.booleans(),
    batch_size=st.integers(min_value=1, max_value=4),
)
async def test_each_failure_is_in_the_sql_table_exactly_once(
    tmp_path: Path,
    listeners: list[Spec],
    emitted: list[tuple[str, Decimal]],
    background: bool,
    batch_size: int,
) -> None:
    db = tmp_path / f"{uuid.uuid4().hex}.db"  # one file per example; tmp_path is shared
    store = SqlFailureStore(f"sqlite+aiosqlite:///{db}", batch_size=batch_size)
    bus = EventBus(reg, store)
    for i, spec in enumerate(listeners):
        subscribe(bus, spec, f"l{i}")
    sent = [make(name, n, amount) for n, (name, amount) in enumerate(emitted)]

    with anyio.fail_after(10):
        if background:
            async with bus:  # the writer runs; leaving the block flushes
                for event in sent:
                    bus.emit(event)
        else:
            for event in sent:
                await bus.emit_async(event)  # the store is not started: aclose() writes
            await store.aclose()

    expected = Counter(
        (f"l{i}", n)
        for n, event in enumerate(sent)
        for i, spec in enumerate(listeners)
        if spec.fails and matches(spec.pattern, event.__event_name__)
    )
    recorded: Counter[tuple[str, int]] = Counter()
    for listener, event_name, payload, status, attempts in table_rows(db):
        event = decode_payload(reg, event_name, payload)  # and the payload rehydrates exactly
        n = next(i for i, e in enumerate(sent) if e == event)
        recorded[listener, n] += 1
        assert (status, attempts) == ("pending", 1)
    assert recorded == expected


def table_rows(db: Path) -> list[tuple[str, str, str, str, int]]:
    """The table's rows; none when the store never had to create it (nothing failed)."""
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        if not conn.execute(
            "SELECT 1 FROM sqlite_master WHERE name = 'eventbus_failures'"
        ).fetchone():
            rows = []
        else:
            rows = conn.execute(
                "SELECT listener, event_name, payload, status, attempts FROM eventbus_failures"
            ).fetchall()
    conn.close()
    return rows
