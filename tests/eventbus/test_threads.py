"""Threads: ``emit()`` from another thread than the running bus's loop is refused with an error
naming the fix; ``emit_threadsafe()`` hands the emit to the loop (real threads throughout)."""

from __future__ import annotations

import concurrent.futures
import functools
import json
import logging
import re
import threading
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import pytest

from eventbus import (
    BusNotRunningError,
    Event,
    EventBus,
    ListenerErrors,
    MemoryFailureStore,
    Outcome,
    PayloadError,
    UnknownEventError,
    WrongThreadError,
    current_emission,
)
from tests.eventbus.helpers import OrderPaid, OrderShipped, UserRegistered, explode, reg

PAID = OrderPaid(order_id=1, user_id=7)


async def in_thread(fn: object, *args: object) -> object:
    """Run a plain function in a real worker thread; bounded, like every await here."""
    with anyio.fail_after(10):
        return await anyio.to_thread.run_sync(fn, *args)  # type: ignore[arg-type]


def raised_by(fn: object, *args: object) -> BaseException | None:
    try:
        fn(*args)  # type: ignore[operator]
    except BaseException as exc:
        return exc
    return None


@pytest.mark.parametrize(
    "emit_args",
    [
        pytest.param((PAID,), id="hot-path"),
        pytest.param(("order.paid", {"order_id": 1, "user_id": 7}), id="by-name"),
    ],
)
async def test_emit_from_another_thread_is_refused_while_running(
    bus: EventBus, emit_args: tuple[object, ...]
) -> None:
    ran: list[int] = []
    bus.on(OrderPaid, lambda e: ran.append(threading.get_ident()), name="sync")
    async with bus:
        bus.emit(PAID)  # compiled; the loop's own thread may emit
        error = await in_thread(raised_by, bus.emit, *emit_args)
    assert isinstance(error, WrongThreadError) and isinstance(error, RuntimeError)
    loop_thread = re.escape(repr(threading.current_thread().name))
    assert re.match(
        r"^emit\('order\.paid'\) was called from thread '[^']+', but the bus runs in the event "
        rf"loop of thread {loop_thread} and is not thread-safe; from other threads use "
        r"bus\.emit_threadsafe\(event\)",
        str(error),
    )
    assert ran == [threading.get_ident()]  # nothing ran in the other thread


async def test_a_bus_run_again_in_another_thread_refuses_the_first_run_s_thread(
    bus: EventBus,
) -> None:
    ran: list[int] = []
    bus.on(OrderPaid, lambda e: ran.append(threading.get_ident()), name="sync")
    async with bus:
        bus.emit(PAID)  # this thread was the loop's
    started, stop = threading.Event(), threading.Event()

    def run_elsewhere() -> None:
        async def main() -> None:
            async with bus:
                started.set()
                await anyio.to_thread.run_sync(stop.wait, 10)

        anyio.run(main)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(in_thread, run_elsewhere)
            assert await in_thread(started.wait, 10)
            try:
                with pytest.raises(WrongThreadError):
                    bus.emit(PAID)
            finally:
                stop.set()
    assert ran == [threading.get_ident()]  # the refused emit ran nothing


async def test_emit_async_from_another_loop_thread_is_refused(bus: EventBus) -> None:
    bus.on(OrderPaid, lambda e: None, name="sync")

    def other_loop() -> BaseException | None:
        return raised_by(anyio.run, bus.emit_async, PAID)

    async with bus:
        error = await in_thread(other_loop)
    assert isinstance(error, WrongThreadError)
    assert str(error).startswith("emit_async('order.paid') was called from thread")


async def test_a_bus_that_is_not_running_takes_emits_from_any_thread(bus: EventBus) -> None:
    ran: list[int] = []
    bus.on(OrderPaid, lambda e: ran.append(threading.get_ident()), name="sync")
    async with bus:
        pass

    def worker() -> int:
        bus.emit(PAID)
        return threading.get_ident()

    other = await in_thread(worker)
    assert ran == [other]


async def test_emit_threadsafe_runs_in_the_loop_and_returns_the_outcomes(
    bus: EventBus, store: MemoryFailureStore
) -> None:
    where: list[int] = []

    async def grant(e: OrderPaid) -> str:
        where.append(threading.get_ident())
        await anyio.lowlevel.checkpoint()
        return f"granted {e.order_id}"

    bus.on(OrderPaid, grant)
    bus.on(OrderPaid, explode)

    def worker() -> list[Outcome]:
        future = bus.emit_threadsafe(PAID)
        assert isinstance(future, concurrent.futures.Future)
        return future.result(timeout=10)

    async with bus:
        outcomes = await in_thread(worker)
        by_name = await in_thread(
            lambda: bus.emit_threadsafe("order.paid", {"order_id": 2, "user_id": 1}).result(10)
        )
    assert isinstance(outcomes, list)
    assert [o.value for o in outcomes] == ["granted 1", None]  # in subscription order
    assert isinstance(outcomes[1].error, ValueError)
    assert isinstance(by_name, list) and by_name[0].value == "granted 2"
    assert where == [threading.get_ident()] * 2
    assert len(await store.query()) == 2


async def test_many_threads_at_once_lose_nothing(bus: EventBus) -> None:
    seen: list[int] = []
    bus.on(OrderPaid, lambda e: seen.append(e.order_id), name="count")
    threads, each = 8, 50

    def worker(t: int) -> int:
        futures = [
            bus.emit_threadsafe(OrderPaid(order_id=t * 1000 + i, user_id=t)) for i in range(each)
        ]
        return sum(len(f.result(timeout=10)) for f in futures)

    totals: list[object] = []
    async with bus:
        async with anyio.create_task_group() as tg:
            for t in range(threads):

                async def one(t: int = t) -> None:
                    totals.append(await in_thread(worker, t))

                tg.start_soon(one)
    assert totals == [each] * threads
    assert sorted(seen) == sorted(t * 1000 + i for t in range(threads) for i in range(each))


async def test_emit_threadsafe_when_not_running_raises_and_emits_nothing(bus: EventBus) -> None:
    seen: list[Event] = []
    bus.on(OrderPaid, seen.append, name="count")
    before = await in_thread(raised_by, bus.emit_threadsafe, PAID)
    async with bus:
        pass
    after = await in_thread(raised_by, bus.emit_threadsafe, PAID)
    for error in (before, after):
        assert isinstance(error, BusNotRunningError)
        assert str(error).startswith(
            "emit_threadsafe('order.paid') needs a running bus to hand the event to"
        )
        assert "nothing was emitted" in str(error)
    assert seen == []


async def test_emit_threadsafe_checks_the_event_in_the_calling_thread(bus: EventBus) -> None:
    async with bus:
        bad_payload = await in_thread(raised_by, bus.emit_threadsafe, "order.paid", {"x": 1})
        unknown = await in_thread(raised_by, bus.emit_threadsafe, "order.nope", {})
        other = EventBus()  # another registry: the event is unknown there
        foreign = await in_thread(raised_by, other.emit_threadsafe, PAID)
    assert isinstance(bad_payload, PayloadError)
    assert isinstance(unknown, UnknownEventError)
    assert isinstance(foreign, UnknownEventError)


async def test_emit_threadsafe_from_the_loop_thread_is_refused(bus: EventBus) -> None:
    async with bus:
        with pytest.raises(WrongThreadError, match=r"the bus's own event loop thread"):
            bus.emit_threadsafe(PAID)


async def test_propagate_reaches_the_future(store: MemoryFailureStore) -> None:
    bus = EventBus(reg, store, errors="propagate")
    bus.on(OrderPaid, explode)
    async with bus:
        error = await in_thread(lambda: bus.emit_threadsafe(PAID).exception(timeout=10))
    assert isinstance(error, ListenerErrors)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # real time: a tiny grace period
async def test_closing_waits_for_calls_from_threads_then_cancels_them(
    store: MemoryFailureStore, caplog: pytest.LogCaptureFixture
) -> None:
    bus = EventBus(reg, store, shutdown_grace=0.05)
    started = threading.Event()
    quick: list[str] = []

    async def slow(e: OrderPaid) -> None:
        started.set()
        await anyio.sleep_forever()

    async def fast(e: OrderShipped) -> None:
        await anyio.sleep(0.001)
        quick.append("done")

    bus.on(OrderPaid, slow)
    bus.on(OrderShipped, fast)
    futures: list[concurrent.futures.Future[list[Outcome]]] = []

    def worker() -> None:
        futures.append(bus.emit_threadsafe(OrderShipped(order_id=1)))
        futures.append(bus.emit_threadsafe(PAID))
        started.wait(10)

    with anyio.fail_after(10):
        async with bus:
            await in_thread(worker)
    shipped, paid = futures
    assert [o.listener.rsplit(":")[-1] for o in shipped.result(0)] == [
        "test_closing_waits_for_calls_from_threads_then_cancels_them.<locals>.fast"
    ]
    assert quick == ["done"]
    assert paid.cancelled()
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "emit_threadsafe('order.paid') was still running when the bus closed; cancelled"
    ]


async def test_cancelling_the_future_cancels_the_emit(bus: EventBus) -> None:
    started = threading.Event()
    ended = anyio.Event()

    async def slow(e: OrderPaid) -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            ended.set()

    bus.on(OrderPaid, slow)

    def worker() -> bool:
        future = bus.emit_threadsafe(PAID)
        started.wait(10)
        return future.cancel()

    with anyio.fail_after(10):
        async with bus:
            assert await in_thread(worker) is True
            await ended.wait()  # the listener saw the cancellation


def test_a_bus_that_is_not_running_takes_emits_from_many_threads_at_once() -> None:
    """Regression test: emits from several threads shared one nesting state, so one thread's
    emit became another's cause, depths grew without end, and the bus stayed "in an emit"
    for good. Each thread's emits nest on their own: sync ones, nested ones, failing ones,
    and ``emit_async()`` run by an event loop of the thread's own (asyncio and trio)."""
    import sys

    store = MemoryFailureStore(max_records=1_000_000)
    bus = EventBus(reg, store, max_depth=4)
    outer: dict[int, tuple[str, int, str | None]] = {}  # order_id: (event_id, depth, cause)
    inner: dict[int, tuple[int, str | None, str]] = {}  # order_id: (depth, cause, correlation)
    wrong: list[str] = []

    def record(e: OrderPaid | UserRegistered, n: int) -> None:
        em = current_emission()
        if em is None or em.event is not e:
            wrong.append(f"{e!r} saw {em!r}")
            return
        outer[n] = (em.event_id, em.depth, em.causation_id)
        bus.emit(OrderShipped(order_id=n))
        if n % 7 == 0:
            raise ValueError(f"pay {n}")

    def pay(e: OrderPaid) -> None:
        record(e, e.order_id)

    async def register(e: UserRegistered) -> None:
        await anyio.lowlevel.checkpoint()
        record(e, e.user_id)

    def ship(e: OrderShipped) -> None:
        em = current_emission()
        if em is None or em.event is not e:
            wrong.append(f"ship({e.order_id}) saw {em!r}")
            return
        inner[e.order_id] = (em.depth, em.causation_id, em.correlation_id)
        if e.order_id % 5 == 0:
            raise ValueError(f"ship {e.order_id}")

    bus.on(OrderPaid, pay)
    bus.on(OrderPaid, lambda e: None, name="second")  # a generated dispatch function
    bus.on(UserRegistered, register)  # async: for emit_async() in the threads' own loops
    bus.on(OrderShipped, ship)  # a lone listener: emit() calls it itself
    threads, each = 8, 150

    def sync_worker(t: int) -> None:
        for i in range(each):
            bus.emit(OrderPaid(order_id=t * 10_000 + i, user_id=t))

    def async_worker(t: int, backend: str) -> None:
        async def main() -> None:
            for i in range(each):
                await bus.emit_async(UserRegistered(user_id=t * 10_000 + i))

        anyio.run(main, backend=backend)

    workers = [threading.Thread(target=sync_worker, args=(t,)) for t in range(threads)]
    backends = ["asyncio", "trio", "asyncio", "trio"]
    workers += [
        threading.Thread(target=async_worker, args=(threads + k, b)) for k, b in enumerate(backends)
    ]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    try:
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
    finally:
        sys.setswitchinterval(interval)
    assert not any(w.is_alive() for w in workers)
    assert wrong == []
    ids = sorted(t * 10_000 + i for t in range(threads + len(backends)) for i in range(each))
    assert sorted(outer) == sorted(inner) == ids
    for n in ids:
        event_id, depth, cause = outer[n]
        assert (depth, cause) == (1, None), n
        assert inner[n] == (2, event_id, event_id), n
    records = anyio.run(functools.partial(store.query, limit=None))
    failed: dict[str, list[int]] = {"pay": [], "ship": []}
    for r in records:
        payload = json.loads(r.payload)
        n = payload.get("order_id", payload.get("user_id"))
        kind = "ship" if r.event_name == "order.shipped" else "pay"
        failed[kind].append(n)
        cause = None if kind == "pay" else outer[n][0]
        assert (r.causation_id, r.correlation_id) == (cause, outer[n][0]), r
        if kind == "pay":
            assert r.event_id == outer[n][0]
    assert sorted(failed["pay"]) == [n for n in ids if n % 7 == 0]
    assert sorted(failed["ship"]) == [n for n in ids if n % 5 == 0]
    # Nothing is left "in an emit": a new emit is a first one, of depth 1.
    outer.clear()
    bus.emit(OrderPaid(order_id=1, user_id=0))
    assert outer[1][1:] == (1, None) and inner[1][:2] == (2, outer[1][0])
    assert current_emission() is None


def test_a_trace_function_lets_no_other_thread_between_the_check_and_the_take() -> None:
    """Regression test: a trace function in Python (pdb, coverage's PyTracer) runs between
    lines, and so lets other threads run there. Checking the fast-path slot and taking it were
    two lines: another thread's emit took the slot in between, and both held it (each one's
    listener could see the other's event). Here the tracer makes that switch happen for sure,
    at the line event before the take, and the other thread's listener holds the slot while
    this thread goes on."""
    import linecache
    import sys
    from types import FrameType

    if TYPE_CHECKING:
        from _typeshed import TraceFunction

    bus = EventBus(reg, MemoryFailureStore())
    mine, theirs = OrderPaid(order_id=1, user_id=1), OrderPaid(order_id=2, user_id=2)
    seen: dict[str, object] = {}
    holds, release, done = threading.Event(), threading.Event(), threading.Event()

    def listener(e: OrderPaid) -> None:
        if e is theirs:  # the other thread: hold the slot until this thread's listener ran
            holds.set()
            release.wait(5)
            em = current_emission()
            seen["theirs"] = em and em.event
        elif e is mine:
            em = current_emission()
            seen["mine"] = em and em.event
            release.set()
            done.wait(5)  # the other thread's listener looks while this emit is in progress

    def other_thread() -> None:
        try:
            bus.emit(theirs)
        finally:
            done.set()

    bus.on(OrderPaid, listener)
    bus.emit(OrderPaid(order_id=0, user_id=0))  # compiled: the next emits take the fast path
    other = threading.Thread(target=other_thread)
    code = EventBus.emit.__code__

    def in_emit(frame: FrameType, event: str, arg: object) -> TraceFunction:
        line = linecache.getline(code.co_filename, frame.f_lineno)
        if event == "line" and not holds.is_set() and "nesting.top = event" in line:
            if bus._nesting.top is None:  # the slot is free: the other thread takes it now
                other.start()
                holds.wait(5)
        return in_emit

    def tracer(frame: FrameType, event: str, arg: object) -> TraceFunction | None:
        return in_emit if frame.f_code is code else None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        bus.emit(mine)
    finally:
        sys.settrace(previous)
        release.set()
        if other.ident is not None:
            other.join(5)
    assert other.ident is not None and not other.is_alive()  # the switch did happen
    assert seen == {"mine": mine, "theirs": theirs}
    assert bus._nesting.top is None  # at rest again


# -- emit_threadsafe() while the loop ends: an error, never a hang --------------------------


@pytest.mark.parametrize("end", ["stopped", "closed"])
def test_emit_threadsafe_racing_the_end_of_the_loop_raises_bus_not_running(end: str) -> None:
    """Regression test: a call that read the loop before the bus closed and got its callback
    in after the loop's last iteration waited forever (``stopped``: run_until_complete
    returned and the loop was not closed yet); one that got in after the loop closed raised
    a bare RuntimeError from asyncio (``closed``)."""
    import asyncio

    bus = EventBus(reg)
    bus.on(OrderPaid, lambda e: None)
    loop = asyncio.new_event_loop()
    started, release, stopped, closed = (threading.Event() for _ in range(4))

    async def run_bus() -> None:
        async with bus:
            started.set()
            await anyio.to_thread.run_sync(release.wait)

    def loop_thread() -> None:
        loop.run_until_complete(run_bus())
        stopped.set()
        if end == "closed":
            loop.close()
            closed.set()

    real = loop.call_soon_threadsafe

    def racing(callback: Any, *args: Any) -> Any:
        if threading.current_thread().name != "publisher":  # the loop's own helpers
            return real(callback, *args)
        # emit_threadsafe() checked that the bus runs; the bus closes, the loop ends now
        release.set()
        assert stopped.wait(5)
        if end == "closed":
            assert closed.wait(5)
        return real(callback, *args)

    runner = threading.Thread(target=loop_thread, daemon=True)
    runner.start()
    assert started.wait(5)
    loop.call_soon_threadsafe = racing  # type: ignore[method-assign,assignment]
    raised: list[BaseException] = []

    def publisher() -> None:
        try:
            bus.emit_threadsafe(PAID)
        except BaseException as exc:
            raised.append(exc)

    caller = threading.Thread(
        target=publisher, name="publisher", daemon=True
    )  # daemon: a hang must not block
    caller.start()
    caller.join(5)
    runner.join(5)
    if not loop.is_closed():
        loop.close()
    assert not caller.is_alive(), "emit_threadsafe() hung"
    assert [type(e) for e in raised] == [BusNotRunningError]
    assert "emit_threadsafe('order.paid') needs a running bus" in str(raised[0])
