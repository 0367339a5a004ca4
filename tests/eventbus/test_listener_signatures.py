"""A listener that cannot be called with the event is refused at ``on()``, in one line.

Before, each of these was accepted and then failed on every emit (or, for a generator
function, "succeeded" without its body ever running).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from eventbus import EventBus
from tests.eventbus.helpers import OrderPaid

PAID = OrderPaid(order_id=1, user_id=7)


def no_parameter() -> None: ...


def two_required(event: OrderPaid, other: int) -> None: ...


def required_keyword(event: OrderPaid, *, when: str) -> None: ...


async def takes_tx(event: OrderPaid, tx: object) -> None: ...


def generator(event: OrderPaid) -> Iterator[int]:
    yield event.order_id


async def async_generator(event: OrderPaid) -> AsyncIterator[int]:
    yield event.order_id


class CallsWithYield:
    def __call__(self, event: OrderPaid) -> Iterator[int]:
        yield event.order_id


@pytest.mark.parametrize(
    ("fn", "reason"),
    [
        (no_parameter, "it takes no parameter"),
        (two_required, "it requires 'other' after the event"),
        (required_keyword, "it requires the keyword-only 'when'"),
        (takes_tx, "takes 'tx', which only durable listeners get"),
        (generator, "is a generator function"),
        (async_generator, "is an async generator function"),
        (functools.partial(generator), "is a generator function"),
        (CallsWithYield(), "is a generator function"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_on_refuses_a_listener_that_cannot_take_the_event(
    bus: EventBus, fn: Callable[..., Any], reason: str
) -> None:
    with pytest.raises(TypeError) as info:
        bus.on(OrderPaid, fn)
    message = str(info.value)
    assert reason in message and "\n" not in message
    assert "test_listener_signatures:" in message  # names the listener
    assert bus.listeners(OrderPaid) == []  # nothing half-subscribed


def test_every_way_of_subscribing_checks_and_names_the_listener(bus: EventBus) -> None:
    # (mypy sees these too; the checks are for those who do not run it)
    with pytest.raises(TypeError, match="listener 'audit' is a generator function"):
        bus.on("order.*", generator, name="audit")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'audit' cannot be called with the event"):
        bus.once(OrderPaid, name="audit")(two_required)  # type: ignore[arg-type]
    with (
        pytest.raises(TypeError, match="cannot be called with the event"),
        bus.subscribed(OrderPaid, no_parameter),  # type: ignore[arg-type]
    ):
        pass
    assert bus.listeners(OrderPaid) == []


def test_signatures_that_take_the_event_are_accepted(bus: EventBus) -> None:
    seen: list[str] = []

    class Handler:
        def __init__(self) -> None:
            self.seen: list[int] = []

        def handle(self, event: OrderPaid, extra: int = 0, *, flag: bool = False) -> None:
            self.seen.append(event.order_id + extra)

    def with_tx_default(event: OrderPaid, tx: object = None) -> None:
        seen.append("tx-default")

    def anything(*args: object, **kwargs: object) -> None:
        seen.append("varargs")

    def partial_target(tag: str, event: OrderPaid) -> None:
        seen.append(tag)

    handler = Handler()
    bus.on(OrderPaid, handler.handle)
    bus.on(OrderPaid, with_tx_default)
    bus.on(OrderPaid, anything)
    bus.on(OrderPaid, functools.partial(partial_target, "partial"))
    bus.on(OrderPaid, print, name="builtin-without-signature-checks")
    bus.off(OrderPaid, "builtin-without-signature-checks")
    bus.emit(PAID)
    assert handler.seen == [1]
    assert seen == ["tx-default", "varargs", "partial"]
