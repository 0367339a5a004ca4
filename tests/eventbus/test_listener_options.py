"""Per-listener ``timeout=`` and ``retries=``, on virtual time where the backend allows it."""

from __future__ import annotations

import anyio
import pytest

from eventbus import Event, EventBus, FailureRecord, ListenerTimeoutError, MemoryFailureStore
from tests.eventbus.helpers import (
    OrderPaid,
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
def limit(virtual: bool) -> float:
    """A timeout that expires fast: an hour of virtual time on trio, 10 ms of real time else."""
    return 3600.0 if virtual else 0.01


async def never(e: Event) -> None:
    await anyio.Event().wait()


async def test_timeout_cancels_and_records_in_emit_async(
    store: MemoryFailureStore, limit: float
) -> None:
    bus = EventBus(reg, store)
    bus.on(OrderPaid, never, timeout=limit)
    with anyio.fail_after(limit * 100):
        [out] = await bus.emit_async(PAID)
    assert isinstance(out.error, ListenerTimeoutError)
    assert isinstance(out.error, TimeoutError)
    assert out.error.timeout == limit
    [r] = await store.query()
    assert (r.error_type, r.listener, r.attempts) == (
        "eventbus.ListenerTimeoutError",
        "tests.eventbus.test_listener_options:never",
        1,
    )
    assert f"timeout={limit:g}s" in r.message


async def test_timeout_cancels_and_records_a_background_listener(
    store: MemoryFailureStore, limit: float
) -> None:
    recorded = anyio.Event()
    bus = EventBus(reg, store, on_failure=lambda r: recorded.set())
    bus.on(OrderPaid, never, timeout=limit)
    async with bus:
        bus.emit(PAID)
        with anyio.fail_after(limit * 100):
            await recorded.wait()
    [r] = await store.query()
    assert r.error_type == "eventbus.ListenerTimeoutError"


async def test_listener_finishing_in_time_is_not_a_failure(
    store: MemoryFailureStore, limit: float, virtual: bool
) -> None:
    async def quick(e: Event) -> str:
        await anyio.sleep(limit / 10 if virtual else 0)  # no real-time race on a loaded machine
        return "done"

    bus = EventBus(reg, store)
    bus.on(OrderPaid, quick, timeout=limit)
    [out] = await bus.emit_async(PAID)
    assert out.value == "done" and out.ok
    assert await store.query() == []


def test_timeout_on_a_sync_listener_is_refused() -> None:
    bus = EventBus(reg)
    with pytest.raises(ValueError, match="async listeners only.*cannot be cancelled"):
        bus.on(OrderPaid, lambda e: None, timeout=1.0)


async def test_sync_retries_rerun_and_record_once_with_attempts(
    store: MemoryFailureStore,
) -> None:
    bus = EventBus(reg, store)
    calls: list[int] = []

    def always(e: Event) -> None:
        calls.append(1)
        raise ValueError(f"attempt {len(calls)}")

    bus.on(OrderPaid, always, retries=2)
    bus.emit(PAID)
    assert len(calls) == 3
    [r] = await store.query()
    assert (r.attempts, r.message) == (3, "attempt 3")


def test_sync_listener_succeeding_on_a_retry_is_not_recorded(store: MemoryFailureStore) -> None:
    bus = EventBus(reg, store)
    calls: list[int] = []

    def second_time_lucky(e: Event) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("first attempt")

    bus.on(OrderPaid, second_time_lucky, retries=3)
    bus.emit(PAID)
    assert len(calls) == 2
    assert len(store) == 0


async def test_async_retries_back_off_and_record_once(
    store: MemoryFailureStore, virtual: bool
) -> None:
    backoff = 1.0 if virtual else 0.001
    bus = EventBus(reg, store, retry_backoff=backoff)
    times: list[float] = []

    async def always(e: Event) -> None:
        times.append(anyio.current_time())
        raise ValueError(f"attempt {len(times)}")

    bus.on(OrderPaid, always, retries=3)
    with anyio.fail_after(100 if virtual else 5):
        [out] = await bus.emit_async(PAID)
    assert isinstance(out.error, ValueError) and str(out.error) == "attempt 4"
    assert out.failure is not None and out.failure.attempts == 4
    [r] = await store.query()
    assert r.attempts == 4
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    if virtual:  # exact on virtual time: the backoff doubles
        assert gaps == pytest.approx([1.0, 2.0, 4.0])
    else:
        assert all(g >= d * 0.9 for g, d in zip(gaps, [0.001, 0.002, 0.004], strict=True))


async def test_async_listener_succeeding_on_a_retry_is_not_recorded(
    store: MemoryFailureStore,
) -> None:
    bus = EventBus(reg, store, retry_backoff=0)
    calls: list[int] = []

    async def second_time_lucky(e: Event) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("first attempt")
        return "ok"

    bus.on(OrderPaid, second_time_lucky, retries=1)
    [out] = await bus.emit_async(PAID)
    assert out.value == "ok" and out.failure is None
    assert len(calls) == 2
    assert await store.query() == []


async def test_background_retries_record_once(store: MemoryFailureStore) -> None:
    seen: list[FailureRecord] = []
    bus = EventBus(reg, store, retry_backoff=0, on_failure=seen.append)
    calls: list[int] = []

    async def always(e: Event) -> None:
        calls.append(1)
        raise ValueError("nope")

    bus.on(OrderPaid, always, retries=2)
    async with bus:
        bus.emit(PAID)
    assert len(calls) == 3
    assert [r.attempts for r in seen] == [3]


async def test_timeout_is_retried_and_recorded_once(
    store: MemoryFailureStore, limit: float
) -> None:
    bus = EventBus(reg, store, retry_backoff=0)
    bus.on(OrderPaid, never, timeout=limit, retries=1)
    [out] = await bus.emit_async(PAID)
    assert isinstance(out.error, ListenerTimeoutError)
    [r] = await store.query()
    assert (r.error_type, r.attempts) == ("eventbus.ListenerTimeoutError", 2)


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
