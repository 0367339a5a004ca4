"""Background work: the bounded queue, and the drain when leaving ``async with bus:``."""

from __future__ import annotations

import contextvars

import anyio
import anyio.to_thread
import pytest
import trio.testing

from eventbus import Event, EventBus, FailureRecord, ListenerShutdownError, MemoryFailureStore
from tests.eventbus.helpers import (
    OrderPaid,
    OrderShipped,
    Recorder,
    asyncio_or_virtual_trio,
    converts_cancel,
    reg,
    swallows_cancel,
    virtual_trio,
)

PAID = OrderPaid(order_id=1, user_id=7)


#: asyncio on tiny real limits; trio on a virtual clock that jumps whenever every task waits
anyio_backend = asyncio_or_virtual_trio


@pytest.fixture
def grace(anyio_backend: object) -> float:
    """A shutdown grace period: the default 5 s on virtual time, 50 ms of real time else."""
    return 0.05 if anyio_backend == "asyncio" else 5.0


def shutdown_records(records: list[FailureRecord]) -> list[tuple[str, str, int]]:
    """``(listener tag, state, attempts)`` of each shutdown record, oldest first."""
    out = []
    for r in reversed(records):
        assert r.error_type == "eventbus.ListenerShutdownError"
        state = (
            "cancelled" if "was still running, and was cancelled" in r.message else "never started"
        )
        out.append((r.listener.rsplit(":", 1)[-1], state, r.attempts))
    return out


async def test_full_queue_drops_without_blocking_and_records_each_drop(
    store: MemoryFailureStore,
) -> None:
    started, release = anyio.Event(), anyio.Event()
    calls: list[int] = []

    async def blocked(e: OrderPaid) -> None:
        calls.append(e.order_id)
        started.set()
        await release.wait()

    bus = EventBus(reg, store, queue_size=1, workers=1)
    bus.on(OrderPaid, blocked)
    async with bus:
        with anyio.fail_after(3):
            await anyio.wait_all_tasks_blocked()  # the worker waits on the queue
            bus.emit(OrderPaid(order_id=1, user_id=0))  # taken by the worker
            await started.wait()
        bus.emit(OrderPaid(order_id=2, user_id=0))  # queued
        bus.emit(OrderPaid(order_id=3, user_id=0))  # dropped
        bus.emit(OrderPaid(order_id=4, user_id=0))  # dropped
        stats = bus.statistics()
        assert (stats.queued, stats.in_flight, stats.dropped, stats.failures) == (1, 1, 2, 2)
        drops = await store.query()
        assert [r.error_type for r in drops] == ["eventbus.ListenerDroppedError"] * 2
        assert all(r.message.startswith("dropped: queue full") for r in drops)
        assert all(r.attempts == 0 for r in drops)
        assert sorted(decode_order_id(r) for r in drops) == [3, 4]
        release.set()
    assert calls == [1, 2]
    assert bus.statistics().dropped == 2
    assert len(await store.query()) == 2  # the queued call ran: nothing else recorded


def decode_order_id(record: FailureRecord) -> int:
    import json

    value: int = json.loads(record.payload)["order_id"]
    return value


async def test_shutdown_cancels_and_records_what_did_not_finish(
    store: MemoryFailureStore, grace: float, rec: Recorder
) -> None:
    started = anyio.Event()

    async def stuck(e: Event) -> None:
        started.set()
        await anyio.Event().wait()

    bus = EventBus(reg, store, workers=1, shutdown_grace=grace)
    bus.on(OrderPaid, stuck)
    bus.on(OrderPaid, rec.async_("queued"))
    async with bus:
        bus.emit(PAID)  # stuck runs on the only worker; "queued" waits behind it
        bus.emit(PAID)
        with anyio.fail_after(3):
            await started.wait()
        start = anyio.current_time()
    took = anyio.current_time() - start
    assert rec.calls == []
    assert shutdown_records(await store.query()) == [
        ("test_shutdown_cancels_and_records_what_did_not_finish.<locals>.stuck", "cancelled", 1),
        ("queued", "never started", 0),
        (
            "test_shutdown_cancels_and_records_what_did_not_finish.<locals>.stuck",
            "never started",
            0,
        ),
        ("queued", "never started", 0),
    ]
    assert took >= grace
    stats = bus.statistics()
    assert (stats.running, stats.queued, stats.in_flight, stats.failures) == (False, 0, 0, 4)


async def test_listener_finishing_within_grace_is_not_recorded(
    store: MemoryFailureStore, grace: float, rec: Recorder
) -> None:
    async def brief(e: Event) -> None:
        await anyio.sleep(grace / 10 if grace > 1 else 0)  # real time: no race with the grace
        rec.calls.append(("brief", e))

    bus = EventBus(reg, store, workers=2, shutdown_grace=grace)
    bus.on(OrderPaid, brief)
    bus.on(OrderPaid, rec.async_("quick"))
    async with bus:
        bus.emit(PAID)
    assert sorted(rec.tags) == ["brief", "quick"]
    assert await store.query() == []


async def test_emit_during_the_drain_is_recorded_as_dropped(
    store: MemoryFailureStore, grace: float, rec: Recorder
) -> None:
    async def relay(e: OrderPaid) -> None:
        await anyio.lowlevel.checkpoint()  # the bus began to drain when the block was left
        bus.emit(OrderShipped(order_id=e.order_id))

    bus = EventBus(reg, store, shutdown_grace=grace)
    bus.on(OrderPaid, relay)
    bus.on(OrderShipped, rec.async_("shipper"))
    async with bus:
        bus.emit(PAID)
    assert rec.calls == []
    [r] = await store.query()
    assert (r.event_name, r.error_type, r.listener) == (
        "order.shipped",
        "eventbus.ListenerDroppedError",
        "tests.eventbus.helpers:shipper",
    )
    assert r.message.startswith("dropped: the bus is shutting down")


async def test_publisher_cancelling_the_block_propagates_and_loses_nothing(
    store: MemoryFailureStore, rec: Recorder
) -> None:
    started = anyio.Event()

    async def stuck(e: Event) -> None:
        started.set()
        await anyio.Event().wait()

    bus = EventBus(reg, store, workers=1)
    bus.on(OrderPaid, stuck)
    with anyio.CancelScope() as scope:
        async with bus:
            bus.emit(PAID)
            bus.emit(PAID)
            with anyio.fail_after(3):
                await started.wait()
            scope.cancel()
            await anyio.sleep_forever()
    assert scope.cancelled_caught  # the publisher's cancellation propagated
    assert not bus.running
    states = [state for _, state, _ in shutdown_records(await store.query())]
    assert states == ["cancelled", "never started"]


async def test_an_error_in_the_block_propagates_after_the_drain(
    store: MemoryFailureStore, rec: Recorder
) -> None:
    bus = EventBus(reg, store)
    bus.on(OrderPaid, rec.async_("a"))
    with pytest.raises(LookupError, match="from the body"):
        async with bus:
            bus.emit(PAID)
            raise LookupError("from the body")
    assert rec.tags == ["a"]
    assert not bus.running


async def test_aclose_stops_like_leaving_the_block(
    store: MemoryFailureStore, rec: Recorder, grace: float
) -> None:
    """aclose() drains queued work, records failures, and records what the grace cut short."""

    async def fails(e: Event) -> None:
        raise ValueError("boom")

    async def stuck(e: Event) -> None:
        await anyio.sleep_forever()

    bus = EventBus(reg, store, shutdown_grace=grace)
    bus.on(OrderPaid, rec.async_("a"))
    bus.on(OrderPaid, fails)
    bus.on(OrderPaid, stuck)
    with anyio.fail_after(grace * 10):
        await bus.__aenter__()
        assert bus.running
        bus.emit(PAID)
        await bus.aclose()
    assert not bus.running
    assert rec.tags == ["a"]  # drained
    recs = sorted(await store.query(), key=lambda r: r.listener)
    assert [(r.listener.rsplit(".", 1)[-1], r.error_type) for r in recs] == [
        ("fails", "ValueError"),
        ("stuck", "eventbus.ListenerShutdownError"),
    ]
    await bus.aclose()  # idempotent
    assert len(await store.query()) == 2


request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


async def test_background_listeners_run_in_the_publishers_context_taken_at_emit_time(
    bus: EventBus,
) -> None:
    """Regression test: workers ran every call in their own context, so a request id set
    before emit() was the default inside the listener."""
    seen: list[str] = []
    done = anyio.Event()

    async def listener(e: OrderPaid) -> None:
        await anyio.lowlevel.checkpoint()
        seen.append(request_id.get())
        request_id.set("set by the listener")  # stays in this call's copy
        if len(seen) == 2:
            done.set()

    bus.on(OrderPaid, listener)
    async with bus:
        token = request_id.set("req-1")
        bus.emit(PAID)
        request_id.set("req-2")
        bus.emit(PAID)
        request_id.reset(token)
        with anyio.fail_after(5):
            await done.wait()
        assert request_id.get() == "-"
    assert sorted(seen) == ["req-1", "req-2"]  # two workers: in either order


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


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # trio: no task.cancel() without a scope
@pytest.mark.parametrize("retries", [0, 1])
async def test_a_listener_cancelling_its_worker_task_fails_and_the_worker_lives_on(
    store: MemoryFailureStore, retries: int
) -> None:
    """Regression test: a listener that cancelled the task it ran in (``task.cancel()``, by
    itself or by a library) ended its worker for good; the call stayed "in flight" until the
    drain recorded it as cut short, and with one worker nothing else ran in the background."""
    import asyncio

    attempts: list[int] = []
    ran = anyio.Event()

    async def victim(e: Event) -> None:
        attempts.append(1)
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(0)

    async def good(e: OrderShipped) -> None:
        ran.set()

    bus = EventBus(reg, store, workers=1, retry_backoff=0)
    bus.on(OrderPaid, victim, retries=retries)
    bus.on(OrderShipped, good)
    async with bus:
        bus.emit(PAID)
        bus.emit(OrderShipped(order_id=1))
        with anyio.fail_after(3):
            await ran.wait()  # the only worker is still there
        [r] = await store.query()
        assert r.listener.rsplit(".", 1)[-1] == "victim"
        assert r.error_type == "asyncio.exceptions.CancelledError"
        assert r.attempts == len(attempts) == retries + 1
        assert bus.statistics().in_flight == 0
    assert len(await store.query()) == 1  # nothing cut short by the drain


@pytest.mark.parametrize(
    "anyio_backend",
    [
        pytest.param("asyncio", id="asyncio"),
        # virtual time, jumping only once the call is handed over: a wait on the thread with
        # the fail_after() deadline pending would jump straight to it
        pytest.param(("trio", {"clock": trio.testing.MockClock()}), id="trio-virtual"),
    ],
)
async def test_closing_waits_the_grace_period_once_for_threads_and_the_queue(
    store: MemoryFailureStore, anyio_backend: object
) -> None:
    """Regression test: calls handed over by emit_threadsafe() and the queue were each given
    the whole grace period, one after the other: closing took twice ``shutdown_grace``."""
    clock = None if anyio_backend == "asyncio" else anyio_backend[1]["clock"]  # type: ignore[index]
    grace = 0.3 if clock is None else 5.0

    async def slow(e: Event) -> None:
        await anyio.sleep(grace * 100)

    bus = EventBus(reg, store, shutdown_grace=grace)
    bus.on(OrderShipped, slow)  # handed over from a thread
    bus.on(OrderPaid, slow, name="background")  # queued by emit()
    with anyio.fail_after(grace * 10):
        await bus.__aenter__()
        future = await anyio.to_thread.run_sync(bus.emit_threadsafe, OrderShipped(order_id=1))
        if clock is not None:
            clock.autojump_threshold = 0
        bus.emit(PAID)
        await anyio.sleep(grace / 10)  # both are running
        start = anyio.current_time()
        await bus.aclose()
        took = anyio.current_time() - start
    assert future.cancelled()
    [r] = await store.query()
    assert r.listener == "background"  # cut short, and recorded so
    assert f"when the grace period ({grace:g}s) ended" in r.message
    assert grace <= took < grace * 1.5
