"""emit_async's three ways of running async listeners keep the same rules.

One async listener runs in the publisher's task; two or more run as asyncio tasks joined under
a task group's rules on asyncio, and in an anyio task group on trio. Each test runs with one
and with three listeners, on both backends (the ``anyio_backend`` fixture), so every runner
meets every rule.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Awaitable, Callable, Generator
from typing import Any

import anyio
import pytest
from anyio.lowlevel import checkpoint

from eventbus import Event, EventBus, ListenerTimeoutError, MemoryFailureStore
from tests.eventbus.helpers import OrderPaid

PAID = OrderPaid(order_id=1, user_id=7)

runners = pytest.mark.parametrize(
    "count", [pytest.param(1, id="in-the-publisher-task"), pytest.param(3, id="task-group")]
)

where: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="unset")


class Interrupt(BaseException):
    """Not a cancellation: it must reach the publisher, unrecorded."""


def subscribe(
    bus: EventBus, count: int, make: Callable[[int], Callable[[Event], Awaitable[object]]]
) -> None:
    for i in range(count):
        bus.on(OrderPaid, make(i), name=f"listener{i}")


@runners
async def test_timeouts_cancel_and_record_each_listener(
    bus: EventBus, store: MemoryFailureStore, count: int
) -> None:
    def make(i: int) -> Callable[[Event], Awaitable[None]]:
        async def never(e: Event) -> None:
            await anyio.sleep_forever()

        return never

    for i in range(count):
        bus.on(OrderPaid, make(i), name=f"listener{i}", timeout=0.01)
    with anyio.fail_after(5):
        outs = await bus.emit_async(PAID)
    assert [type(o.error) for o in outs] == [ListenerTimeoutError] * count
    assert sorted(r.listener for r in await store.query()) == [f"listener{i}" for i in range(count)]


@runners
async def test_publisher_cancellation_reaches_every_listener_unrecorded(
    bus: EventBus, store: MemoryFailureStore, count: int
) -> None:
    started: list[int] = []
    cancelled: list[int] = []
    all_started = anyio.Event()

    def make(i: int) -> Callable[[Event], Awaitable[None]]:
        async def waits(e: Event) -> None:
            started.append(i)
            if len(started) == count:
                all_started.set()
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                cancelled.append(i)
                raise

        return waits

    subscribe(bus, count, make)
    with anyio.fail_after(5), anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(bus.emit_async, PAID)
            await all_started.wait()
            scope.cancel()
    assert scope.cancelled_caught
    assert sorted(cancelled) == list(range(count))
    assert await store.query() == []


@runners
@pytest.mark.parametrize("options", [{"timeout": 5}, {"retries": 2}], ids=str)
async def test_publisher_cancellation_of_a_wrapped_listener_is_neither_recorded_nor_retried(
    bus: EventBus, store: MemoryFailureStore, count: int, options: dict[str, Any]
) -> None:
    """Regression test: on asyncio, with several listeners, the bus's own cancellation of a
    listener with timeout= or retries= (the publisher was cancelled) was taken for the
    listener's own: recorded as its failure, or retried while the publisher waited."""
    calls: list[int] = []
    all_started = anyio.Event()

    def make(i: int) -> Callable[[Event], Awaitable[None]]:
        async def waits(e: Event) -> None:
            calls.append(i)
            if len(calls) == count:
                all_started.set()
            await anyio.sleep_forever()

        return waits

    for i in range(count):
        bus.on(OrderPaid, make(i), name=f"listener{i}", **options)
    with anyio.fail_after(5), anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(bus.emit_async, PAID)
            await all_started.wait()
            scope.cancel()
    assert scope.cancelled_caught
    assert sorted(calls) == list(range(count))  # each called once: nothing retried
    assert await store.query() == []


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("options", [{"timeout": 5}, {"retries": 2}], ids=str)
async def test_a_publisher_cancelled_by_asyncio_timeout_waits_for_no_retry(
    bus: EventBus, store: MemoryFailureStore, options: dict[str, Any]
) -> None:
    """The same, with the publisher's task cancelled by ``asyncio.timeout()`` (a plain
    ``task.cancel()``, no anyio scope): the cancellation reaches it at once."""
    import asyncio

    calls: list[str] = []

    async def slow(e: Event) -> None:
        calls.append("slow")
        await anyio.sleep_forever()

    async def other(e: Event) -> None:
        await anyio.sleep_forever()

    bus.on(OrderPaid, slow, **options)
    bus.on(OrderPaid, other)
    with anyio.fail_after(5), pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await bus.emit_async(PAID)
    assert calls == ["slow"]
    assert await store.query() == []


async def test_a_base_exception_cancels_the_sibling_listeners(
    bus: EventBus, store: MemoryFailureStore
) -> None:
    cancelled: list[str] = []

    async def waits(e: Event) -> None:
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.append("waits")
            raise

    async def interrupts(e: Event) -> None:
        await checkpoint()
        raise Interrupt

    bus.on(OrderPaid, waits)
    bus.on(OrderPaid, interrupts)
    with pytest.raises(BaseException) as info, anyio.fail_after(5):
        await bus.emit_async(PAID)
    # Raised as itself on both backends (regression test: trio's nursery wrapped it in a
    # BaseExceptionGroup, so ``except KeyboardInterrupt`` missed a listener's Ctrl-C there)
    assert type(info.value) is Interrupt
    assert cancelled == ["waits"]
    assert await store.query() == []


async def test_each_listener_of_a_task_group_gets_its_own_context_copy(bus: EventBus) -> None:
    seen: list[str] = []

    def make(i: int) -> Callable[[Event], Awaitable[None]]:
        async def sets(e: Event) -> None:
            seen.append(where.get())
            where.set(f"listener{i}")
            await checkpoint()
            seen.append(where.get())

        return sets

    subscribe(bus, 2, make)
    token = where.set("publisher")
    try:
        with anyio.fail_after(5):
            await bus.emit_async(PAID)
        assert where.get() == "publisher"
    finally:
        where.reset(token)
    assert sorted(seen) == ["listener0", "listener1", "publisher", "publisher"]


def returns(value: str) -> Callable[[Event], str]:
    def sync(e: Event) -> str:
        return value

    return sync


@runners
async def test_outcomes_keep_subscription_order_with_sync_listeners_between(
    bus: EventBus, count: int
) -> None:
    def make(i: int) -> Callable[[Event], Awaitable[str]]:
        async def slow_first(e: Event) -> str:
            for _ in range(count - i):  # the first subscribed finishes last
                await checkpoint()
            return f"async{i}"

        return slow_first

    for i in range(count):
        bus.on(OrderPaid, make(i), name=f"async{i}")
        bus.on(OrderPaid, returns(f"sync{i}"), name=f"sync{i}")
    with anyio.fail_after(5):
        outs = await bus.emit_async(PAID)
    expected = [name for i in range(count) for name in (f"async{i}", f"sync{i}")]
    assert [o.listener for o in outs] == expected
    assert [o.value for o in outs] == expected


@runners
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # trio: no Cancelled without a scope
async def test_a_listener_raising_a_cancellation_itself_is_its_outcome(
    bus: EventBus, store: MemoryFailureStore, count: int
) -> None:
    """Not the publisher's cancellation: recorded, returned, and the others still run."""
    import asyncio

    def make(i: int) -> Callable[[Event], Awaitable[object]]:
        async def listener(e: Event) -> str:
            await checkpoint()
            if i == 0:
                fut = asyncio.get_running_loop().create_future()
                fut.cancel()
                await fut  # raises CancelledError, not ours
            return f"ok{i}"

        return listener

    subscribe(bus, count, make)
    with anyio.fail_after(5):
        outcomes = await bus.emit_async(PAID)
    assert isinstance(outcomes[0].error, asyncio.CancelledError)
    assert outcomes[0].failure is not None
    assert [o.value for o in outcomes[1:]] == [f"ok{i}" for i in range(1, count)]
    assert [r.listener for r in await store.query()] == ["listener0"]


def guarded(fn: Callable[[Event], Awaitable[object]]) -> Callable[[Event], Awaitable[object]]:
    """A sync decorator around an async listener (``functools.wraps``: still an async
    listener) whose guard raises before the coroutine is made."""

    @functools.wraps(fn)
    def wrapper(e: Event) -> Awaitable[object]:
        raise PermissionError("not allowed")

    return wrapper


class Later:
    """An awaitable that is not a coroutine (what a decorator may return)."""

    def __init__(self, value: str) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, None, str]:
        yield from checkpoint().__await__()
        return self.value


@runners
async def test_a_listener_raising_before_its_coroutine_exists_is_its_own_failure(
    bus: EventBus, store: MemoryFailureStore, count: int
) -> None:
    """Regression test: on asyncio, with several async listeners, what a sync wrapper raised
    escaped emit_async() as the bus's error, and orphaned the listeners already started."""
    done: list[int] = []

    def make(i: int) -> Callable[[Event], Awaitable[object]]:
        async def listener(e: Event) -> str:
            await checkpoint()
            done.append(i)
            return f"ok{i}"

        return listener if i else guarded(listener)

    subscribe(bus, count, make)
    with anyio.fail_after(5):
        outs = await bus.emit_async(PAID)
    assert isinstance(outs[0].error, PermissionError) and outs[0].failure is not None
    assert [o.value for o in outs[1:]] == [f"ok{i}" for i in range(1, count)]
    assert sorted(done) == list(range(1, count))  # all of them finished: none orphaned
    assert [r.listener for r in await store.query()] == ["listener0"]


@runners
async def test_an_async_listener_returning_another_awaitable_is_awaited(
    bus: EventBus, store: MemoryFailureStore, count: int
) -> None:
    def make(i: int) -> Callable[[Event], Awaitable[object]]:
        async def listener(e: Event) -> str:
            return "unused"

        @functools.wraps(listener)
        def wrapper(e: Event) -> Awaitable[str]:
            return Later(f"later{i}")

        return wrapper

    subscribe(bus, count, make)
    with anyio.fail_after(5):
        outs = await bus.emit_async(PAID)
    assert [o.value for o in outs] == [f"later{i}" for i in range(count)]
    assert await store.query() == []


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # trio: no task.cancel() without a scope
@pytest.mark.parametrize("options", [{}, {"timeout": 5}, {"retries": 1}], ids=str)
async def test_a_listener_whose_task_is_cancelled_by_a_third_party_is_its_outcome(
    bus: EventBus, store: MemoryFailureStore, options: dict[str, Any]
) -> None:
    """Regression test: with timeout= or retries=, such a call left ``None`` among the
    outcomes and no record."""
    import asyncio

    async def victim(e: Event) -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()  # a library that cancels "its" task
        await asyncio.sleep(0)

    async def other(e: Event) -> str:
        return "ok"

    bus.on(OrderPaid, victim, **options)
    bus.on(OrderPaid, other)
    with anyio.fail_after(5):
        outs = await bus.emit_async(PAID)
    assert isinstance(outs[0].error, asyncio.CancelledError) and outs[0].failure is not None
    assert outs[1].value == "ok"
    [r] = await store.query()
    assert r.listener.rsplit(".", 1)[-1] == "victim"
    assert r.error_type == "asyncio.exceptions.CancelledError"
    assert r.attempts == 1 + options.get("retries", 0)
