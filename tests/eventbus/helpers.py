"""Events and listeners shared by the core tests, declared in an isolated registry."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import anyio
import pytest
import trio.testing
from anyio.lowlevel import checkpoint

from eventbus import Event, EventBus, EventRegistry, FailureRecord

__all__ = [
    "Deep",
    "Flaky",
    "OrderPaid",
    "OrderShipped",
    "Recorder",
    "ShortlinkVisited",
    "UserRegistered",
    "asyncio_or_virtual_trio",
    "converts_cancel",
    "count_compiles",
    "count_plan_builds",
    "explode",
    "make_record",
    "reg",
    "swallows_cancel",
    "virtual_trio",
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


def count_plan_builds(bus: EventBus) -> list[type[Event]]:
    """Record each dispatch plan the bus builds (by wrapping its table's builder; private)."""
    builds: list[type[Event]] = []
    table = bus._table
    build = table._build

    def counting(cls: type[Event]) -> Any:
        builds.append(cls)
        return build(cls)

    table._build = counting  # type: ignore[method-assign]
    return builds


def count_compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the source of each dispatch function the bus compiles (a spy on the compiler's
    ``compile``, with its cache of compiled code emptied first; private)."""
    import collections

    from eventbus._core import _compiler

    sources: list[str] = []
    monkeypatch.setattr(_compiler, "_codes", collections.OrderedDict(), raising=False)

    def spy(source: str, filename: str, mode: str) -> Any:
        sources.append(source)
        return compile(source, filename, mode)

    monkeypatch.setattr(_compiler, "compile", spy, raising=False)
    return sources


@pytest.fixture(params=["asyncio", "trio-virtual"])
def asyncio_or_virtual_trio(request: pytest.FixtureRequest) -> object:
    """A module's ``anyio_backend`` (``anyio_backend = asyncio_or_virtual_trio``): asyncio on
    tiny real limits; trio on a virtual clock that jumps whenever every task waits."""
    if request.param == "asyncio":
        return "asyncio"
    return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})


#: Run the test on trio only, on a virtual clock that jumps whenever every task waits.
virtual_trio = pytest.mark.parametrize(
    "anyio_backend", [("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})]
)


async def swallows_cancel(e: Event) -> str:
    """Waits forever, and returns normally when cancelled: hides the cancellation."""
    try:
        await anyio.sleep_forever()
    except anyio.get_cancelled_exc_class():
        return "gave up quietly"
    raise AssertionError("unreachable")


async def converts_cancel(e: Event) -> None:
    """Waits forever, and turns its cancellation into a ``RuntimeError``."""
    try:
        await anyio.sleep_forever()
    except BaseException as exc:
        raise RuntimeError("connection aborted") from exc


def make_record(n: int, *, listener: str = "billing", event: str = "order.paid") -> FailureRecord:
    """Failure record *n*, as a store gets it: ids, payload and times numbered by *n*."""
    at = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=n)
    return FailureRecord(
        id=f"rec-{n:05d}",
        event_id=f"ev-{n:05d}",
        event_name=event,
        payload=f'{{"order_id": {n}}}',
        payload_ok=True,
        listener=listener,
        error_type="ValueError",
        message=f"boom {n}",
        traceback="Traceback (most recent call last):\nValueError: boom\n",
        first_failed_at=at,
        last_failed_at=at,
    )


class Flaky:
    """Fails while ``failing`` is true; records every event it sees."""

    def __init__(self) -> None:
        self.failing = True
        self.seen: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.seen.append(event)
        if self.failing:
            raise ValueError(f"flaky {len(self.seen)}")
