"""The registry and typed events: declaration, payload checks, and the errors that name both."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import re
from decimal import Decimal
from typing import Literal

import pytest

from eventbus import (
    DuplicateEventError,
    Event,
    EventBus,
    EventRegistry,
    InvalidEventNameError,
    PayloadError,
    UnknownEventError,
    default_registry,
)
from tests.eventbus.helpers import OrderPaid, Recorder, reg


def test_event_is_frozen_slotted_typed_and_keyword_only() -> None:
    e = OrderPaid(order_id=1, user_id=7, amount=Decimal("9.90"))
    assert (e.order_id, e.user_id, e.amount) == (1, 7, Decimal("9.90"))
    assert e.event_name == "order.paid" == OrderPaid.__event_name__
    assert [f.name for f in dataclasses.fields(OrderPaid)] == ["order_id", "user_id", "amount"]
    assert "__slots__" in OrderPaid.__dict__
    assert not hasattr(e, "__dict__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.order_id = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        OrderPaid(1, 7)  # type: ignore[call-arg]
    assert e == OrderPaid(order_id=1, user_id=7, amount=Decimal("9.90"))
    assert hash(e) == hash(OrderPaid(order_id=1, user_id=7, amount=Decimal("9.90")))


def test_isolated_registry_knows_only_its_own_events() -> None:
    local = EventRegistry()

    class Probe(Event, name="probe.ran", registry=local):
        n: int

    assert local.get("probe.ran") is Probe
    assert "probe.ran" in local and Probe in local
    assert "probe.ran" not in default_registry and Probe not in default_registry
    assert OrderPaid not in local and OrderPaid in reg
    assert local.names() == ["probe.ran"] == list(local)
    assert len(local) == 1


def test_default_registry_is_used_without_registry() -> None:
    class DefaultProbe(Event, name="tests.core.default-probe"):
        pass

    assert default_registry.get("tests.core.default-probe") is DefaultProbe
    assert EventBus().registry is default_registry


def test_base_class_without_name_is_not_registered_and_shares_fields() -> None:
    local = EventRegistry()

    class Base(Event):
        tenant: str

    class Child(Base, name="child.made", registry=local):
        n: int

    assert len(local) == 1 and local.get("child.made") is Child
    c = Child(tenant="t", n=1)
    assert (c.tenant, c.n) == ("t", 1)
    with pytest.raises(UnknownEventError, match="Base"):
        EventBus(local).on(Base, lambda e: None)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        pytest.param("", "must not be empty", id="empty"),
        pytest.param("order..paid", "segment 2 is empty", id="doubled-dot"),
        pytest.param(".order", "segment 1 is empty", id="leading-dot"),
        pytest.param("Order.paid", "contains 'O'", id="uppercase"),
        pytest.param("order.pa id", "contains ' '", id="space"),
        pytest.param("order.*", "wildcards belong in subscriptions", id="wildcard"),
    ],
)
def test_invalid_event_name_is_refused_naming_it_and_why(name: str, reason: str) -> None:
    local = EventRegistry()
    with pytest.raises(InvalidEventNameError, match=reason) as info:

        class Bad(Event, name=name, registry=local):
            pass

    assert repr(name) in str(info.value)
    assert len(local) == 0


def test_duplicate_declaration_names_the_event_and_both_classes() -> None:
    local = EventRegistry()

    class First(Event, name="dup.x", registry=local):
        pass

    with pytest.raises(DuplicateEventError, match=r"'dup\.x'.*First.*Second"):

        class Second(Event, name="dup.x", registry=local):
            pass

    assert local.get("dup.x") is First


def test_same_name_in_two_registries_is_fine() -> None:
    a, b = EventRegistry(), EventRegistry()

    class InA(Event, name="same.name", registry=a):
        pass

    class InB(Event, name="same.name", registry=b):
        pass

    assert a.get("same.name") is InA and b.get("same.name") is InB


def test_declare_adds_what_is_missing_and_leaves_a_taken_name_to_its_owner() -> None:
    """What the scheduler's and the durable transport's lifecycle events go through."""
    theirs, app = EventRegistry(), EventRegistry()

    class Started(Event, name="lib.started", registry=theirs):
        pass

    class Stopped(Event, name="lib.stopped", registry=theirs):
        pass

    class Mine(Event, name="lib.stopped", registry=app):  # the application took the name
        pass

    assert app.declare([Started, Stopped]) == [Stopped]
    assert app.declare([Started, Stopped]) == [Stopped]  # safe to repeat
    assert (app.get("lib.started"), app.get("lib.stopped")) == (Started, Mine)


def test_emit_by_name_builds_and_checks_the_payload(bus: EventBus, rec: Recorder) -> None:
    bus.on(OrderPaid, rec.sync("l"))
    bus.emit("order.paid", {"order_id": 1, "user_id": 7})
    assert rec.calls == [("l", OrderPaid(order_id=1, user_id=7))]


def test_emit_of_undeclared_name_is_an_error_naming_it(bus: EventBus) -> None:
    with pytest.raises(UnknownEventError, match=r"'nope\.x' is not declared"):
        bus.emit("nope.x", {"a": 1})


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        pytest.param({"order_id": 1}, "missing field 'user_id'", id="missing"),
        pytest.param({}, "missing fields 'order_id', 'user_id'", id="missing-two"),
        pytest.param(
            {"order_id": 1, "user_id": 2, "colour": "red"}, "unknown field 'colour'", id="unknown"
        ),
        pytest.param(
            {"order_id": "1", "user_id": 2}, "field 'order_id' must be int, got str", id="str-int"
        ),
        pytest.param(
            {"order_id": True, "user_id": 2}, "field 'order_id' must be int, got bool", id="bool"
        ),
        pytest.param(
            {"order_id": 1, "user_id": 2, "amount": 9.9},
            "field 'amount' must be Decimal, got float",
            id="float-decimal",
        ),
    ],
)
def test_payload_that_does_not_fit_names_the_event_and_the_problem(
    bus: EventBus, rec: Recorder, payload: dict[str, object], problem: str
) -> None:
    bus.on(OrderPaid, rec.sync("l"))
    with pytest.raises(PayloadError, match="order.paid") as info:
        bus.emit("order.paid", payload)
    assert problem in str(info.value)
    assert isinstance(info.value, TypeError)
    assert rec.calls == []


def test_payload_that_is_not_a_mapping_is_refused(bus: EventBus) -> None:
    with pytest.raises(PayloadError, match="expected a mapping"):
        bus.emit("order.paid", [1, 2])  # type: ignore[arg-type]


def test_emitting_an_event_of_another_registry_is_refused(bus: EventBus) -> None:
    other = EventRegistry()

    class Elsewhere(Event, name="order.paid", registry=other):
        order_id: int

    with pytest.raises(
        UnknownEventError, match="Elsewhere is declared in another registry"
    ) as info:
        bus.emit(Elsewhere(order_id=1))
    assert "declares 'order.paid' as tests.eventbus.helpers.OrderPaid" in str(info.value)
    with pytest.raises(UnknownEventError, match="another registry"):
        bus.on(Elsewhere, lambda e: None)


async def test_emit_async_of_another_registry_or_non_event_is_refused(bus: EventBus) -> None:
    other = EventRegistry()

    class Elsewhere(Event, name="order.paid", registry=other):
        order_id: int

    with pytest.raises(UnknownEventError, match="order.paid"):
        await bus.emit_async(Elsewhere(order_id=1))
    with pytest.raises(PayloadError, match="takes an Event instance"):
        await bus.emit_async(object())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "thing",
    [
        pytest.param({"order_id": 1}, id="dict"),
        pytest.param(42, id="int"),
        pytest.param(object(), id="object"),
    ],
)
def test_emitting_a_non_event_is_refused(bus: EventBus, thing: object) -> None:
    with pytest.raises(PayloadError, match="takes an Event instance or a declared name"):
        bus.emit(thing)  # type: ignore[arg-type]


def test_event_instance_plus_payload_is_refused(bus: EventBus, rec: Recorder) -> None:
    """Refused on every call, also once the plan is cached (the fast path skipped the check)."""
    bus.on(OrderPaid, rec.sync("a"))
    bus.emit(OrderPaid(order_id=1, user_id=2))  # caches the fast plan
    for _ in range(2):
        with pytest.raises(TypeError, match="not both"):
            bus.emit(OrderPaid(order_id=1, user_id=2), {"order_id": 1})
    assert rec.tags == ["a"]


class Colour(enum.Enum):
    RED = "red"


typed = EventRegistry()


class Typed(Event, name="typed.payload", registry=typed):
    maybe: str | None = None
    ratio: float = 0.0
    mode: Literal["a", "b"] = "a"
    colour: Colour = Colour.RED
    when: dt.date = dt.date(2026, 1, 1)
    tags: list[str] = dataclasses.field(default_factory=list)


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        pytest.param({"maybe": None}, None, id="optional-none"),
        pytest.param({"maybe": "x"}, None, id="optional-value"),
        pytest.param({"maybe": 1}, "field 'maybe' must be", id="optional-wrong"),
        pytest.param({"ratio": 2}, None, id="int-is-a-float"),
        pytest.param({"ratio": True}, "field 'ratio' must be float, got bool", id="bool-not-float"),
        pytest.param({"mode": "b"}, None, id="literal"),
        pytest.param({"mode": "c"}, "must be one of ('a', 'b')", id="literal-wrong"),
        pytest.param({"colour": "red"}, "field 'colour' must be Colour", id="enum-wrong"),
        pytest.param({"when": dt.datetime(2026, 1, 1)}, "must be date, got datetime", id="dt"),
        pytest.param({"tags": ["x"]}, None, id="generic"),
        pytest.param({"tags": "x"}, "field 'tags' must be", id="generic-wrong"),
    ],
)
def test_simple_type_checks(payload: dict[str, object], problem: str | None) -> None:
    bus = EventBus(typed)
    if problem is None:
        bus.emit("typed.payload", payload)
        return
    with pytest.raises(PayloadError, match=re.escape(problem)):
        bus.emit("typed.payload", payload)


def test_annotation_that_cannot_be_resolved_is_not_checked() -> None:
    local = EventRegistry()

    class Local:
        pass

    class WithLocal(Event, name="with.local", registry=local):
        thing: Local

    EventBus(local).emit("with.local", {"thing": "anything"})


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"errors": "ignore"}, id="policy"),
        pytest.param({"queue_size": -1}, id="queue-size"),
        pytest.param({"workers": 0}, id="workers"),
        pytest.param({"max_depth": 0}, id="max-depth"),
        pytest.param({"shutdown_grace": -1}, id="grace"),
    ],
)
def test_bus_options_are_checked(options: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(options))):
        EventBus(reg, **options)  # type: ignore[arg-type]
