"""``emit_async(event, concurrent=False)``: listeners awaited one after another, in order."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel
import pytest

from eventbus import Event, EventBus, MemoryFailureStore
from tests.eventbus.helpers import OrderPaid, explode

PAID = OrderPaid(order_id=1, user_id=7)


async def test_async_listeners_never_overlap_and_keep_their_order(bus: EventBus) -> None:
    log: list[str] = []
    running = 0

    def make(tag: str) -> Callable[[Event], Awaitable[str]]:
        async def listener(e: Event) -> str:
            nonlocal running
            running += 1
            log.append(f"start {tag} ({running} running)")
            await anyio.lowlevel.checkpoint()
            await anyio.lowlevel.checkpoint()
            log.append(f"end {tag}")
            running -= 1
            return tag

        listener.__qualname__ = tag
        return listener

    bus.on(OrderPaid, make("a"))
    bus.on(OrderPaid, lambda e: log.append("sync b"), name="b")
    bus.on(OrderPaid, make("c"))
    with anyio.fail_after(5):
        outcomes = await bus.emit_async(PAID, concurrent=False)
    assert log == [
        "start a (1 running)",
        "end a",
        "sync b",
        "start c (1 running)",
        "end c",
    ]
    assert [o.listener.rsplit(":")[-1] for o in outcomes] == ["a", "b", "c"]
    assert [o.value for o in outcomes] == ["a", None, "c"]


async def test_a_failure_does_not_stop_the_rest(bus: EventBus, store: MemoryFailureStore) -> None:
    ran: list[str] = []

    async def boom(e: Event) -> None:
        await anyio.lowlevel.checkpoint()
        raise ValueError("first fails")

    async def after(e: Event) -> None:
        ran.append("after")

    bus.on(OrderPaid, boom)
    bus.on(OrderPaid, explode)
    bus.on(OrderPaid, after)
    with anyio.fail_after(5):
        first, second, third = await bus.emit_async(PAID, concurrent=False)
    assert ran == ["after"]
    assert isinstance(first.error, ValueError) and isinstance(second.error, ValueError)
    assert third.ok
    assert len(await store.query()) == 2


async def test_propagate_raises_once_all_ran(store: MemoryFailureStore) -> None:
    from tests.eventbus.helpers import reg

    bus = EventBus(reg, store, errors="propagate")
    ran: list[str] = []

    async def boom(e: Event) -> None:
        raise ValueError("boom")

    async def later(e: Event) -> None:
        ran.append("later")

    bus.on(OrderPaid, boom)
    bus.on(OrderPaid, later)
    with pytest.RaisesGroup(pytest.RaisesExc(ValueError, match="^boom")), anyio.fail_after(5):
        await bus.emit_async(PAID, concurrent=False)
    assert ran == ["later"]


async def test_timeouts_and_retries_apply_in_sequence(store: MemoryFailureStore) -> None:
    from tests.eventbus.helpers import reg

    bus = EventBus(reg, store, retry_backoff=0)
    attempts: list[int] = []

    async def flaky(e: Event) -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise ValueError("not yet")
        return "ok"

    bus.on(OrderPaid, flaky, retries=2)
    with anyio.fail_after(5):
        [out] = await bus.emit_async(PAID, concurrent=False)
    assert out.value == "ok" and len(attempts) == 3


@pytest.mark.parametrize("bad", [None, 0, "no"])
async def test_concurrent_must_be_a_bool(bus: EventBus, bad: object) -> None:
    with pytest.raises(TypeError, match=r"^concurrent=.* must be True or False"):
        await bus.emit_async(PAID, concurrent=bad)  # type: ignore[arg-type]


async def test_no_listeners_returns_nothing(bus: EventBus) -> None:
    assert await bus.emit_async(PAID, concurrent=False) == []
