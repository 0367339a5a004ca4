"""Type-checked by mypy, never run: pins the typing of the listener API of issue 13.

The name has no ``test_`` prefix, so pytest never collects it.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import assert_type

from eventbus import (
    Emission,
    Event,
    EventBus,
    EventRegistry,
    Listener,
    Outcome,
    Subscription,
    current_emission,
)

reg = EventRegistry()


class OrderPaid(Event, name="order.paid", registry=reg):
    order_id: int


class UserRegistered(Event, name="user.registered", registry=reg):
    user_id: int


bus = EventBus(reg, max_listeners=0)


def grant_points(e: OrderPaid) -> int:
    return e.order_id


def welcome(e: UserRegistered) -> None: ...


def is_big(e: OrderPaid) -> bool:
    return e.order_id > 100


bus.on(OrderPaid, grant_points, priority=10, times=3)
bus.once(OrderPaid, grant_points, priority=-1)
bus.on(OrderPaid, grant_points, priority="high")  # type: ignore[call-overload]
bus.once(OrderPaid, grant_points, times=2)  # type: ignore[call-overload]

# subscribed(): typed like on(), a context manager giving the Listener.
assert_type(bus.subscribed(OrderPaid, grant_points, priority=1), Subscription)
bus.subscribed(OrderPaid, welcome)  # type: ignore[arg-type]
with bus.subscribed("order.*", print) as sub:
    assert_type(sub, Listener)


async def waits() -> None:
    # wait_for(): the event type's instance, or any event for a name or pattern.
    assert_type(await bus.wait_for(OrderPaid, where=is_big, timeout=1.0), OrderPaid)
    assert_type(await bus.wait_for("order.*"), Event)
    await bus.wait_for(UserRegistered, where=is_big)  # type: ignore[arg-type]
    assert_type(await bus.emit_async(OrderPaid(order_id=1), concurrent=False), list[Outcome])
    async with bus.subscribed(OrderPaid, grant_points) as listener:
        assert_type(listener, Listener)


assert_type(bus.emit_threadsafe(OrderPaid(order_id=1)), Future[list[Outcome]])
assert_type(current_emission(), Emission | None)
