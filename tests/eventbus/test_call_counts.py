"""Per-listener call counts (``count_calls``): what each emit path counts, and that a bus
that does not count runs the code it ran before counting existed."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from eventbus import Event, EventBus, ListenerErrors, ListenerStatistics, MemoryFailureStore
from tests.eventbus.helpers import OrderPaid, OrderShipped, explode, reg


def counts(bus: EventBus) -> dict[tuple[str, str], tuple[int, int]]:
    return {(s.event, s.listener): (s.calls, s.failures) for s in bus.listener_statistics()}


def ok(e: Event) -> None:
    pass


def test_a_bus_that_does_not_count_compiles_no_counting_line() -> None:
    bus = EventBus(reg)
    bus.on(OrderPaid, ok, name="a")
    bus.on(OrderPaid, explode, name="b")
    plain = bus._dispatch_source(OrderPaid)
    assert plain is not None and "calls" not in plain
    bus.count_calls = True
    counted = bus._dispatch_source(OrderPaid)
    assert counted is not None and counted.count("calls += 1") == 2
    bus.count_calls = False
    assert bus._dispatch_source(OrderPaid) == plain  # recompiled without them again


def test_a_lone_listener_is_called_directly_unless_calls_are_counted() -> None:
    bus = EventBus(reg)
    bus.on(OrderPaid, ok, name="a")
    assert bus._dispatch_source(OrderPaid) is None  # emit() calls the listener itself
    bus.count_calls = True
    assert "c0.calls += 1" in (bus._dispatch_source(OrderPaid) or "")


def test_emit_counts_sync_calls_and_failures_per_event_and_listener() -> None:
    bus = EventBus(reg, count_calls=True)
    bus.on("order.*", ok, name="all")
    bus.on(OrderPaid, explode, name="boom", retries=2)  # one delivery, three attempts
    bus.on(OrderShipped, ok, name="once", once=True)
    for n in range(3):
        bus.emit(OrderPaid(order_id=n, user_id=1))
    bus.emit(OrderShipped(order_id=1))
    bus.emit(OrderShipped(order_id=2))
    assert counts(bus) == {
        ("order.paid", "all"): (3, 0),
        ("order.paid", "boom"): (3, 3),
        ("order.shipped", "all"): (2, 0),
        ("order.shipped", "once"): (1, 0),
    }
    assert bus.listener_statistics()[0] == ListenerStatistics("order.paid", "all", 3, 0)


def test_counting_off_keeps_the_counts_and_stops_adding_to_them() -> None:
    bus = EventBus(reg)
    bus.on(OrderPaid, ok, name="a")
    bus.emit(OrderPaid(order_id=1, user_id=1))
    assert bus.listener_statistics() == []  # never counted
    bus.count_calls = True
    bus.emit(OrderPaid(order_id=2, user_id=1))
    bus.count_calls = False
    bus.emit(OrderPaid(order_id=3, user_id=1))
    assert counts(bus) == {("order.paid", "a"): (1, 0)}
    bus.count_calls = True
    bus.emit(OrderPaid(order_id=4, user_id=1))
    assert counts(bus) == {("order.paid", "a"): (2, 0)}


def test_count_calls_takes_a_bool_only() -> None:
    with pytest.raises(TypeError, match=r"count_calls='yes' must be True or False"):
        EventBus(reg, count_calls="yes")  # type: ignore[arg-type]


async def test_emit_counts_background_calls_when_queued_and_their_failures() -> None:
    done = anyio.Event()

    async def slow_fail(e: OrderPaid) -> None:
        await anyio.lowlevel.checkpoint()
        if e.order_id == 2:
            done.set()
        raise RuntimeError("later")

    bus = EventBus(reg, MemoryFailureStore(), count_calls=True, retry_backoff=0)
    bus.on(OrderPaid, slow_fail, name="bg")
    with anyio.fail_after(5):
        async with bus:
            bus.emit(OrderPaid(order_id=1, user_id=1))
            bus.emit(OrderPaid(order_id=2, user_id=1))
            await done.wait()
    assert counts(bus) == {("order.paid", "bg"): (2, 2)}


async def test_dropped_and_cut_short_background_calls_count_as_calls_and_failures() -> None:
    started = anyio.Event()

    async def never(e: OrderPaid) -> None:
        started.set()
        await anyio.sleep_forever()

    bus = EventBus(reg, count_calls=True, queue_size=1, workers=1, shutdown_grace=0)
    bus.on(OrderPaid, never, name="bg")
    with anyio.fail_after(5):
        async with bus:
            bus.emit(OrderPaid(order_id=1, user_id=1))
            await started.wait()  # the worker runs it
            bus.emit(OrderPaid(order_id=2, user_id=1))  # queued
            bus.emit(OrderPaid(order_id=3, user_id=1))  # the queue is full: dropped
        # shutdown cuts 1 short and never starts 2
        kinds = sorted(r.error_type.rsplit(".", 1)[-1] for r in await bus.failures.query())
    assert kinds == ["ListenerDroppedError", "ListenerShutdownError", "ListenerShutdownError"]
    assert counts(bus) == {("order.paid", "bg"): (3, 3)}


async def test_emit_async_counts_each_listener_call_sync_and_async() -> None:
    async def aok(e: Event) -> None:
        await anyio.lowlevel.checkpoint()

    async def afail(e: Event) -> None:
        await anyio.lowlevel.checkpoint()
        raise RuntimeError("no")

    bus = EventBus(reg, count_calls=True)
    bus.on(OrderPaid, ok, name="sync")
    bus.on(OrderPaid, aok, name="async")
    bus.on(OrderPaid, afail, name="afail")
    bus.on(OrderPaid, ok, name="twice", times=2)
    with anyio.fail_after(5):
        for n in range(3):
            await bus.emit_async(OrderPaid(order_id=n, user_id=1))
        await bus.emit_async(OrderPaid(order_id=9, user_id=1), concurrent=False)
    assert counts(bus) == {
        ("order.paid", "afail"): (4, 4),
        ("order.paid", "async"): (4, 0),
        ("order.paid", "sync"): (4, 0),
        ("order.paid", "twice"): (2, 0),
    }


async def test_emit_async_counts_the_calls_when_a_failure_propagates() -> None:
    bus = EventBus(reg, count_calls=True, errors="propagate")
    bus.on(OrderPaid, ok, name="a")
    bus.on(OrderPaid, explode, name="b")
    with anyio.fail_after(5), pytest.raises(ListenerErrors):
        await bus.emit_async(OrderPaid(order_id=1, user_id=1))
    assert counts(bus) == {("order.paid", "a"): (1, 0), ("order.paid", "b"): (1, 1)}


async def test_emit_threadsafe_is_counted_as_its_emit_async() -> None:
    bus = EventBus(reg, count_calls=True)
    bus.on(OrderPaid, ok, name="a")
    with anyio.fail_after(5):
        async with bus:
            future = await anyio.to_thread.run_sync(
                bus.emit_threadsafe, OrderPaid(order_id=1, user_id=1)
            )
            await anyio.to_thread.run_sync(future.result)
    assert counts(bus) == {("order.paid", "a"): (1, 0)}
