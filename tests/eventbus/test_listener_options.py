"""Per-listener ``timeout=`` and ``retries=``, on virtual time where the backend allows it."""

from __future__ import annotations

import anyio
import pytest
import trio.testing

from eventbus import Event, EventBus, FailureRecord, ListenerTimeoutError, MemoryFailureStore
from tests.eventbus.helpers import OrderPaid, reg

PAID = OrderPaid(order_id=1, user_id=7)


@pytest.fixture(params=["asyncio", "trio-virtual"])
def anyio_backend(request: pytest.FixtureRequest) -> object:
    """asyncio on tiny real limits; trio on a virtual clock that jumps whenever all tasks wait."""
    if request.param == "asyncio":
        return "asyncio"
    return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})


@pytest.fixture
def virtual(anyio_backend: object) -> bool:
    return anyio_backend != "asyncio"


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
