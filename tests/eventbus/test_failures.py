"""Listener failures: capture and propagate policies, records, logs and the ``on_failure`` hook."""

from __future__ import annotations

import asyncio
import json
import logging

import anyio
import pytest

from eventbus import (
    Event,
    EventBus,
    FailureRecord,
    FailureStatus,
    ListenerCancelledError,
    ListenerErrors,
    MemoryFailureStore,
)
from tests.eventbus.helpers import OrderPaid, OrderShipped, Recorder, explode, reg

PAID = OrderPaid(order_id=1, user_id=7)
SHIPPED = OrderShipped(order_id=1)


def bad_type(e: Event) -> None:
    raise TypeError("wrong")


async def explode_async(e: Event) -> None:
    await anyio.lowlevel.checkpoint()
    raise ValueError("boom async")


async def test_sync_listener_raising_mid_emit_is_recorded_once(
    bus: EventBus, store: MemoryFailureStore, rec: Recorder
) -> None:
    bus.on(OrderPaid, rec.sync("before"))
    bus.on("order.*", explode)
    bus.on(OrderPaid, rec.sync("after"))
    bus.emit(PAID)  # publisher unaffected
    assert rec.calls == [("before", PAID), ("after", PAID)]
    [r] = await store.query()
    assert (r.listener, r.error_type, r.message, r.attempts) == (
        "tests.eventbus.helpers:explode",
        "ValueError",
        "boom",
        1,
    )
    assert (r.event_name, r.status, r.payload_ok) == ("order.paid", FailureStatus.PENDING, True)
    assert "Traceback" in r.traceback and "in explode" in r.traceback
    assert json.loads(r.payload)["order_id"] == 1
    assert r.first_failed_at == r.last_failed_at and r.first_failed_at.tzinfo is not None
    assert bus.statistics().failures == 1


@pytest.mark.parametrize(
    "retries", [pytest.param(0, id="fast-path"), pytest.param(1, id="slow-path")]
)
async def test_failures_of_one_emission_share_its_event_id(
    bus: EventBus, store: MemoryFailureStore, retries: int
) -> None:
    bus.on(OrderPaid, explode, retries=retries)
    bus.on(OrderPaid, bad_type)
    bus.emit(PAID)
    bus.emit(PAID)
    records = await store.query()
    assert len(records) == 4
    assert len({r.event_id for r in records}) == 2
    assert len({r.id for r in records}) == 4


async def test_async_background_listener_raising_is_recorded_once(
    bus: EventBus, store: MemoryFailureStore, rec: Recorder
) -> None:
    bus.on(OrderPaid, explode_async)
    bus.on(OrderPaid, rec.async_("survivor"))
    async with bus:
        bus.emit(PAID)
        with anyio.fail_after(3):
            await anyio.wait_all_tasks_blocked()
    assert rec.tags == ["survivor"]
    [r] = await store.query()
    assert (r.listener, r.error_type, r.message, r.attempts) == (
        "tests.eventbus.test_failures:explode_async",
        "ValueError",
        "boom async",
        1,
    )


async def test_capture_logs_at_error_with_event_and_listener(
    bus: EventBus, caplog: pytest.LogCaptureFixture
) -> None:
    bus.on(OrderPaid, explode)
    with caplog.at_level(logging.ERROR, logger="eventbus"):
        bus.emit(PAID)
    [log] = [r for r in caplog.records if r.name == "eventbus"]
    assert log.levelno == logging.ERROR
    assert "'tests.eventbus.helpers:explode'" in log.getMessage()
    assert "'order.paid'" in log.getMessage()
    assert log.exc_info is not None and isinstance(log.exc_info[1], ValueError)


async def test_a_failure_storm_logs_a_few_lines_per_listener_and_error_and_counts_the_rest(
    store: MemoryFailureStore, caplog: pytest.LogCaptureFixture
) -> None:
    """20,000 failures: a few hundred log lines at most, the store keeps every record, and the
    suppressed lines are counted in summaries (the last ones when the bus closes)."""
    bus = EventBus(reg, store)
    flip = iter(range(10**6))

    def alternating(e: Event) -> None:
        raise (KeyError if next(flip) % 2 else ValueError)("alternating")

    bus.on(OrderPaid, explode)
    bus.on(OrderPaid, bad_type)
    bus.on(OrderPaid, alternating)
    bus.on(OrderPaid, explode, name="explode-again")
    with caplog.at_level(logging.ERROR, logger="eventbus"):
        async with bus:
            for _ in range(5_000):
                bus.emit(PAID)
    lines = [r.getMessage() for r in caplog.records if r.name == "eventbus"]
    failed_lines = [m for m in lines if " failed for 'order.paid'" in m]
    summaries = [m for m in lines if "suppressed" in m]
    assert len(lines) <= 300
    assert len(failed_lines) == 5 * 5  # 5 (listener, error type) pairs, 5 lines each
    suppressed = sum(int(m.split()[0]) for m in summaries)
    assert len(failed_lines) + suppressed == 20_000  # every failure: logged or counted
    assert len(store) == bus.statistics().failures == 20_000


async def test_propagate_raises_a_group_of_one_after_every_listener_ran(
    store: MemoryFailureStore, rec: Recorder
) -> None:
    bus = EventBus(reg, store, errors="propagate")
    bus.on(OrderPaid, explode)
    bus.on(OrderPaid, rec.sync("after"))
    with pytest.RaisesGroup(pytest.RaisesExc(ValueError, match="^boom")) as info:
        bus.emit(PAID)
    assert isinstance(info.value, ListenerErrors)
    assert str(info.value).startswith("1 listener failed for 'order.paid'")
    assert info.value.event == "order.paid"
    assert info.value.exceptions[0].__notes__ == ["listener: tests.eventbus.helpers:explode"]
    assert rec.tags == ["after"]  # the remaining listener ran
    assert len(await store.query()) == 1  # and the failure was recorded too


async def test_propagate_raises_one_group_of_several(
    store: MemoryFailureStore, rec: Recorder
) -> None:
    bus = EventBus(reg, store, errors="propagate")
    bus.on(OrderPaid, explode)
    bus.on(OrderPaid, rec.sync("middle"))
    bus.on("order.*", bad_type)
    with pytest.RaisesGroup(
        pytest.RaisesExc(ValueError, match="^boom\nlistener: tests.eventbus.helpers:explode"),
        pytest.RaisesExc(TypeError, match="^wrong\nlistener: tests.eventbus.test_failures:bad"),
    ) as info:
        bus.emit(PAID)
    assert str(info.value).startswith("2 listeners failed for 'order.paid'")
    assert rec.tags == ["middle"]
    assert len(await store.query()) == 2


async def test_propagate_group_keeps_its_type_through_split_and_except_star(
    store: MemoryFailureStore,
) -> None:
    bus = EventBus(reg, store, errors="propagate")
    bus.on(OrderPaid, explode)
    bus.on(OrderPaid, bad_type)
    with pytest.raises(ListenerErrors) as info:
        bus.emit(PAID)
    values, rest = info.value.split(ValueError)
    assert isinstance(values, ListenerErrors) and isinstance(rest, ListenerErrors)
    assert values.event == rest.event == "order.paid"
    assert [type(e) for e in values.exceptions] == [ValueError]

    caught: list[BaseException] = []
    try:
        bus.emit(PAID)
    except* ValueError as eg:
        caught.append(eg)
    except* TypeError as eg:
        caught.append(eg)
    assert [type(eg) for eg in caught] == [ListenerErrors, ListenerErrors]


async def test_per_listener_policy_overrides_the_bus(
    bus: EventBus, store: MemoryFailureStore, rec: Recorder
) -> None:
    bus.on(OrderPaid, explode, errors="propagate")
    bus.on(OrderPaid, bad_type)  # bus default: capture
    with pytest.RaisesGroup(pytest.RaisesExc(ValueError, match="^boom")):
        bus.emit(PAID)
    assert len(await store.query()) == 2

    strict = EventBus(reg, MemoryFailureStore(), errors="propagate")
    strict.on(OrderPaid, explode, errors="capture")
    strict.on(OrderPaid, rec.sync("ok"))
    strict.emit(PAID)  # nothing raised
    assert rec.tags == ["ok"]


async def test_propagate_in_emit_async_waits_for_every_listener(
    store: MemoryFailureStore, rec: Recorder
) -> None:
    bus = EventBus(reg, store, errors="propagate")
    bus.on(OrderPaid, explode_async)
    bus.on(OrderPaid, explode)
    bus.on(OrderPaid, rec.async_("survivor"))
    with pytest.RaisesGroup(
        pytest.RaisesExc(ValueError, match="^boom async\nlistener: "),
        pytest.RaisesExc(ValueError, match="^boom\nlistener: "),
    ) as info:
        await bus.emit_async(PAID)
    assert isinstance(info.value, ListenerErrors)
    assert rec.tags == ["survivor"]
    assert len(await store.query()) == 2


async def test_background_listeners_only_capture(store: MemoryFailureStore, rec: Recorder) -> None:
    bus = EventBus(reg, store, errors="propagate")
    bus.on(OrderPaid, explode_async, errors="propagate")
    bus.on(OrderPaid, rec.sync("sync"))
    async with bus:
        bus.emit(PAID)  # nothing raised: nobody waits for background listeners
        with anyio.fail_after(3):
            await anyio.wait_all_tasks_blocked()
    assert rec.tags == ["sync"]
    [r] = await store.query()
    assert r.error_type == "ValueError"


async def test_on_failure_hook_gets_each_record(store: MemoryFailureStore) -> None:
    seen: list[FailureRecord] = []
    bus = EventBus(reg, store, on_failure=seen.append)
    bus.on(OrderPaid, explode)
    bus.on(OrderPaid, bad_type)
    bus.emit(PAID)
    assert [r.error_type for r in seen] == ["ValueError", "TypeError"]
    assert {r.id for r in seen} == {r.id for r in await store.query()}


async def test_raising_on_failure_hook_is_logged_not_raised(
    store: MemoryFailureStore, rec: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    def broken_hook(record: FailureRecord) -> None:
        raise RuntimeError("pager down")

    bus = EventBus(reg, store, on_failure=broken_hook)
    bus.on(OrderPaid, explode)
    bus.on(OrderPaid, rec.sync("after"))
    with caplog.at_level(logging.ERROR, logger="eventbus"):
        bus.emit(PAID)
    assert rec.tags == ["after"]
    assert len(await store.query()) == 1
    [hook_log] = [r for r in caplog.records if "on_failure hook" in r.getMessage()]
    assert hook_log.exc_info is not None and isinstance(hook_log.exc_info[1], RuntimeError)


async def test_a_store_that_refuses_a_record_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Refusing(MemoryFailureStore):
        def record(self, failure: FailureRecord) -> None:
            raise OSError("disk full")

    seen: list[FailureRecord] = []
    bus = EventBus(reg, Refusing(), on_failure=seen.append)
    bus.on(OrderPaid, explode)
    with caplog.at_level(logging.ERROR, logger="eventbus"):
        bus.emit(PAID)
    assert len(seen) == 1  # the hook still hears about it
    assert any("refused a record" in r.getMessage() for r in caplog.records)


def test_base_exceptions_are_never_swallowed(bus: EventBus, rec: Recorder) -> None:
    def interrupt(e: Event) -> None:
        raise KeyboardInterrupt

    bus.on(OrderPaid, interrupt)
    bus.on(OrderPaid, rec.sync("after"))
    with pytest.raises(KeyboardInterrupt):
        bus.emit(PAID)
    assert bus.statistics().failures == 0


class Interrupt(BaseException):
    """A BaseException that is not a cancellation: it must reach the caller, unrecorded."""


def _holds(exc: BaseException, kind: type[BaseException]) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(kind) is not None
    return isinstance(exc, kind)


def interrupt_sync(e: Event) -> None:
    raise Interrupt


async def interrupt_async(e: Event) -> None:
    await anyio.lowlevel.checkpoint()
    raise Interrupt


@pytest.mark.parametrize("listener", [interrupt_sync, interrupt_async])
async def test_base_exceptions_are_never_swallowed_by_emit_async(
    bus: EventBus, listener: object
) -> None:
    bus.on(OrderPaid, listener)  # type: ignore[call-overload]
    with pytest.raises(BaseException) as info, anyio.fail_after(3):
        await bus.emit_async(PAID)
    assert _holds(info.value, Interrupt)
    assert bus.statistics().failures == 0


async def test_base_exceptions_are_never_swallowed_by_workers(bus: EventBus) -> None:
    bus.on(OrderPaid, interrupt_async)
    with pytest.raises(BaseException) as info, anyio.fail_after(3):
        async with bus:
            bus.emit(PAID)
            await anyio.sleep_forever()  # the worker's Interrupt must end the block
    assert _holds(info.value, Interrupt)
    assert bus.statistics().failures == 0


async def test_failure_of_an_equal_callable_is_recorded_under_its_own_name(
    bus: EventBus, store: MemoryFailureStore
) -> None:
    """Regression test: the fast path looked the failing listener up with ``==``."""

    class Account:
        def __init__(self) -> None:
            self.fail = False

        def charge(self, e: Event) -> None:
            if self.fail:
                raise ValueError("declined")

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Account)

        __hash__ = object.__hash__

    ok, failing = Account(), Account()
    failing.fail = True
    bus.on(OrderPaid, ok.charge, name="ok")
    bus.on(OrderPaid, failing.charge, name="failing")
    bus.emit(PAID)
    [r] = await store.query()
    assert r.listener == "failing"


# -- a cancellation the listener raised itself is a failure; the publisher's own is not ----


asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])


async def cancelled_elsewhere(e: Event) -> None:
    """Awaits a future that another party cancelled, as a client library may."""
    fut = asyncio.get_running_loop().create_future()
    fut.cancel()
    await fut


@asyncio_only
async def test_listener_raising_cancelled_itself_is_a_recorded_failure_and_workers_survive(
    store: MemoryFailureStore,
) -> None:
    """Regression test: the worker died and nothing was recorded."""
    bus = EventBus(reg, store, workers=1)
    send, recv = anyio.create_memory_object_stream[int](10)
    bus.on(OrderPaid, cancelled_elsewhere)

    async def after(e: OrderShipped) -> None:
        send.send_nowait(e.order_id)

    bus.on(OrderShipped, after)
    with anyio.fail_after(3):
        async with bus:
            bus.emit(PAID)
            bus.emit(PAID)
            bus.emit(SHIPPED)  # the one worker must still be there to run it
            assert await recv.receive() == 1
    send.close()
    recv.close()
    recs = await store.query()
    assert [(r.error_type, r.attempts) for r in recs] == [
        ("asyncio.exceptions.CancelledError", 1)
    ] * 2


@asyncio_only
async def test_listener_raising_cancelled_itself_is_an_outcome_of_emit_async(
    bus: EventBus, store: MemoryFailureStore
) -> None:
    """Regression test: emit_async returned no outcome and recorded nothing."""

    def sync_cancelled(e: Event) -> None:
        raise asyncio.CancelledError

    bus.on(OrderPaid, cancelled_elsewhere)
    bus.on(OrderPaid, sync_cancelled)
    with anyio.fail_after(3):
        outs = await bus.emit_async(PAID)
    assert [type(o.error) for o in outs] == [asyncio.CancelledError] * 2
    assert all(o.failure is not None for o in outs)
    assert len(await store.query()) == 2


@asyncio_only
@pytest.mark.parametrize("concurrent", [True, False])
async def test_under_propagate_a_listener_raising_cancelled_itself_is_in_the_group(
    store: MemoryFailureStore, concurrent: bool
) -> None:
    """Regression test: it was recorded but left out of ListenerErrors (a group of
    Exceptions only), so the publisher saw success under errors="propagate"."""
    bus = EventBus(reg, store, errors="propagate")

    def sync_cancelled(e: Event) -> None:
        raise asyncio.CancelledError("gone")

    bus.on(OrderPaid, cancelled_elsewhere, name="async_cancelled")
    bus.on(OrderPaid, sync_cancelled, name="sync_cancelled")
    bus.on(OrderPaid, lambda e: None, name="fine")
    with anyio.fail_after(3), pytest.raises(ListenerErrors) as caught:
        await bus.emit_async(PAID, concurrent=concurrent)
    members = [m for m in caught.value.exceptions if isinstance(m, ListenerCancelledError)]
    assert len(members) == len(caught.value.exceptions)
    assert sorted(m.listener for m in members) == ["async_cancelled", "sync_cancelled"]
    assert all(isinstance(m.__cause__, asyncio.CancelledError) for m in members)
    assert "listener 'sync_cancelled' raised CancelledError('gone') itself" in str(
        next(m for m in members if m.listener == "sync_cancelled")
    )
    recs = await store.query()
    assert sorted((r.listener, r.error_type) for r in recs) == [
        ("async_cancelled", "asyncio.exceptions.CancelledError"),
        ("sync_cancelled", "asyncio.exceptions.CancelledError"),
    ]


async def test_publisher_cancellation_still_propagates_unrecorded(
    bus: EventBus, store: MemoryFailureStore
) -> None:
    """Guards the fix above: the publisher's own cancellation is not a listener failure."""
    started = anyio.Event()

    async def waits(e: Event) -> None:
        started.set()
        await anyio.sleep_forever()

    bus.on(OrderPaid, waits)
    with anyio.fail_after(3), anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(bus.emit_async, PAID)
            await started.wait()
            scope.cancel()
    assert scope.cancelled_caught
    assert await store.query() == []


# -- the on_failure hook: sync only, never re-entered ------------------------------------


def test_async_on_failure_hook_is_refused(bus: EventBus) -> None:
    """Regression test: an async hook was called, its coroutine never awaited."""

    async def page(record: FailureRecord) -> None: ...

    with pytest.raises(TypeError, match="must be a sync callable"):
        EventBus(reg, on_failure=page)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a sync callable"):
        bus.on_failure = page
    assert bus.on_failure is None


async def test_hook_returning_an_awaitable_is_closed_and_logged(
    bus: EventBus, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression test: an awaitable returned by the hook was dropped unawaited."""
    ran: list[FailureRecord] = []

    async def alert(record: FailureRecord) -> None:
        ran.append(record)

    bus.on_failure = lambda record: alert(record)
    bus.on(OrderPaid, explode)
    with caplog.at_level(logging.ERROR, logger="eventbus"):
        bus.emit(PAID)
    assert ran == []
    assert any("returned an awaitable" in r.getMessage() for r in caplog.records)


async def test_failures_caused_inside_the_hook_do_not_reenter_it(
    store: MemoryFailureStore,
) -> None:
    """Regression test: a hook that emits multiplied one failure up to max_depth."""
    bus = EventBus(reg, store)
    calls: list[str] = []

    def alert_through_bus(record: FailureRecord) -> None:
        calls.append(record.event_name)
        bus.emit(PAID)  # its listener fails too

    bus.on_failure = alert_through_bus
    bus.on(OrderPaid, explode)
    bus.emit(PAID)
    assert calls == ["order.paid"]
    assert len(await store.query()) == 2


# -- the propagate policy on cached plans, and its notes ----------------------------------


def test_errors_policy_change_applies_to_cached_plans(bus: EventBus) -> None:
    """Regression test: setting bus.errors after the first emit was ignored by the fast path."""
    bus.on(OrderPaid, explode)
    bus.emit(PAID)  # caches a capture-only fast plan
    bus.errors = "propagate"
    with pytest.RaisesGroup(pytest.RaisesExc(ValueError, match="^boom")):
        bus.emit(PAID)
    with pytest.raises(ValueError, match="is not a policy"):
        bus.errors = "ignore"  # type: ignore[assignment]
    assert bus.errors == "propagate"


def test_reraised_exception_instance_gets_one_listener_note(bus: EventBus) -> None:
    """Regression test: a reused exception gained another note on every propagate."""
    err = ValueError("cached")

    def reraise(e: Event) -> None:
        raise err

    bus.on(OrderPaid, reraise, name="billing", errors="propagate")
    for _ in range(3):
        with pytest.raises(ListenerErrors):
            bus.emit(PAID)
    assert err.__notes__ == ["listener: billing"]
