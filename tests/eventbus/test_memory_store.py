"""MemoryFailureStore: the embedded default store and the fake of the SQL one.

The contract it shares with ``SqlFailureStore`` is in ``test_failure_stores.py``; what only
it does (its bound, its repr) is here.
"""

from __future__ import annotations

from datetime import timedelta

import anyio
import pytest

from eventbus import FailureRecord, MemoryFailureStore
from tests.eventbus.helpers import OrderPaid, UserRegistered


def record(n: int, *, listener: str = "billing") -> FailureRecord:
    event = OrderPaid(order_id=n, user_id=0) if n % 2 else UserRegistered(user_id=n)
    r = FailureRecord.from_exception(
        event=event, event_id=f"e{n}", listener=listener, exc=ValueError(f"boom {n}")
    )
    stamp = r.first_failed_at + timedelta(seconds=n)
    return r.replace(first_failed_at=stamp, last_failed_at=stamp)


def test_repr_and_len_show_its_size_and_bound() -> None:
    store = MemoryFailureStore(max_records=5)
    assert repr(store) == "MemoryFailureStore(records=0, max_records=5)"
    for n in range(1, 4):
        store.record(record(n))
    assert len(store) == 3


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


@pytest.mark.parametrize("method", ["flush", "aclose"])
async def test_lifecycle_methods_are_checkpoints(method: str) -> None:
    """A checkpoint: a cancelled scope stops at it (the test asserted nothing before)."""
    store = MemoryFailureStore()
    reached = False
    with anyio.CancelScope() as scope:
        scope.cancel()
        await getattr(store, method)()
        reached = True
    assert scope.cancelled_caught and not reached
