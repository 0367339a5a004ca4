"""Type-checked by mypy, never run: pins the typing of ``bus.on`` and the store Protocol.

The name has no ``test_`` prefix, so pytest never collects it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import assert_type

from eventbus import Event, EventBus, EventRegistry, MemoryFailureStore
from eventbus.abc import FailureStore

reg = EventRegistry()


class OrderPaid(Event, name="order.paid", registry=reg):
    order_id: int


class UserRegistered(Event, name="user.registered", registry=reg):
    user_id: int


bus = EventBus(reg)

paid = OrderPaid(order_id=1)
assert_type(paid.order_id, int)
OrderPaid(order_id="1")  # type: ignore[arg-type]
OrderPaid(1)  # type: ignore[call-arg]


def grant_points(e: OrderPaid) -> int:
    return e.order_id


async def grant_points_async(e: OrderPaid) -> None: ...


def welcome(e: UserRegistered) -> None: ...


def audit(e: Event) -> None: ...


# An event type gives a decorator typed for that event, returning the listener unchanged.
assert_type(bus.on(OrderPaid)(grant_points), Callable[[OrderPaid], int])
assert_type(bus.on(OrderPaid, grant_points), Callable[[OrderPaid], int])
assert_type(bus.once(OrderPaid)(grant_points), Callable[[OrderPaid], int])
assert_type(bus.once(OrderPaid, grant_points), Callable[[OrderPaid], int])
bus.on(OrderPaid)(grant_points_async)
bus.on(OrderPaid)(audit)  # a listener of a wider type fits
bus.on(OrderPaid, name="x", once=True, timeout=1.0, retries=2, errors="propagate")(grant_points)

# A listener of another event type does not.
bus.on(OrderPaid)(welcome)  # type: ignore[arg-type]
bus.on(OrderPaid, welcome)  # type: ignore[arg-type]
bus.on(OrderPaid, errors="ignore")  # type: ignore[call-overload]

# A pattern gives a decorator for listeners of any event.
assert_type(bus.on("order.*")(audit), Callable[[Event], None])
assert_type(bus.on("**", audit), Callable[[Event], None])
bus.on("order.*")(grant_points)  # type: ignore[arg-type]


@bus.on(OrderPaid)
def decorated(e: OrderPaid) -> str:
    return str(e.order_id)


assert_type(decorated, Callable[[OrderPaid], str])

# The memory store fits the Protocol without inheriting from it.
_: FailureStore = MemoryFailureStore()
