"""Events and listeners shared by the core tests, declared in an isolated registry."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from decimal import Decimal

from anyio.lowlevel import checkpoint

from eventbus import Event, EventRegistry

__all__ = [
    "Deep",
    "OrderPaid",
    "OrderShipped",
    "Recorder",
    "ShortlinkVisited",
    "UserRegistered",
    "explode",
    "reg",
]

reg = EventRegistry()


class OrderPaid(Event, name="order.paid", registry=reg):
    order_id: int
    user_id: int
    amount: Decimal = Decimal("0")


class OrderShipped(Event, name="order.shipped", registry=reg):
    order_id: int


class UserRegistered(Event, name="user.registered", registry=reg):
    user_id: int
    email: str = ""


class ShortlinkVisited(Event, name="shortlink.visited", registry=reg):
    code: str


class Deep(Event, name="a.x.y.b", registry=reg):
    pass


def explode(e: Event) -> None:
    raise ValueError("boom")


class Recorder:
    """Makes listeners that log ``(tag, event)``, so a test can assert who ran and in which order.

    Each listener's default name is ``tests.eventbus.helpers:<tag>``.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, Event]] = []

    @property
    def tags(self) -> list[str]:
        return [tag for tag, _ in self.calls]

    def sync(self, tag: str) -> Callable[[Event], str]:
        def listener(e: Event) -> str:
            self.calls.append((tag, e))
            return tag

        listener.__qualname__ = tag
        return listener

    def async_(self, tag: str) -> Callable[[Event], Awaitable[str]]:
        async def listener(e: Event) -> str:
            await checkpoint()
            self.calls.append((tag, e))
            return tag

        listener.__qualname__ = tag
        return listener
