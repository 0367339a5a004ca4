"""``eventbus.testing`` as public API: recording listeners, failure capture, isolation helpers."""

from __future__ import annotations

import json

import anyio
import pytest

from eventbus import Event, EventBus, EventRegistry, FailureRecord, ListenerShutdownError
from eventbus.testing import (
    AsyncRecordingListener,
    RecordingListener,
    UnexpectedFailuresError,
    call_order,
    capture_failures,
    fresh_registry,
    running_bus,
)

reg = EventRegistry()


class OrderPaid(Event, name="order.paid", registry=reg):
    order_id: int


class OrderShipped(Event, name="order.shipped", registry=reg):
    order_id: int


class Declined(Exception):
    """A user's own exception type, recorded under its qualified name."""


def explode(e: Event) -> None:
    raise ValueError(f"boom {e.event_name}")


async def test_recording_listener_records_events_in_order() -> None:
    bus = EventBus(reg)
    rec = RecordingListener("audit")
    bus.on("order.*", rec)
    bus.emit(OrderPaid(order_id=1))
    bus.emit(OrderShipped(order_id=1))
    assert rec.events == [OrderPaid(order_id=1), OrderShipped(order_id=1)]
    assert rec.count == 2
    assert [c.listener for c in rec.calls] == ["audit", "audit"]
    assert rec.calls[0].seq < rec.calls[1].seq
    rec.reset()
    assert rec.events == []


def test_each_recording_listener_gets_its_own_default_bus_name() -> None:
    bus = EventBus(reg)
    a, b = RecordingListener(), RecordingListener()
    bus.on(OrderPaid, a)
    bus.on(OrderPaid, b)  # no DuplicateListenerError: the names differ
    names = [sub.name for sub in bus.listeners(OrderPaid)]
    assert names == [a.listener_name, b.listener_name]
    assert a.listener_name != b.listener_name
    assert RecordingListener("audit").listener_name == "eventbus.testing:audit"


def test_default_bus_name_survives_a_package_reexport(monkeypatch: pytest.MonkeyPatch) -> None:
    # eventbus/__init__ rewrites the __module__ of what it re-exports.
    monkeypatch.setattr(RecordingListener, "__module__", "eventbus")
    assert RecordingListener("audit").listener_name == "eventbus.testing:audit"


async def test_call_order_merges_listeners_by_global_sequence() -> None:
    bus = EventBus(reg)
    first, second = RecordingListener("first"), AsyncRecordingListener("second")
    bus.on(OrderPaid, first)
    bus.on(OrderPaid, second)
    await bus.emit_async(OrderPaid(order_id=1))
    await bus.emit_async(OrderPaid(order_id=2))
    assert call_order(second, first) == ["first", "second", "first", "second"]


def test_async_recording_listener_is_an_async_listener_to_the_bus() -> None:
    bus = EventBus(reg)
    bus.on(OrderPaid, AsyncRecordingListener("a"))
    bus.on(OrderPaid, RecordingListener("s"))
    assert [sub.is_async for sub in bus.listeners(OrderPaid)] == [True, False]


async def test_wait_for_returns_once_a_background_listener_ran() -> None:
    rec = AsyncRecordingListener()
    async with EventBus(reg) as bus:
        bus.on(OrderPaid, rec)
        bus.emit(OrderPaid(order_id=1))
        bus.emit(OrderPaid(order_id=2))
        with anyio.fail_after(5):
            await rec.wait_for(2)
        # two workers: the order between them is not defined
        assert sorted(e.order_id for e in rec.events) == [1, 2]  # type: ignore[attr-defined]
        with anyio.fail_after(5):
            await rec.wait_for(1)  # already satisfied: returns at once


async def test_raising_recording_listener_records_then_fails() -> None:
    bus = EventBus(reg)
    rec = RecordingListener("picky", raises=Declined("no"))
    survivor = RecordingListener("survivor")
    bus.on(OrderPaid, rec)
    bus.on(OrderPaid, survivor)
    with capture_failures(bus) as failures:
        bus.emit(OrderPaid(order_id=1))
    assert rec.events == survivor.events == [OrderPaid(order_id=1)]
    got = failures.assert_one(listener=rec, error_type=Declined)
    assert got.error_type == "tests.eventbus.test_testing.Declined"
    assert got.message == "no"


async def test_fail_times_fails_only_the_first_calls_so_a_retry_succeeds() -> None:
    bus = EventBus(reg, retry_backoff=0)
    rec = AsyncRecordingListener(raises=ValueError, fail_times=1)
    bus.on(OrderPaid, rec, retries=1)
    with capture_failures(bus) as failures:
        [outcome] = await bus.emit_async(OrderPaid(order_id=1))
    assert outcome.ok
    assert rec.count == 2
    failures.assert_none()


def test_fail_times_without_raises_is_rejected() -> None:
    with pytest.raises(ValueError, match="fail_times=1 needs raises="):
        RecordingListener(fail_times=1)


async def test_gate_holds_an_async_listener_in_flight_until_shutdown_records_it() -> None:
    gate = anyio.Event()
    rec = AsyncRecordingListener("slow", gate=gate)
    bus = EventBus(reg, shutdown_grace=0)
    with capture_failures(bus) as failures:
        async with bus:
            bus.on(OrderPaid, rec)
            bus.emit(OrderPaid(order_id=1))
            with anyio.fail_after(5):
                await rec.wait_for(1)
    got = failures.assert_one(listener=rec.listener_name)
    assert got.error_type == f"{ListenerShutdownError.__module__}.ListenerShutdownError"


async def test_capture_collects_only_while_active_and_keeps_an_existing_hook() -> None:
    hooked: list[FailureRecord] = []
    bus = EventBus(reg, on_failure=hooked.append)
    bus.on(OrderPaid, explode)
    bus.emit(OrderPaid(order_id=1))  # before: not captured
    with capture_failures(bus) as failures:
        bus.emit(OrderPaid(order_id=2))
    bus.emit(OrderPaid(order_id=3))  # after: not captured
    assert [json.loads(r.payload) for r in failures] == [{"order_id": 2}]
    assert len(hooked) == 3  # the user's hook saw everything
    assert bus.on_failure == hooked.append  # restored


async def test_capture_sees_failures_caused_while_on_failure_runs() -> None:
    """Regression test: the capture sat in on_failure, which a failure caused by the hook
    does not call again, so the capture (and the pytest fixture) missed that failure."""
    hooked: list[FailureRecord] = []

    def alert(r: FailureRecord) -> None:
        hooked.append(r)
        if r.event_name == "order.paid":
            bus.emit(OrderShipped(order_id=1))  # the alert's own listener fails too

    bus = EventBus(reg, on_failure=alert)
    bus.on("order.*", explode)
    with capture_failures(bus) as failures:
        bus.emit(OrderPaid(order_id=1))
    assert [r.event_name for r in failures] == ["order.paid", "order.shipped"]
    assert [r.event_name for r in hooked] == ["order.paid"]  # not re-entered (README)


async def test_a_hook_set_inside_a_capture_stays_and_the_capture_ends_with_its_block() -> None:
    later: list[FailureRecord] = []
    bus = EventBus(reg)
    bus.on(OrderPaid, explode)
    with capture_failures(bus) as failures:
        assert bus.on_failure is None  # the capture leaves the hook alone
        bus.on_failure = later.append
        bus.emit(OrderPaid(order_id=1))
    bus.emit(OrderPaid(order_id=2))
    assert bus.on_failure == later.append
    assert len(later) == 2
    assert [json.loads(r.payload) for r in failures] == [{"order_id": 1}]


async def test_nested_capture_marks_records_claimed_in_the_outer_one() -> None:
    bus = EventBus(reg)
    bus.on(OrderPaid, explode)
    with capture_failures(bus) as outer:
        bus.emit(OrderPaid(order_id=1))
        with capture_failures(bus) as inner:
            bus.emit(OrderPaid(order_id=2))
    assert len(outer) == 2 and len(inner) == 1
    assert outer.claimed == {inner.records[0].id}


@pytest.mark.parametrize(
    "filters",
    [
        pytest.param({"listener": explode}, id="listener-callable"),
        pytest.param({"listener": "tests.eventbus.test_testing:explode"}, id="listener-name"),
        pytest.param({"error_type": ValueError}, id="error-type-class"),
        pytest.param({"error_type": "ValueError"}, id="error-type-name"),
        pytest.param({"event": OrderShipped}, id="event-type"),
        pytest.param({"event": "order.shipped"}, id="event-name"),
        pytest.param({"match": r"boom order\.shipped"}, id="message"),
    ],
)
async def test_assert_one_filters(filters: dict[str, object]) -> None:
    bus = EventBus(reg)
    bus.on(OrderShipped, explode)
    with capture_failures(bus) as failures:
        bus.emit(OrderShipped(order_id=1))
    rec = failures.assert_one(**filters)  # type: ignore[arg-type]
    assert rec.event_name == "order.shipped"


async def test_assert_one_lists_what_was_captured_when_it_fails() -> None:
    bus = EventBus(reg)
    bus.on("order.*", explode)
    with capture_failures(bus) as failures:
        bus.emit(OrderPaid(order_id=1))
        bus.emit(OrderShipped(order_id=1))
    with pytest.raises(AssertionError, match=r"expected exactly one failure at all, found 2"):
        failures.assert_one()
    with pytest.raises(AssertionError, match=r"with error_type='KeyError', found 0.*boom"):
        failures.assert_one(error_type=KeyError)
    with pytest.raises(AssertionError, match=r"expected no failures; captured: .*order\.paid"):
        failures.assert_none()
    failures.clear()
    failures.assert_none()


def test_fresh_registry_is_empty_or_a_copy_that_never_leaks_back() -> None:
    assert len(fresh_registry()) == 0
    copy = fresh_registry(reg)
    assert copy.names() == reg.names()
    assert copy.get("order.paid") is OrderPaid

    class Local(Event, name="local.thing", registry=copy):
        pass

    assert "local.thing" in copy
    assert "local.thing" not in reg
    bus = EventBus(copy)
    seen = RecordingListener()
    bus.on(OrderPaid, seen)  # the shared classes are accepted by the copy's bus
    bus.emit(OrderPaid(order_id=1))
    assert seen.count == 1


async def test_running_bus_fails_on_an_unexpected_failure() -> None:
    with pytest.raises(UnexpectedFailuresError, match=r"1 unexpected listener failure: .*explode"):
        async with running_bus(reg) as bus:
            assert bus.running
            bus.on(OrderPaid, explode)
            bus.emit(OrderPaid(order_id=1))


async def test_running_bus_accepts_failures_it_was_told_to_expect() -> None:
    async with running_bus(reg, expect_failures=True) as bus:
        bus.on(OrderPaid, explode)
        bus.emit(OrderPaid(order_id=1))


async def test_running_bus_accepts_failures_a_capture_inside_saw() -> None:
    async with running_bus(reg) as bus:
        bus.on(OrderPaid, explode)
        with capture_failures(bus) as failures:
            bus.emit(OrderPaid(order_id=1))
        failures.assert_one(listener=explode)


async def test_running_bus_counts_shutdown_failures() -> None:
    gate = anyio.Event()
    slow = AsyncRecordingListener(gate=gate)
    with pytest.raises(UnexpectedFailuresError, match="ListenerShutdownError"):
        async with running_bus(reg, shutdown_grace=0) as bus:
            bus.on(OrderPaid, slow)
            bus.emit(OrderPaid(order_id=1))
            with anyio.fail_after(5):
                await slow.wait_for()
