"""The messages a new user meets first: the event class emitted instead of an instance, a
misspelt event name, and what ``dir(eventbus)`` lists.

Regression tests: ``emit(OrderPaid)`` said "got _EventMeta", a typo got no "did you mean",
and ``dir(eventbus)`` listed ``Any``, ``TYPE_CHECKING`` and ``annotations``.
"""

from __future__ import annotations

import pytest

import eventbus
from eventbus import EventBus, PayloadError, UnknownEventError
from tests.eventbus.helpers import OrderPaid, reg


async def test_emitting_the_class_says_to_build_an_instance(bus: EventBus) -> None:
    expected = "got the class OrderPaid itself; build one: emit(OrderPaid(...))"
    for _ in range(2):  # before and after the plan is cached
        with pytest.raises(PayloadError) as info:
            bus.emit(OrderPaid)  # type: ignore[arg-type]
        assert str(info.value).endswith(f"emit() takes an Event instance, {expected}")
        bus.emit(OrderPaid(order_id=1, user_id=2))
    with pytest.raises(PayloadError, match="got the class OrderPaid itself"):
        await bus.emit_async(OrderPaid)  # type: ignore[arg-type]


def test_a_misspelt_name_gets_a_did_you_mean(bus: EventBus) -> None:
    with pytest.raises(
        UnknownEventError, match=r"'order\.payed' .*; did you mean 'order\.paid'\?$"
    ):
        bus.on("order.payed", print)
    with pytest.raises(UnknownEventError, match=r"did you mean 'order\.paid'\?$"):
        bus.emit("order.payed", {"order_id": 1, "user_id": 2})
    with pytest.raises(UnknownEventError, match=r"did you mean 'order\.paid'\?$"):
        reg.get("order.payed")
    with pytest.raises(UnknownEventError, match="declare it before subscribing") as far:
        bus.on("something.else.entirely", print)
    assert "did you mean" not in str(far.value)


def test_dir_of_eventbus_lists_no_typing_helpers() -> None:
    public = {name for name in dir(eventbus) if not name.startswith("_")}
    assert {"Any", "TYPE_CHECKING", "annotations"}.isdisjoint(public)
    # what is left: submodules imported (by the test session too)
    assert all(
        isinstance(getattr(eventbus, n), type(eventbus)) for n in public - set(eventbus.__all__)
    )
