"""bus.retry_failures() against a real SQLite file: rows skipped and why, filters, timeouts.

A retry that resolves a row, fails again or makes it dead is in the FailureStore conformance
suite (``test_failure_stores.py``), on every store."""

from __future__ import annotations

import dataclasses
import json
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import anyio
import pytest

from eventbus import Event, EventBus, EventRegistry, FailureStatus
from eventbus._core._retry import RetryReport
from eventbus.backends.sql import SqlFailureStore
from tests.eventbus.helpers import Flaky

reg = EventRegistry()


class OrderPaid(Event, name="order.paid", registry=reg):
    order_id: int
    amount: Decimal
    paid_at: datetime
    ref: uuid.UUID


class UserRegistered(Event, name="user.registered", registry=reg):
    user_id: int


PAID = OrderPaid(
    order_id=1,
    amount=Decimal("9.90"),
    paid_at=datetime(2026, 1, 2, 3, 4, tzinfo=UTC),
    ref=uuid.UUID(int=7),
)


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'failures.db'}"


async def record_failures(db_url: str, *events: Event, listener: str = "flaky") -> None:
    """A first process: a listener named *listener* fails once for each event."""
    bus = EventBus(reg, SqlFailureStore(db_url))
    bus.on("**", Flaky(), name=listener)
    with anyio.fail_after(5):
        async with bus:
            for e in events:
                bus.emit(e)


def sql_bus(db_url: str, registry: EventRegistry = reg) -> EventBus:
    return EventBus(registry, SqlFailureStore(db_url))


async def test_a_missing_listener_leaves_the_row_pending_with_a_reason(db_url: str) -> None:
    await record_failures(db_url, PAID, listener="billing:grant_points")
    bus = sql_bus(db_url)  # the new process no longer subscribes that listener
    with anyio.fail_after(5):
        async with bus:
            report = await bus.retry_failures()
            [row] = await bus.failures.query()
    reason = "no listener named 'billing:grant_points' is subscribed on this bus"
    assert report.skipped == 1 and report.items[0].reason == reason
    assert row.status is FailureStatus.PENDING and row.attempts == 1
    assert row.note == f"not retried: {reason}"


async def test_an_event_type_no_longer_declared_leaves_the_row_pending(db_url: str) -> None:
    await record_failures(db_url, PAID)
    other = EventRegistry()  # the new code base declares no 'order.paid'
    bus = sql_bus(db_url, other)
    flaky = Flaky()
    bus.on("**", flaky, name="flaky")
    with anyio.fail_after(5):
        async with bus:
            report = await bus.retry_failures()
            [row] = await bus.failures.query()
    assert report.skipped == 1
    assert report.items[0].reason == (
        "event type 'order.paid' is no longer declared in the bus's registry"
    )
    assert row.status is FailureStatus.PENDING and flaky.seen == []


async def test_a_payload_that_no_longer_fits_is_skipped_with_the_field_named(
    db_url: str,
) -> None:
    await record_failures(db_url, PAID)
    bus = sql_bus(db_url)
    bus.on("**", Flaky(), name="flaky")
    with anyio.fail_after(5):
        async with bus:
            [row] = await bus.failures.query()
            await bus.failures.update(row.replace(payload='{"order_id": "one"}'))
            report = await bus.retry_failures()
    [item] = report.items
    assert item.result == "skipped"
    assert item.reason is not None and "field 'order_id'" in item.reason


async def test_a_payload_that_was_not_encodable_is_skipped(db_url: str) -> None:
    await record_failures(db_url, PAID)
    bus = sql_bus(db_url)
    bus.on("**", Flaky(), name="flaky")
    with anyio.fail_after(5):
        async with bus:
            [row] = await bus.failures.query()
            await bus.failures.update(row.replace(payload="OrderPaid(...)", payload_ok=False))
            report = await bus.retry_failures()
    assert report.skipped == 1
    assert report.items[0].reason is not None and "could not be encoded" in report.items[0].reason


async def test_filters_and_limit_choose_the_rows(db_url: str) -> None:
    await record_failures(
        db_url,
        PAID,
        UserRegistered(user_id=1),
        UserRegistered(user_id=2),
        UserRegistered(user_id=3),
    )
    bus = sql_bus(db_url)
    flaky = Flaky()
    flaky.failing = False
    bus.on("**", flaky, name="flaky")
    with anyio.fail_after(5):
        async with bus:
            assert (await bus.retry_failures(event="user.registered", limit=2)).resolved == 2
            assert (await bus.retry_failures(listener="someone-else")).items == ()
            assert (await bus.retry_failures(event="user.registered")).resolved == 1
            assert (await bus.retry_failures()).resolved == 1
    # the limited run took the newest two and ran them oldest first
    assert flaky.seen == [
        UserRegistered(user_id=2),
        UserRegistered(user_id=3),
        UserRegistered(user_id=1),
        PAID,
    ]


async def test_retry_sees_failures_recorded_just_before_the_call(db_url: str) -> None:
    bus = sql_bus(db_url)
    flaky = Flaky()
    bus.on(OrderPaid, flaky, name="flaky")
    with anyio.fail_after(5):
        async with bus:
            for n in range(30):
                bus.emit(dataclasses.replace(PAID, order_id=n))
            flaky.failing = False
            report = await bus.retry_failures(limit=None)  # no flush() in between
    assert report.resolved == 30


async def test_an_async_listener_is_retried_with_its_timeout(db_url: str) -> None:
    bus = sql_bus(db_url)
    calls: list[int] = []

    @bus.on(UserRegistered, name="welcome", timeout=5)
    async def welcome(e: UserRegistered) -> None:
        calls.append(e.user_id)
        await anyio.lowlevel.checkpoint()
        if len(calls) == 1:
            raise ConnectionError("smtp down")

    with anyio.fail_after(5):
        async with bus:
            await bus.emit_async(UserRegistered(user_id=42))
            report = await bus.retry_failures()
    assert (report.resolved, calls) == (1, [42, 42])


async def test_max_attempts_must_be_positive(db_url: str) -> None:
    bus = EventBus(reg)
    with pytest.raises(ValueError, match="max_attempts=0"):
        await bus.retry_failures(max_attempts=0)


def test_an_empty_report_reads_well() -> None:
    assert str(RetryReport()) == "0 retried: 0 resolved, 0 failed again, 0 dead, 0 skipped"


# -- once= and times= listeners: they unsubscribe themselves when their last call starts ----


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_once_listener_whose_call_failed_is_retried(db_url: str, kind: str) -> None:
    """Regression test: the listener was removed when its call was claimed, so its failure
    could never be retried ("no listener named ...")."""
    bus = sql_bus(db_url)
    flaky = Flaky()

    async def async_flaky(e: Event) -> None:
        flaky(e)

    bus.on(UserRegistered, flaky if kind == "sync" else async_flaky, name="welcome", once=True)
    with anyio.fail_after(5):
        async with bus:
            bus.emit(UserRegistered(user_id=1))
        assert bus.listener("welcome") is None  # its one call is spent
        flaky.failing = False
        async with bus:
            report = await bus.retry_failures()
            [row] = await bus.failures.query()
    assert report.resolved == 1, report
    assert row.status is FailureStatus.RESOLVED
    assert flaky.seen == [UserRegistered(user_id=1)] * 2
    assert bus.listener("welcome") is None  # retried, not subscribed again


async def test_a_dropped_call_of_a_times_listener_is_retried(db_url: str) -> None:
    """Its calls were spent by emits whose calls were dropped (a full queue): they never ran."""
    bus = EventBus(reg, SqlFailureStore(db_url), queue_size=0, workers=1)
    release = anyio.Event()
    seen: list[int] = []

    async def blocker(e: OrderPaid) -> None:
        await release.wait()

    async def welcome(e: UserRegistered) -> None:
        seen.append(e.user_id)

    bus.on(OrderPaid, blocker)
    bus.on(UserRegistered, welcome, name="welcome", times=2)
    with anyio.fail_after(5):
        async with bus:
            await anyio.wait_all_tasks_blocked()  # the worker waits for a call
            bus.emit(PAID)
            await anyio.wait_all_tasks_blocked()  # the one worker is busy: no room left
            bus.emit(UserRegistered(user_id=1))
            bus.emit(UserRegistered(user_id=2))
            release.set()
        async with bus:
            rows = await bus.failures.query()
            assert [r.error_type for r in rows] == ["eventbus.ListenerDroppedError"] * 2
            report = await bus.retry_failures()
    assert report.resolved == 2, report
    assert seen == [1, 2]


async def test_a_listener_subscribed_again_under_the_name_is_the_one_retried(
    db_url: str,
) -> None:
    bus = sql_bus(db_url)
    first, second = Flaky(), Flaky()
    bus.on(UserRegistered, first, name="welcome", once=True)
    second.failing = False
    with anyio.fail_after(5):
        async with bus:
            bus.emit(UserRegistered(user_id=1))
            bus.on(UserRegistered, second, name="welcome")
            assert (await bus.retry_failures()).resolved == 1
    assert (len(first.seen), len(second.seen)) == (1, 1)


async def test_a_used_up_listener_never_answers_for_another_listeners_failure(
    db_url: str,
) -> None:
    """Regression test: a once listener that had run fine was kept under its name, and the
    failure of a later listener of that name (since unsubscribed) was retried by calling it:
    the row was marked resolved by a function that never failed."""
    bus = sql_bus(db_url)
    first, second = Flaky(), Flaky()
    first.failing = False
    bus.on(UserRegistered, first, name="welcome", once=True)
    with anyio.fail_after(5):
        async with bus:
            bus.emit(UserRegistered(user_id=1))  # runs fine, used up
            bus.on(UserRegistered, second, name="welcome")
            bus.emit(UserRegistered(user_id=2))  # fails
            bus.off(UserRegistered, "welcome")
            report = await bus.retry_failures()
            [row] = await bus.failures.query()
    assert (report.resolved, report.skipped) == (0, 1), report
    assert row.status is FailureStatus.PENDING
    assert (len(first.seen), len(second.seen)) == (1, 1)


async def test_a_used_up_listener_is_retried_for_its_own_failures_only(db_url: str) -> None:
    """A permanent 'welcome' failed and was unsubscribed; a once 'welcome' failed since: its
    retry resolves its own row, and leaves the other listener's row alone."""
    bus = sql_bus(db_url)
    permanent, once = Flaky(), Flaky()
    bus.on(UserRegistered, permanent, name="welcome")
    with anyio.fail_after(5):
        async with bus:
            bus.emit(UserRegistered(user_id=1))
            bus.off(UserRegistered, "welcome")
            bus.once(UserRegistered, once, name="welcome")
            bus.emit(UserRegistered(user_id=2))
            once.failing = False
            report = await bus.retry_failures()
            rows = {json.loads(r.payload)["user_id"]: r.status for r in await bus.failures.query()}
    assert (report.resolved, report.skipped) == (1, 1), report
    assert rows == {1: FailureStatus.PENDING, 2: FailureStatus.RESOLVED}
    assert (len(permanent.seen), len(once.seen)) == (1, 2)
