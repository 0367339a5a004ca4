"""The README's user test of a failing listener, run as a user would: a fresh pytest process.

A subprocess, so that the ``pytest11`` entry point is what loads the plugin and the example's
events land in a default registry of their own.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

# Kept identical to the README's "Testing your listeners" example.
README_EXAMPLE = """
from decimal import Decimal

import pytest

from eventbus import Event, EventBus
from eventbus.testing import RecordingListener, capture_failures


class OrderPaid(Event, name="order.paid"):  # in an application: from myapp.events import ...
    order_id: int
    amount: Decimal


class LedgerDown(Exception):
    pass


def book_payment(e: OrderPaid) -> None:  # the listener under test
    raise LedgerDown(f"ledger offline, order {e.order_id} not booked")


async def test_a_failing_booking_is_recorded_and_the_rest_still_runs(event_bus: EventBus) -> None:
    receipts = RecordingListener("receipts")
    event_bus.on(OrderPaid, book_payment)
    event_bus.on(OrderPaid, receipts)

    with capture_failures(event_bus) as failures:
        event_bus.emit(OrderPaid(order_id=7, amount=Decimal("9.90")))  # does not raise

    record = failures.assert_one(listener=book_payment, error_type=LedgerDown)
    assert record.message == "ledger offline, order 7 not booked"
    assert receipts.events == [OrderPaid(order_id=7, amount=Decimal("9.90"))]


@pytest.mark.eventbus_expect_failures
async def test_failures_asserted_elsewhere_need_the_marker(event_bus: EventBus) -> None:
    event_bus.on(OrderPaid, book_payment)
    event_bus.emit(OrderPaid(order_id=8, amount=Decimal("1")))
    [record] = await event_bus.failures.query()
    assert record.error_type.endswith("LedgerDown")


async def test_an_unasserted_failure_fails_the_test(event_bus: EventBus) -> None:
    event_bus.on(OrderPaid, book_payment)
    event_bus.emit(OrderPaid(order_id=9, amount=Decimal("1")))  # nobody looks: teardown error
"""


def test_the_readme_example_passes_in_a_fresh_pytest_process(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(
        """
        [tool.pytest.ini_options]
        anyio_mode = "auto"
        addopts = ["--strict-markers"]
        filterwarnings = ["error"]
        """
    )
    pytester.makepyfile(test_billing=README_EXAMPLE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:hypothesispytest")
    # asyncio and trio each: two passes, and the last test errors at teardown
    result.assert_outcomes(passed=6, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_an_unasserted_failure_fails_the_test*",
            "*1 unexpected listener failure: 'test_billing:book_payment' on 'order.paid'*",
        ]
    )
