"""Regression tests for defects a review found in the bus core (one test per behaviour)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
import trio.testing

from eventbus import (
    Event,
    EventBus,
    FailureRecord,
    ListenerErrors,
    ListenerShutdownError,
    ListenerTimeoutError,
    MemoryFailureStore,
)
from eventbus._failures import safe_str
from eventbus._patterns import compile_pattern
from tests.eventbus.helpers import OrderPaid, OrderShipped, Recorder, explode, reg

PAID = OrderPaid(order_id=1, user_id=7)
SHIPPED = OrderShipped(order_id=1)


def count_plan_builds(bus: EventBus) -> list[type[Event]]:
    """Record each dispatch plan the bus builds (by wrapping its table's builder; private)."""
    builds: list[type[Event]] = []
    table = bus._table
    build = table._build

    def counting(cls: type[Event]) -> Any:
        builds.append(cls)
        return build(cls)

    table._build = counting  # type: ignore[method-assign]
    return builds


virtual_trio = pytest.mark.parametrize(
    "anyio_backend", [("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})]
)
asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])


async def cancelled_elsewhere(e: Event) -> None:
    """Awaits a future that another party cancelled, as a client library may."""
    fut = asyncio.get_running_loop().create_future()
    fut.cancel()
    await fut


# -- 1. a cancellation the listener raised itself -------------------------------------------------


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


# -- 2. async listeners behind a sync wrapper -----------------------------------------------------


def logged(fn: Callable[[Event], Any]) -> Callable[[Event], Any]:
    @functools.wraps(fn)
    def wrapper(e: Event) -> Any:
        return fn(e)

    return wrapper


async def test_async_listener_behind_functools_wraps_runs_as_async(bus: EventBus) -> None:
    """Regression test: it was classified as sync, so its coroutine was never awaited."""
    ran: list[Event] = []

    @logged
    async def grant(e: Event) -> str:
        ran.append(e)
        return "granted"

    bus.on(OrderPaid, grant)
    assert bus.listeners(OrderPaid)[0].is_async
    with anyio.fail_after(3):
        [out] = await bus.emit_async(PAID)
    assert (ran, out.value, out.ok) == ([PAID], "granted", True)


async def test_sync_listener_returning_an_awaitable(
    bus: EventBus, store: MemoryFailureStore
) -> None:
    """Regression test: emit() dropped the coroutine unawaited, emit_async() returned it."""
    ran: list[Event] = []

    async def work(e: Event) -> str:
        ran.append(e)
        return "done"

    def returns_coroutine(e: Event) -> Awaitable[str]:
        return work(e)

    bus.on(OrderPaid, returns_coroutine)
    with anyio.fail_after(3):
        [out] = await bus.emit_async(PAID)  # awaited
    assert (out.value, ran) == ("done", [PAID])
    bus.emit(PAID)  # closed (no "never awaited" warning) and recorded
    [rec] = await store.query()
    assert ran == [PAID]
    assert rec.error_type == "TypeError"
    assert "returns_coroutine" in rec.message
    assert "returned an awaitable; declare it async def" in rec.message


# -- 3. plans and patterns ------------------------------------------------------------------------


async def test_emit_async_reuses_the_plan_cached_by_emit(bus: EventBus, rec: Recorder) -> None:
    """Regression test: a cached fast plan made emit_async rebuild the plan on every call."""
    builds = count_plan_builds(bus)
    bus.on(OrderPaid, rec.sync("a"))
    bus.emit(PAID)
    for _ in range(3):
        await bus.emit_async(PAID)
    assert builds == [OrderPaid]
    assert rec.tags == ["a"] * 4


def test_plans_match_compiled_segments_not_the_pattern_cache(bus: EventBus, rec: Recorder) -> None:
    """Regression test: beyond 1024 patterns, lru_cache thrashed on every plan build."""
    for i in range(1100):
        bus.on(f"x{i}.*", rec.sync(f"p{i}"))
    bus.on("order.*", rec.sync("orders"))
    before = compile_pattern.cache_info()
    bus.emit(PAID)
    after = compile_pattern.cache_info()
    assert (after.hits, after.misses) == (before.hits, before.misses)
    assert rec.tags == ["orders"]


# -- 4. cancellation the bus caused ---------------------------------------------------------------


async def swallows_cancel(e: Event) -> str:
    try:
        await anyio.sleep_forever()
    except anyio.get_cancelled_exc_class():
        return "gave up quietly"
    raise AssertionError("unreachable")


async def converts_cancel(e: Event) -> None:
    try:
        await anyio.sleep_forever()
    except BaseException as exc:
        raise RuntimeError("connection aborted") from exc


@virtual_trio
async def test_timeout_is_recorded_even_if_the_listener_swallows_or_converts_it(
    bus: EventBus, store: MemoryFailureStore
) -> None:
    """Regression test: a swallowed timeout was a success, a converted one a RuntimeError."""
    bus.on(OrderPaid, swallows_cancel, timeout=1)
    bus.on(OrderPaid, converts_cancel, timeout=1)
    with anyio.fail_after(10):
        swallowed, converted = await bus.emit_async(PAID)
    assert isinstance(swallowed.error, ListenerTimeoutError)
    assert isinstance(converted.error, ListenerTimeoutError)
    assert isinstance(converted.error.__cause__, RuntimeError)
    assert [r.error_type for r in await store.query()] == ["eventbus.ListenerTimeoutError"] * 2


@virtual_trio
async def test_shutdown_records_a_job_cut_short_even_if_it_swallows_or_converts_it(
    store: MemoryFailureStore,
) -> None:
    """Regression test: a swallowed shutdown left no record, a converted one a RuntimeError."""
    bus = EventBus(reg, store, shutdown_grace=1)
    bus.on(OrderPaid, swallows_cancel)
    bus.on(OrderPaid, converts_cancel)
    with anyio.fail_after(10):
        async with bus:
            bus.emit(PAID)
            await trio.testing.wait_all_tasks_blocked()
    recs = await store.query()
    assert sorted(r.listener.rsplit(".", 1)[-1].split(":")[-1] for r in recs) == [
        "converts_cancel",
        "swallows_cancel",
    ]
    assert {r.error_type for r in recs} == {"eventbus.ListenerShutdownError"}
    assert all("was still running, and was cancelled" in r.message for r in recs)


# -- 5. failures that cannot be printed -----------------------------------------------------------


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str")


class Unrepresentable(Unprintable):
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def raises_unprintable(e: Event) -> None:
    raise Unprintable


async def async_raises_unprintable(e: Event) -> None:
    raise Unprintable


async def test_exception_with_failing_str_is_recorded_and_the_bus_survives(
    bus: EventBus, store: MemoryFailureStore, rec: Recorder
) -> None:
    """Regression test: building the record raised, to the publisher or into the task group."""
    bus.on(OrderShipped, raises_unprintable)
    bus.on(OrderShipped, rec.sync("after"))
    bus.emit(SHIPPED)
    assert rec.tags == ["after"]
    bus.on(OrderPaid, async_raises_unprintable)
    with anyio.fail_after(3):
        async with bus:
            bus.emit(PAID)
    recs = await store.query()
    assert [(r.error_type.rsplit(".", 1)[-1], r.message) for r in recs] == [
        ("Unprintable", "Unprintable()")
    ] * 2


def test_safe_str_falls_back_to_the_type_name() -> None:
    """Regression test: str() and repr() both raising must still give a message."""
    assert safe_str(Unrepresentable()) == "<unprintable Unrepresentable>"


# -- 6, 7. the on_failure hook --------------------------------------------------------------------


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


# -- 8, 9. retries --------------------------------------------------------------------------------


@virtual_trio
async def test_shutdown_keeps_the_attempts_and_last_error_of_a_retrying_job(
    store: MemoryFailureStore,
) -> None:
    """Regression test: the record said attempts=1 and lost the last error."""
    calls: list[float] = []

    async def flaky(e: Event) -> None:
        calls.append(anyio.current_time())
        raise ValueError(f"attempt {len(calls)}")

    bus = EventBus(reg, store, retry_backoff=1, shutdown_grace=2.5)
    bus.on(OrderPaid, flaky, retries=5)
    with anyio.fail_after(10):
        async with bus:
            bus.emit(PAID)
    [rec] = await store.query()
    assert len(calls) == 2  # attempts at t=0 and t=1; the backoff to t=3 is cut at 2.5
    assert (rec.error_type, rec.attempts) == ("eventbus.ListenerShutdownError", 2)
    assert "ValueError: attempt 2" in rec.message
    assert "ValueError: attempt 2" in rec.traceback  # the cause is kept


@virtual_trio
async def test_sync_listener_retries_in_emit_async_back_off(
    store: MemoryFailureStore,
) -> None:
    """Regression test: sync listeners were retried immediately inside emit_async."""
    times: list[float] = []

    def flaky(e: Event) -> None:
        times.append(anyio.current_time())
        raise ValueError("down")

    bus = EventBus(reg, store, retry_backoff=1)
    bus.on(OrderPaid, flaky, retries=3)
    with anyio.fail_after(100):
        [out] = await bus.emit_async(PAID)
    gaps = [round(b - a, 6) for a, b in zip(times, times[1:], strict=False)]
    assert gaps == [1, 2, 4]
    assert out.failure is not None and out.failure.attempts == 4


def test_emit_never_sleeps_between_sync_retries(bus: EventBus) -> None:
    """emit() retries sync listeners immediately: it never waits (counterpart of the above)."""
    calls: list[int] = []

    def flaky(e: Event) -> None:
        calls.append(1)
        raise ValueError("down")

    bus.retry_backoff = 3600
    bus.on(OrderPaid, flaky, retries=2)
    bus.emit(PAID)
    assert len(calls) == 3


# -- 10, 11. the cached fast path -----------------------------------------------------------------


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


async def test_depth_limit_is_the_same_on_fast_and_slow_paths(
    store: MemoryFailureStore,
) -> None:
    """Regression test: the fast path ignored the async depth, so nesting went deeper."""

    async def nesting(slow: bool) -> list[str]:
        bus = EventBus(reg, MemoryFailureStore(), max_depth=5)
        levels: list[str] = []

        async def hop(e: OrderPaid) -> None:
            levels.append("async")
            if e.order_id < 3:
                await bus.emit_async(OrderPaid(order_id=e.order_id + 1, user_id=0))
            else:
                bus.emit(OrderShipped(order_id=0))

        def recurse(e: OrderShipped) -> None:
            levels.append("sync")
            bus.emit(OrderShipped(order_id=e.order_id + 1))

        bus.on(OrderPaid, hop)
        # A per-listener "propagate" policy sends OrderShipped down the slow path.
        bus.on(OrderShipped, recurse, errors="propagate" if slow else None)
        with anyio.fail_after(3):
            await bus.emit_async(OrderPaid(order_id=1, user_id=0))
        assert any("RecursionLimitError" in r.traceback for r in await bus.failures.query())
        return levels

    fast, slow = await nesting(slow=False), await nesting(slow=True)
    assert fast == slow == ["async"] * 3 + ["sync"] * 2


# -- 12 and notes ---------------------------------------------------------------------------------


def test_once_options_are_keyword_checked(bus: EventBus, rec: Recorder) -> None:
    """Regression test: once(**options) accepted any keyword for the type checker.

    mypy (``warn_unused_ignores``) fails this file if the ignore below stops being needed.
    """
    bus.once(OrderPaid, rec.sync("a"), name="only-once", retries=1)
    with pytest.raises(TypeError):
        bus.once(OrderPaid, rec.sync("b"), retry=1)  # type: ignore[call-overload]
    bus.emit(PAID)
    bus.emit(PAID)
    assert rec.tags == ["a"]


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


async def test_aclose_from_another_task_is_refused(bus: EventBus) -> None:
    """Regression test: closing from another task broke the bus's task group."""
    with anyio.fail_after(3):
        async with bus:
            with pytest.RaisesGroup(pytest.RaisesExc(RuntimeError, match="from another task")):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(bus.aclose)
            assert bus.running
        assert not bus.running


def test_shutdown_error_message_names_the_last_error() -> None:
    err = ListenerShutdownError("billing", 5, started=True, last_error=ValueError("down"))
    assert str(err).endswith("its last attempt raised ValueError: down")
