"""``emit`` and ``emit_async``: order, snapshots, nesting, background work, outcomes."""

from __future__ import annotations

from collections.abc import Awaitable

import anyio
import pytest

from eventbus import (
    BusNotRunningError,
    Event,
    EventBus,
    MemoryFailureStore,
    RecursionLimitError,
)
from tests.eventbus.helpers import OrderPaid, OrderShipped, Recorder, UserRegistered, reg

PAID = OrderPaid(order_id=1, user_id=7)


def test_sync_listeners_run_inline_in_subscription_order(bus: EventBus, rec: Recorder) -> None:
    bus.on("**", rec.sync("all"))
    bus.on(OrderPaid, rec.sync("exact"))
    bus.on("*.paid", rec.sync("head"))
    bus.on("order.*", rec.sync("tail"))
    bus.on(OrderPaid, rec.sync("exact2"))
    assert bus.emit(PAID) is None  # type: ignore[func-returns-value]
    assert rec.calls == [(t, PAID) for t in ["all", "exact", "head", "tail", "exact2"]]


def test_emit_with_no_listeners_is_a_no_op(bus: EventBus) -> None:
    bus.emit(PAID)
    bus.emit("order.shipped", {"order_id": 1})


def test_subscribing_during_an_emit_does_not_change_that_emit(bus: EventBus, rec: Recorder) -> None:
    late = rec.sync("late")

    def adder(e: Event) -> None:
        rec.calls.append(("adder", e))
        bus.on(OrderPaid, late)

    bus.on(OrderPaid, adder)
    bus.emit(PAID)
    assert rec.tags == ["adder"]
    bus.off(OrderPaid, adder)
    bus.emit(PAID)
    assert rec.tags == ["adder", "late"]


def test_unsubscribing_during_an_emit_does_not_change_that_emit(
    bus: EventBus, rec: Recorder
) -> None:
    victim = rec.sync("victim")

    def remover(e: Event) -> None:
        rec.calls.append(("remover", e))
        bus.off(OrderPaid, victim)

    bus.on(OrderPaid, remover)
    bus.on(OrderPaid, victim)
    bus.emit(PAID)
    assert rec.tags == ["remover", "victim"]
    bus.emit(PAID)
    assert rec.tags == ["remover", "victim", "remover"]


async def test_subscription_changes_during_emit_async_do_not_change_it(
    bus: EventBus, rec: Recorder
) -> None:
    victim, late = rec.async_("victim"), rec.sync("late")

    def churn(e: Event) -> None:
        rec.calls.append(("churn", e))
        bus.off(OrderPaid, victim)
        bus.on(OrderPaid, late)

    bus.on(OrderPaid, churn)
    bus.on(OrderPaid, victim)
    outcomes = await bus.emit_async(PAID)
    assert [o.listener.rsplit(":")[-1].rsplit(".")[-1] for o in outcomes] == ["churn", "victim"]
    assert rec.tags == ["churn", "victim"]


def test_nested_emit_runs_inner_listeners_first(bus: EventBus, rec: Recorder) -> None:
    def ship(e: OrderPaid) -> None:
        rec.calls.append(("ship", e))
        bus.emit(OrderShipped(order_id=e.order_id))
        rec.calls.append(("shipped", e))

    bus.on(OrderPaid, ship)
    bus.on(OrderShipped, rec.sync("notify"))
    bus.emit(PAID)
    assert rec.calls == [("ship", PAID), ("notify", OrderShipped(order_id=1)), ("shipped", PAID)]


@pytest.mark.parametrize("slow_path", [False, True], ids=["fast-path", "slow-path"])
async def test_runaway_recursion_stops_and_is_recorded_once(
    bus: EventBus, store: MemoryFailureStore, slow_path: bool
) -> None:
    bus.max_depth = 5
    calls: list[int] = []

    def again(e: OrderPaid) -> None:
        calls.append(e.order_id)
        bus.emit(OrderPaid(order_id=e.order_id + 1, user_id=0))

    bus.on(OrderPaid, again, retries=1 if slow_path else 0)
    bus.emit(OrderPaid(order_id=1, user_id=0))  # the publisher is unaffected
    [record] = await store.query()
    assert record.error_type == "eventbus.RecursionLimitError"
    assert "max_depth=5" in record.message
    assert record.event_name == "order.paid"
    assert calls[:5] == [1, 2, 3, 4, 5]
    assert bus.statistics().failures == 1


async def test_runaway_recursion_through_emit_async_is_recorded_once(
    bus: EventBus, store: MemoryFailureStore
) -> None:
    bus.max_depth = 4
    depth: list[int] = []

    async def again(e: OrderPaid) -> None:
        depth.append(e.order_id)
        await bus.emit_async(OrderPaid(order_id=e.order_id + 1, user_id=0))

    bus.on(OrderPaid, again)
    [outcome] = await bus.emit_async(OrderPaid(order_id=1, user_id=0))
    assert outcome.ok  # the top call's own emit_async returned; the deepest one failed
    assert depth == [1, 2, 3, 4]
    [record] = await store.query()
    assert record.error_type == "eventbus.RecursionLimitError"


async def test_recursion_through_background_listeners_is_recorded_once(
    bus: EventBus, store: MemoryFailureStore
) -> None:
    bus.max_depth = 3
    seen: list[int] = []
    done = anyio.Event()

    async def again(e: OrderPaid) -> None:
        seen.append(e.order_id)
        try:
            bus.emit(OrderPaid(order_id=e.order_id + 1, user_id=0))
        except RecursionLimitError:
            done.set()
            raise

    bus.on(OrderPaid, again)
    async with bus:
        bus.emit(OrderPaid(order_id=1, user_id=0))
        with anyio.fail_after(3):
            await done.wait()
    assert seen == [1, 2, 3]
    [record] = await store.query()
    assert record.error_type == "eventbus.RecursionLimitError"


async def test_emit_hands_async_listeners_to_workers_and_does_not_wait(
    bus: EventBus, rec: Recorder
) -> None:
    started = anyio.Event()
    release = anyio.Event()

    async def slow(e: Event) -> None:
        rec.calls.append(("slow-start", e))
        started.set()
        await release.wait()
        rec.calls.append(("slow-end", e))

    bus.on(OrderPaid, rec.sync("before"))
    bus.on(OrderPaid, slow)
    bus.on(OrderPaid, rec.sync("after"))
    async with bus:
        bus.emit(PAID)
        # emit returned: both sync listeners ran, the async one has not even started
        assert rec.tags == ["before", "after"]
        with anyio.fail_after(3):
            await started.wait()
        assert rec.tags == ["before", "after", "slow-start"]
        release.set()
        with anyio.fail_after(3):
            await anyio.wait_all_tasks_blocked()
        assert rec.tags == ["before", "after", "slow-start", "slow-end"]


async def test_emit_with_async_listeners_needs_a_running_bus(bus: EventBus, rec: Recorder) -> None:
    bus.on(OrderPaid, rec.sync("sync-first"))
    bus.on("order.*", rec.async_("a1"))
    bus.on("*.paid", rec.async_("a2"))
    with pytest.raises(BusNotRunningError, match=r"emit\('order.paid'\) found 2 async listeners"):
        bus.emit(PAID)
    assert rec.calls == []  # refused before any listener ran
    bus.emit(UserRegistered(user_id=1))  # not an error: refused per event, not per bus
    assert rec.calls == []
    with pytest.raises(BusNotRunningError, match="1 async listener but"):
        bus.emit("order.shipped", {"order_id": 1})


async def test_emit_after_the_bus_stopped_needs_it_again(bus: EventBus, rec: Recorder) -> None:
    bus.on(OrderPaid, rec.async_("a"))
    async with bus:
        pass
    with pytest.raises(BusNotRunningError):
        bus.emit(PAID)
    async with bus:  # a bus can be entered again
        bus.emit(PAID)
    assert rec.tags == ["a"]


async def test_entering_a_running_bus_twice_is_an_error(bus: EventBus) -> None:
    async with bus:
        with pytest.raises(RuntimeError, match="already running"):
            await bus.__aenter__()
        assert bus.running and bus.statistics().running
    assert not bus.running


async def test_emit_async_returns_one_outcome_per_listener_in_order(
    bus: EventBus, store: MemoryFailureStore
) -> None:
    async def a_value(e: Event) -> int:
        await anyio.lowlevel.checkpoint()
        return 1

    def s_value(e: Event) -> int:
        return 2

    async def a_fail(e: Event) -> None:
        raise KeyError("gone")

    def s_fail(e: Event) -> None:
        raise ValueError("bad")

    for fn in (a_value, s_fail, a_fail, s_value):
        bus.on("order.*", fn)
    outcomes = await bus.emit_async(PAID)
    assert [o.listener.rsplit(".", 1)[-1] for o in outcomes] == [
        "a_value",
        "s_fail",
        "a_fail",
        "s_value",
    ]
    assert [o.value for o in outcomes] == [1, None, None, 2]
    assert [type(o.error) for o in outcomes] == [type(None), ValueError, KeyError, type(None)]
    assert [o.ok for o in outcomes] == [True, False, False, True]
    assert all(o.duration >= 0 for o in outcomes)
    assert outcomes[1].failure is not None and outcomes[1].failure.error_type == "ValueError"
    assert outcomes[2].failure is not None and outcomes[2].failure.error_type == "KeyError"
    assert {r.id for r in await store.query()} == {outcomes[1].failure.id, outcomes[2].failure.id}


async def test_emit_async_runs_async_listeners_concurrently(bus: EventBus) -> None:
    """Each listener waits for the other: only concurrent execution can finish."""
    a_ready, b_ready = anyio.Event(), anyio.Event()

    async def a(e: Event) -> str:
        a_ready.set()
        await b_ready.wait()
        return "a"

    async def b(e: Event) -> str:
        b_ready.set()
        await a_ready.wait()
        return "b"

    bus.on(OrderPaid, a)
    bus.on(OrderPaid, b)
    with anyio.fail_after(3):
        outcomes = await bus.emit_async(PAID)
    assert [o.value for o in outcomes] == ["a", "b"]


async def test_emit_async_works_without_entering_the_bus(bus: EventBus, rec: Recorder) -> None:
    bus.on(OrderPaid, rec.async_("a"))
    outcomes = await bus.emit_async("order.paid", {"order_id": 1, "user_id": 7})
    assert [o.value for o in outcomes] == ["a"]
    assert rec.calls == [("a", PAID)]


async def test_emit_async_checkpoints_even_without_listeners(bus: EventBus) -> None:
    with anyio.CancelScope() as scope:
        scope.cancel()
        await bus.emit_async(PAID)
        pytest.fail("emit_async did not checkpoint")  # pragma: no cover
    assert scope.cancelled_caught


async def test_publisher_cancellation_propagates_and_is_not_a_failure(
    bus: EventBus, store: MemoryFailureStore
) -> None:
    started = anyio.Event()

    async def forever(e: Event) -> None:
        started.set()
        await anyio.sleep_forever()

    bus.on(OrderPaid, forever, timeout=60)
    async with anyio.create_task_group() as tg:

        async def publish() -> None:
            await bus.emit_async(PAID)

        tg.start_soon(publish)
        with anyio.fail_after(3):
            await started.wait()
        tg.cancel_scope.cancel()
    assert await store.query() == []
    assert bus.statistics().failures == 0


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
