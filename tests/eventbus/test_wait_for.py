"""``await bus.wait_for(...)``: first matching event after the call, timeout, cancellation."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest
from anyio import wait_all_tasks_blocked

from eventbus import Event, EventBus, MemoryFailureStore, UnknownEventError
from tests.eventbus.helpers import (
    OrderPaid,
    OrderShipped,
    Recorder,
    asyncio_or_virtual_trio,
    count_compiles,
    count_plan_builds,
    reg,
)

#: asyncio on tiny real limits; trio on a virtual clock that jumps whenever every task waits
anyio_backend = asyncio_or_virtual_trio


async def test_returns_the_first_matching_event_emitted_after_the_call(bus: EventBus) -> None:
    got: list[Event] = []

    def above_one(e: OrderPaid) -> bool:
        return e.order_id > 1

    async def wait() -> None:
        paid = await bus.wait_for(OrderPaid, where=above_one)
        got.append(paid)

    bus.emit(OrderPaid(order_id=5, user_id=1))  # before the call: not seen
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await wait_all_tasks_blocked()
            assert [s.name.split(":")[0] for s in bus.listeners(OrderPaid)] == ["eventbus.wait_for"]
            bus.emit(OrderPaid(order_id=1, user_id=1))  # where says no
            bus.emit(OrderPaid(order_id=2, user_id=1))
            bus.emit(OrderPaid(order_id=3, user_id=1))
    assert got == [OrderPaid(order_id=2, user_id=1)]
    assert bus.listeners(OrderPaid) == []


async def test_waits_by_pattern_for_emit_async_and_background_emits(bus: EventBus) -> None:
    got: list[Event] = []

    async def ship(e: OrderPaid) -> None:
        await anyio.lowlevel.checkpoint()
        bus.emit(OrderShipped(order_id=e.order_id))

    bus.on(OrderPaid, ship)

    async def wait() -> None:
        got.append(await bus.wait_for("order.shipped"))
        got.append(await bus.wait_for("order.*", where=lambda e: isinstance(e, OrderPaid)))

    with anyio.fail_after(5):
        async with bus, anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await wait_all_tasks_blocked()
            bus.emit(OrderPaid(order_id=7, user_id=1))  # a worker emits order.shipped
            await wait_all_tasks_blocked()
            await bus.emit_async(OrderPaid(order_id=8, user_id=1))
    assert got == [OrderShipped(order_id=7), OrderPaid(order_id=8, user_id=1)]


async def test_timeout_raises_naming_the_event_and_leaves_nothing(
    bus: EventBus, virtual: bool
) -> None:
    limit = 3600.0 if virtual else 0.01
    with anyio.fail_after(limit * 100), pytest.raises(TimeoutError) as caught:
        await bus.wait_for(OrderPaid, timeout=limit)
    assert str(caught.value) == f"wait_for('order.paid'): no matching event within {limit:g}s"
    assert bus.listeners(OrderPaid) == []
    assert len(bus._table) == 0


async def test_cancellation_leaves_no_subscription(bus: EventBus) -> None:
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(bus.wait_for, OrderPaid)
            tg.start_soon(bus.wait_for, "order.*")
            await wait_all_tasks_blocked()
            assert len(bus._table) == 2
            tg.cancel_scope.cancel()
    assert len(bus._table) == 0
    bus.emit(OrderPaid(order_id=1, user_id=1))


async def test_what_where_raises_reaches_the_waiter_and_the_emit_goes_on(
    bus: EventBus, store: MemoryFailureStore, rec: Recorder
) -> None:
    def picky(e: OrderPaid) -> bool:
        raise LookupError("no such order")

    bus.on(OrderPaid, rec.sync("after"))
    errors: list[BaseException] = []

    async def wait() -> None:
        try:
            await bus.wait_for(OrderPaid, where=picky)
        except LookupError as exc:
            errors.append(exc)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await wait_all_tasks_blocked()
            bus.emit(OrderPaid(order_id=1, user_id=1))
    assert [str(e) for e in errors] == ["no such order"]
    assert rec.tags == ["after"]
    assert await store.query() == []
    assert [s.name for s in bus.listeners(OrderPaid)] == ["tests.eventbus.helpers:after"]


async def test_two_waiters_each_get_the_event(bus: EventBus) -> None:
    got: list[Event] = []

    async def wait() -> None:
        got.append(await bus.wait_for(OrderPaid))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            tg.start_soon(wait)
            await wait_all_tasks_blocked()
            bus.emit(OrderPaid(order_id=1, user_id=1))
    assert got == [OrderPaid(order_id=1, user_id=1)] * 2


@pytest.mark.parametrize(
    ("args", "options", "error", "message"),
    [
        pytest.param(
            (OrderPaid,), {"where": 3}, TypeError, r"^where=3 must be a callable", id="where"
        ),
        pytest.param(
            (OrderPaid,), {"timeout": -1}, ValueError, r"^timeout=-1 must be a positive", id="neg"
        ),
        pytest.param(
            (OrderPaid,), {"timeout": "1"}, ValueError, r"^timeout='1' must be a positive", id="str"
        ),
        pytest.param(
            ("order.nope",),
            {},
            UnknownEventError,
            r"event 'order\.nope' is not declared",
            id="name",
        ),
        pytest.param(("order.**.*x",), {}, ValueError, r"invalid pattern", id="pattern"),
    ],
)
async def test_bad_arguments_are_refused_by_name(
    bus: EventBus,
    args: tuple[object, ...],
    options: dict[str, object],
    error: type[Exception],
    message: str,
) -> None:
    with anyio.fail_after(5), pytest.raises(error, match=message):
        await bus.wait_for(*args, **options)  # type: ignore[call-overload]
    assert len(bus._table) == 0


async def test_typed_result(bus: EventBus) -> None:
    other = EventBus(reg)
    async with anyio.create_task_group() as tg:

        async def later() -> None:
            await wait_all_tasks_blocked()
            other.emit(OrderPaid(order_id=4, user_id=2))

        tg.start_soon(later)
        with anyio.fail_after(5):
            paid = await other.wait_for(OrderPaid)
    assert paid.order_id == 4


async def test_a_wait_per_request_compiles_once_and_leaves_other_events_alone(
    bus: EventBus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression test: each wait_for() subscribed a listener of a new name, so each request
    recompiled the dispatch of every event type (~50x the cost of the request)."""
    replies: list[Event] = []
    bus.on(OrderPaid, lambda e: None, name="paid1")
    bus.on(OrderPaid, lambda e: None, name="paid2")
    bus.on(OrderShipped, replies.append, name="shipped")
    bus.emit(PAID := OrderPaid(order_id=1, user_id=1))
    builds = count_plan_builds(bus)
    compiled = count_compiles(monkeypatch)

    async def request(n: int) -> Event:
        async def reply() -> None:
            await anyio.lowlevel.checkpoint()
            bus.emit(OrderShipped(order_id=n))

        async with anyio.create_task_group() as tg:
            tg.start_soon(reply)
            got = await bus.wait_for(OrderShipped, where=lambda e: e.order_id == n)
        bus.emit(PAID)  # the rest of the service goes on emitting its events
        return got

    with anyio.fail_after(5):
        got = [await request(n) for n in range(20)]
    assert got == replies == [OrderShipped(order_id=n) for n in range(20)]
    assert len(compiled) == 1  # "shipped" and a waiter; without the waiter: a lone listener
    assert set(builds) == {OrderShipped}  # order.paid's dispatch was never dropped
    assert [s.name for s in bus.listeners(OrderShipped)] == ["shipped"]
