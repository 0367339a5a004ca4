"""Causation and correlation ids: recorded across sync, async, background and nested emits,
stored in failure records, and seen by listeners through ``current_emission()``."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from eventbus import (
    Emission,
    Event,
    EventBus,
    FailureRecord,
    FailureStatus,
    MemoryFailureStore,
    current_emission,
)
from tests.eventbus.helpers import OrderPaid, OrderShipped, UserRegistered, explode, reg

PAID = OrderPaid(order_id=1, user_id=7)


def by_event(records: list[FailureRecord]) -> dict[str, FailureRecord]:
    return {r.event_name: r for r in records}


async def test_a_failure_with_no_cause_is_its_own_correlation(
    bus: EventBus, store: MemoryFailureStore
) -> None:
    bus.on(OrderPaid, explode)
    bus.emit(PAID)
    [rec] = await store.query()
    assert rec.causation_id is None
    assert rec.correlation_id == rec.event_id
    assert len(rec.event_id) == 32


async def test_sync_nested_emits_record_their_cause_and_the_first_event(
    bus: EventBus, store: MemoryFailureStore
) -> None:
    def pay(e: Event) -> None:
        bus.emit(OrderShipped(order_id=1))
        raise ValueError("after emitting")

    def ship(e: Event) -> None:
        bus.emit(UserRegistered(user_id=1))
        raise ValueError("shipping")

    bus.on(OrderPaid, pay)
    bus.on(OrderShipped, ship)
    bus.on(UserRegistered, explode)
    bus.emit(PAID)
    recs = by_event(await store.query())
    paid, shipped, registered = (
        recs["order.paid"],
        recs["order.shipped"],
        recs["user.registered"],
    )
    assert paid.causation_id is None
    assert shipped.causation_id == paid.event_id
    assert registered.causation_id == shipped.event_id
    assert {paid.correlation_id, shipped.correlation_id, registered.correlation_id} == {
        paid.event_id
    }
    assert len({paid.event_id, shipped.event_id, registered.event_id}) == 3


async def test_failures_of_one_generated_dispatch_share_the_emission(
    bus: EventBus, store: MemoryFailureStore
) -> None:
    def first(e: Event) -> None:
        bus.emit(OrderShipped(order_id=1))

    bus.on(OrderPaid, first)
    bus.on(OrderPaid, explode)
    bus.on(OrderShipped, explode, name="ship-explode")
    bus.emit(PAID)
    recs = by_event(await store.query())
    assert recs["order.shipped"].causation_id == recs["order.paid"].event_id
    assert recs["order.shipped"].correlation_id == recs["order.paid"].event_id


async def test_background_listener_emits_are_caused_by_the_queued_emission(
    bus: EventBus, store: MemoryFailureStore
) -> None:
    seen: list[Emission | None] = []

    async def grant(e: Event) -> None:
        seen.append(current_emission())
        await anyio.lowlevel.checkpoint()
        bus.emit(OrderShipped(order_id=2))

    def sync_fail(e: Event) -> None:
        raise ValueError("sync one")

    bus.on(OrderPaid, grant)
    bus.on(OrderPaid, sync_fail)
    bus.on(OrderShipped, explode)
    async with bus:
        bus.emit(PAID)
    recs = by_event(await store.query())
    paid, shipped = recs["order.paid"], recs["order.shipped"]
    assert shipped.causation_id == paid.event_id
    assert shipped.correlation_id == paid.event_id
    [em] = seen
    assert em is not None and em.event is PAID and em.event_id == paid.event_id


async def test_emit_async_listeners_sync_and_async_pass_their_emission_on(
    bus: EventBus, store: MemoryFailureStore
) -> None:
    async def a(e: Event) -> None:
        await anyio.lowlevel.checkpoint()
        await bus.emit_async(OrderShipped(order_id=3))

    def s(e: Event) -> None:
        bus.emit(UserRegistered(user_id=3))

    bus.on(OrderPaid, a)
    bus.on(OrderPaid, s)
    bus.on(OrderShipped, explode, name="x1")
    bus.on(UserRegistered, explode, name="x2")
    with anyio.fail_after(5):
        await bus.emit_async(PAID)
    recs = by_event(await store.query())
    shipped, registered = recs["order.shipped"], recs["user.registered"]
    assert shipped.causation_id == registered.causation_id
    assert shipped.correlation_id == registered.correlation_id == shipped.causation_id
    assert shipped.event_id != registered.event_id


async def test_two_async_listeners_of_emit_async_share_the_cause(
    bus: EventBus, store: MemoryFailureStore
) -> None:
    seen: list[str] = []

    async def one(e: Event) -> None:
        em = current_emission()
        assert em is not None
        seen.append(em.event_id)
        await anyio.lowlevel.checkpoint()
        bus.emit(OrderShipped(order_id=4))

    async def two(e: Event) -> None:
        em = current_emission()
        assert em is not None
        seen.append(em.event_id)

    bus.on(OrderPaid, one)
    bus.on(OrderPaid, two)
    bus.on(OrderShipped, explode)
    with anyio.fail_after(5):
        await bus.emit_async(PAID)
    [rec] = await store.query()
    assert seen[0] == seen[1] == rec.causation_id


async def test_current_emission_in_listeners_of_every_path(bus: EventBus) -> None:
    seen: list[Emission | None] = []

    def watch(e: Event) -> None:
        seen.append(current_emission())

    def inner(e: Event) -> None:
        seen.append(current_emission())
        bus.emit(UserRegistered(user_id=9))

    assert current_emission() is None
    bus.on(OrderPaid, watch)  # a lone listener: emit() calls it itself
    bus.emit(PAID)
    bus.on(OrderShipped, inner)
    bus.on(OrderShipped, watch, name="watch-2")  # a generated function
    bus.on(UserRegistered, watch, name="watch-3")
    bus.emit(OrderShipped(order_id=1))
    await bus.emit_async(PAID)
    assert current_emission() is None
    first, shipped_inner, registered, shipped_watch, via_async = seen
    assert first is not None and first.event is PAID and first.depth == 1
    assert first.causation_id is None and first.correlation_id == first.event_id
    assert shipped_inner is not None and shipped_inner is shipped_watch
    assert registered is not None and registered.depth == 2
    assert registered.causation_id == shipped_inner.event_id
    assert registered.correlation_id == shipped_inner.event_id
    assert via_async is not None and via_async.event is PAID and via_async is not first
    assert (via_async.depth, via_async.causation_id) == (1, None)
    assert via_async.correlation_id == via_async.event_id != first.event_id
    with pytest.raises(AttributeError, match="'Emission' object has no attribute 'nope'"):
        via_async.nope  # type: ignore[attr-defined]  # noqa: B018
    assert "order.paid" in repr(first) and first.event_id in repr(first)


async def test_a_listener_that_never_asks_costs_no_ids(bus: EventBus) -> None:
    made: list[Emission | None] = []

    def quiet(e: Event) -> None:
        made.append(bus._nesting.current())

    bus.on(OrderPaid, quiet)
    bus.emit(PAID)
    [em] = made
    assert em is not None and em._event_id is None  # asked for the emission, not its id


async def test_retry_failures_by_correlation_retries_one_chain(
    bus: EventBus, store: MemoryFailureStore
) -> None:
    calls: list[int] = []
    failing = True

    def pay(e: OrderPaid) -> None:
        bus.emit(OrderShipped(order_id=e.order_id))

    def ship(e: OrderShipped) -> None:
        calls.append(e.order_id)
        if failing:
            raise ValueError("warehouse down")

    bus.on(OrderPaid, pay)
    bus.on(OrderShipped, ship)
    bus.emit(OrderPaid(order_id=1, user_id=1))
    bus.emit(OrderPaid(order_id=2, user_id=1))
    first = [r for r in await store.query() if r.payload == '{"order_id": 1}']
    [rec] = first
    failing = False
    calls.clear()
    report = await bus.retry_failures(correlation=rec.correlation_id)
    assert report.resolved == 1 and len(report.items) == 1
    assert calls == [1]
    assert [r.payload for r in await store.query(status=FailureStatus.PENDING)] == [
        '{"order_id": 2}'
    ]


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_retried_listener_runs_in_the_chain_of_the_failed_emission(
    bus: EventBus, store: MemoryFailureStore, kind: str
) -> None:
    """Regression test: a retried listener ran with no emission, so what it emitted started a
    new chain (no cause, its own correlation id) and current_emission() was None in it."""
    failing = True
    seen: list[Emission | None] = []

    def work(e: OrderShipped) -> None:
        seen.append(current_emission())
        if failing:
            raise ValueError("warehouse down")
        bus.emit(UserRegistered(user_id=e.order_id))

    async def awork(e: OrderShipped) -> None:
        work(e)

    bus.on(OrderPaid, lambda e: bus.emit(OrderShipped(order_id=e.order_id)), name="pay")
    bus.on(OrderShipped, work if kind == "sync" else awork, name="ship")
    bus.on(UserRegistered, explode, name="registered")  # records the chain of what it got
    with anyio.fail_after(5):
        async with bus:  # leaving it waits for the queued call
            bus.emit(PAID)
    [shipped] = await store.query()
    failing = False
    with anyio.fail_after(5):
        assert (await bus.retry_failures()).resolved == 1
    retried = seen[-1]
    assert retried is not None
    assert (retried.event_id, retried.causation_id, retried.correlation_id) == (
        shipped.event_id,
        shipped.causation_id,
        shipped.correlation_id,
    )
    [registered] = await store.query(listener="registered")
    assert registered.causation_id == shipped.event_id
    assert registered.correlation_id == shipped.correlation_id
    assert current_emission() is None  # the retry's emission ended with the call


@pytest.mark.parametrize("bad", ["", 7])
async def test_retry_failures_refuses_a_bad_correlation(bus: EventBus, bad: object) -> None:
    with pytest.raises(ValueError, match=r"^correlation=.* must be a correlation id"):
        await bus.retry_failures(correlation=bad)  # type: ignore[arg-type]


async def test_the_recursion_guard_counts_depth_through_the_chain(
    store: MemoryFailureStore,
) -> None:
    bus = EventBus(reg, store, max_depth=3)
    depths: list[int] = []

    def again(e: Event) -> None:
        em = current_emission()
        assert em is not None
        depths.append(em.depth)
        bus.emit(PAID)

    bus.on(OrderPaid, again)
    bus.emit(PAID)
    assert depths == [1, 2, 3]
    [rec] = await store.query()
    assert rec.error_type == "eventbus.RecursionLimitError"
    assert rec.causation_id is not None and rec.correlation_id != rec.event_id


async def test_a_task_an_async_listener_leaves_running_is_not_part_of_the_chain(
    bus: EventBus,
) -> None:
    """Regression test: such a task kept the listener's emission in its context, and its
    emits took it as their cause or not depending on whether an unrelated async listener
    call happened to be in progress."""
    seen: list[tuple[str, Emission | None]] = []
    go = [anyio.Event(), anyio.Event()]
    release = anyio.Event()
    ticked = [anyio.Event(), anyio.Event()]

    def tick(e: OrderShipped) -> None:
        seen.append(("tick", current_emission()))
        ticked[e.order_id].set()

    async def busy(e: UserRegistered) -> None:
        await release.wait()

    async with anyio.create_task_group() as outlives:

        async def starter(e: OrderPaid) -> None:
            async def later() -> None:
                for i in range(2):
                    await go[i].wait()
                    seen.append(("task", current_emission()))
                    bus.emit(OrderShipped(order_id=i))

            outlives.start_soon(later)  # runs on after the listener returned

        bus.on(OrderPaid, starter)
        bus.on(OrderShipped, tick)
        bus.on(UserRegistered, busy)
        with anyio.fail_after(5):
            await bus.emit_async(PAID)
            go[0].set()  # 1) nothing else in progress
            await ticked[0].wait()
            async with anyio.create_task_group() as tg:
                tg.start_soon(bus.emit_async, UserRegistered(user_id=1))
                await anyio.wait_all_tasks_blocked()  # 2) an unrelated call is in progress
                go[1].set()
                await ticked[1].wait()
                release.set()
    assert [kind for kind, _ in seen] == ["task", "tick"] * 2
    assert seen[0][1] is None and seen[2][1] is None  # the call had ended
    for _, em in (seen[1], seen[3]):
        assert em is not None and (em.depth, em.causation_id) == (1, None)


def test_an_emit_async_in_a_nested_event_loop_is_nested_in_the_sync_emit() -> None:
    """Regression test: a sync listener (of a bus that is not running) that runs its own
    event loop to ``emit_async()``: that loop's listeners took the sync emit as their
    emission, and its emits skipped the async one in the chain."""
    import asyncio

    import trio

    bus = EventBus(reg, MemoryFailureStore())
    seen: dict[str, Emission | None] = {}
    shipped_event = OrderShipped(order_id=1)
    run_loop: list[Callable[[], object]] = [
        lambda: asyncio.run(bus.emit_async(shipped_event)),
        lambda: trio.run(bus.emit_async, shipped_event),
    ]

    def paid(e: Event) -> None:
        seen["paid"] = current_emission()
        run_loop[0]()

    async def shipped(e: Event) -> None:
        await anyio.lowlevel.checkpoint()
        seen["shipped"] = current_emission()
        bus.emit(UserRegistered(user_id=1))

    def registered(e: Event) -> None:
        seen["registered"] = current_emission()

    bus.on(OrderPaid, paid)
    bus.on(OrderShipped, shipped)
    bus.on(UserRegistered, registered)
    for _ in range(2):  # asyncio, then trio
        seen.clear()
        bus.emit(PAID)
        p, s, r = seen["paid"], seen["shipped"], seen["registered"]
        assert p is not None and s is not None and r is not None
        assert (p.event, s.event, r.event) == (PAID, shipped_event, UserRegistered(user_id=1))
        assert (s.depth, s.causation_id) == (2, p.event_id)
        assert (r.depth, r.causation_id, r.correlation_id) == (3, s.event_id, p.event_id)
        run_loop.pop(0)
    assert bus._nesting.current() is None
