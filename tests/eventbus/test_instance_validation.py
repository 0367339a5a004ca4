"""Typed instances are checked against their annotations where they are built: in tests
(the pytest plugin turns it on), under ``-X dev`` or after ``validate_events()``.

Regression test: ``emit(OrderPaid(order_id="abc"))`` reached the listeners, and the bad
payload surfaced only when a retry could not encode it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal

import pytest

from eventbus import Event, EventBus, EventRegistry, PayloadError, validate_events
from tests.eventbus.helpers import OrderPaid, Recorder

SCRIPT = """
from eventbus import Event, EventRegistry

class Paid(Event, name="x.paid", registry=EventRegistry()):
    order_id: int

try:
    Paid(order_id="abc")
except Exception as exc:
    print(type(exc).__name__, exc)
else:
    print("accepted")
"""


@pytest.fixture
def validating() -> Iterator[None]:
    previous = validate_events(True)
    yield
    validate_events(previous)


def test_the_pytest_plugin_turns_it_on() -> None:
    assert os.environ.get("EVENTBUS_VALIDATE") == "1"
    with pytest.raises(PayloadError):
        OrderPaid(order_id="abc", user_id=1)  # type: ignore[arg-type]


def test_a_bad_instance_fails_where_it_is_built_with_the_dict_paths_message(
    validating: None, bus: EventBus, rec: Recorder
) -> None:
    bus.on(OrderPaid, rec.sync("seen"))
    with pytest.raises(PayloadError) as built:
        bus.emit(OrderPaid(order_id="abc", user_id=7))  # type: ignore[arg-type]
    with pytest.raises(PayloadError) as by_name:
        bus.emit("order.paid", {"order_id": "abc", "user_id": 7})
    assert (
        str(built.value)
        == str(by_name.value)
        == ("payload of 'order.paid': field 'order_id' must be int, got str 'abc'")
    )
    assert rec.calls == []  # no listener saw it
    bus.emit(OrderPaid(order_id=1, user_id=7))
    assert rec.tags == ["seen"]


def test_classes_declared_before_and_after_it_is_turned_on_are_checked(validating: None) -> None:
    reg = EventRegistry()

    class Refunded(Event, name="order.refunded", registry=reg):
        amount: Decimal
        note: str | None = None

    assert Refunded(amount=Decimal("1")).note is None
    with pytest.raises(PayloadError, match="field 'note' must be str | None, got int 3"):
        Refunded(amount=Decimal("1"), note=3)  # type: ignore[arg-type]
    validate_events(False)
    unchecked = OrderPaid(order_id="abc", user_id=7)  # type: ignore[arg-type]
    assert unchecked.order_id == "abc"  # type: ignore[comparison-overlap]


@pytest.mark.parametrize(
    ("flags", "env", "expected"),
    [
        ([], {}, "accepted"),  # production: building an event costs what it always did
        (["-X", "dev"], {}, "PayloadError payload of 'x.paid': field 'order_id' must be int"),
        ([], {"EVENTBUS_VALIDATE": "1"}, "PayloadError payload of 'x.paid'"),
    ],
    ids=["default", "dev-mode", "env"],
)
def test_outside_tests_it_is_on_in_dev_mode_or_when_asked(
    flags: list[str], env: dict[str, str], expected: str
) -> None:
    clean = {k: v for k, v in os.environ.items() if k != "EVENTBUS_VALIDATE"}
    done = subprocess.run(
        [sys.executable, *flags, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **env},
        check=True,
    )
    assert done.stdout.startswith(expected)
