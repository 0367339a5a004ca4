"""MemoryFailureStore: the embedded default store and the fake of the SQL one."""

from __future__ import annotations

from datetime import timedelta

import pytest

from eventbus import FailureRecord, FailureStatus, MemoryFailureStore
from eventbus.abc import FailureStore
from tests.eventbus.helpers import OrderPaid, UserRegistered


def record(n: int, *, listener: str = "billing") -> FailureRecord:
    event = OrderPaid(order_id=n, user_id=0) if n % 2 else UserRegistered(user_id=n)
    r = FailureRecord.from_exception(
        event=event, event_id=f"e{n}", listener=listener, exc=ValueError(f"boom {n}")
    )
    stamp = r.first_failed_at + timedelta(seconds=n)
    return r.replace(first_failed_at=stamp, last_failed_at=stamp)


def test_fits_the_protocol() -> None:
    assert isinstance(MemoryFailureStore(), FailureStore)
    assert repr(MemoryFailureStore(max_records=5)) == "MemoryFailureStore(records=0, max_records=5)"


async def test_query_is_newest_first_and_filters() -> None:
    store = MemoryFailureStore()
    records = [record(n, listener="audit" if n == 3 else "billing") for n in range(1, 6)]
    for r in records:
        store.record(r)
    assert [r.event_id for r in await store.query()] == ["e5", "e4", "e3", "e2", "e1"]
    assert [r.event_id for r in await store.query(limit=2)] == ["e5", "e4"]
    assert [r.event_id for r in await store.query(event="user.registered")] == ["e4", "e2"]
    assert [r.event_id for r in await store.query(listener="audit")] == ["e3"]
    since = records[3].last_failed_at
    assert [r.event_id for r in await store.query(since=since)] == ["e5", "e4"]
    assert len(await store.query(status=FailureStatus.RESOLVED)) == 0
    assert len(await store.query(limit=None)) == len(store) == 5


async def test_get_update_and_purge() -> None:
    store = MemoryFailureStore()
    a, b = record(1), record(2)
    store.record(a)
    store.record(b)
    assert await store.get(a.id) == a
    assert await store.get("missing") is None
    await store.update(a.replace(status=FailureStatus.DEAD, attempts=5))
    assert [r.event_id for r in await store.query(status=FailureStatus.DEAD)] == ["e1"]
    with pytest.raises(KeyError):
        await store.update(record(3))
    assert await store.purge(status=FailureStatus.DEAD) == 1
    assert await store.purge(before=b.last_failed_at) == 0
    assert await store.purge() == 1
    assert len(store) == 0


async def test_oldest_records_are_evicted_beyond_the_bound() -> None:
    store = MemoryFailureStore(max_records=2)
    for n in range(1, 5):
        store.record(record(n))
    assert [r.event_id for r in await store.query()] == ["e4", "e3"]
    assert store.evicted == 2


async def test_evictions_are_logged_not_silent(caplog: pytest.LogCaptureFixture) -> None:
    """Regression test: evicting a pending record used to leave no trace but a counter."""
    store = MemoryFailureStore(max_records=1)
    with caplog.at_level("WARNING", logger="eventbus.failures"):
        for n in range(1, 4):
            store.record(record(n))
    warnings = [r for r in caplog.records if r.name == "eventbus.failures"]
    assert len(warnings) == 1  # the first eviction, then every 1,000th
    assert "evicted 1 record(s)" in warnings[0].getMessage()
    assert "e1" not in [r.event_id for r in await store.query()]


async def test_lifecycle_methods_are_checkpoints() -> None:
    store = MemoryFailureStore()
    await store.flush()
    await store.aclose()
