"""The pytest plugin (``pytest11`` entry point ``eventbus``) run on inner tests by pytester."""

from __future__ import annotations

import re

import pytest

pytest_plugins = ["pytester"]

# Inner runs restore sys.modules afterwards, so a plugin that imports a big package (hypothesis)
# would re-import and assertion-rewrite it on every run: several seconds each. Not needed here.
INNER_ARGS = ("-p", "no:hypothesispytest")

EVENTS = """
from __future__ import annotations

import pytest

from eventbus import Event, EventBus, EventRegistry
from eventbus.testing import AsyncRecordingListener, RecordingListener, capture_failures

reg = EventRegistry()


class OrderPaid(Event, name="order.paid", registry=reg):
    order_id: int


@pytest.fixture
def event_bus_registry() -> EventRegistry:
    return reg


def explode(e: Event) -> None:
    raise ValueError("boom")
"""


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    """An inner project configured like this one (anyio auto mode, strict markers, warnings)."""
    pytester.makepyprojecttoml(
        """
        [tool.pytest.ini_options]
        anyio_mode = "auto"
        addopts = ["--strict-config", "--strict-markers"]
        filterwarnings = ["error"]
        """
    )
    pytester.makeconftest(EVENTS)
    return pytester


def run(inner: pytest.Pytester, body: str) -> pytest.RunResult:
    inner.makepyfile(test_user="from conftest import *\n" + body)
    return inner.runpytest_inprocess("-p", "no:cacheprovider", *INNER_ARGS)


def test_event_bus_runs_for_the_test_and_drains_after(inner: pytest.Pytester) -> None:
    result = run(
        inner,
        """
seen = AsyncRecordingListener()

async def test_emit(event_bus: EventBus) -> None:
    assert event_bus.running
    assert event_bus.registry is reg
    event_bus.on(OrderPaid, seen)
    event_bus.emit(OrderPaid(order_id=1))   # runs in the background

def test_after() -> None:
    assert seen.count == 2   # one per backend: each fixture teardown drained its queue
""",
    )
    result.assert_outcomes(passed=3)


def test_an_unexpected_failure_fails_the_test_at_teardown(inner: pytest.Pytester) -> None:
    result = run(
        inner,
        """
async def test_failing_listener(event_bus: EventBus) -> None:
    event_bus.on(OrderPaid, explode)
    event_bus.emit(OrderPaid(order_id=1))
""",
    )
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_failing_listener*",
            "*1 unexpected listener failure: 'conftest:explode' on 'order.paid': ValueError: boom*",
        ]
    )


def test_a_failure_caused_by_on_failure_counts_too(inner: pytest.Pytester) -> None:
    """Regression test: it escaped the fixture's capture (on_failure is not re-entered)."""
    result = run(
        inner,
        """
class Alert(Event, name="alert", registry=reg):
    pass

box = []

@pytest.fixture
def event_bus_options():
    return {"on_failure": lambda r: box[0].emit(Alert())}  # the alert fails too

@pytest.mark.eventbus_expect_failures
async def test_expected(event_bus: EventBus) -> None:
    box[:] = [event_bus]
    event_bus.on(Alert, explode, name="alert")
    event_bus.on(OrderPaid, explode)
    event_bus.emit(OrderPaid(order_id=1))

async def test_unexpected(event_bus: EventBus) -> None:
    box[:] = [event_bus]
    event_bus.on(Alert, explode, name="alert")
    event_bus.on(OrderPaid, explode)
    event_bus.emit(OrderPaid(order_id=1))
""",
    )
    result.assert_outcomes(passed=4, errors=2)
    result.stdout.fnmatch_lines(
        ["*2 unexpected listener failures: 'conftest:explode' on 'order.paid'*'alert' on 'alert'*"]
    )


def test_a_background_failure_counts_too(inner: pytest.Pytester) -> None:
    result = run(
        inner,
        """
async def test_failing_async_listener(event_bus: EventBus) -> None:
    event_bus.on(OrderPaid, AsyncRecordingListener("late", raises=KeyError("k")))
    event_bus.emit(OrderPaid(order_id=1))   # fails after the test body returned
""",
    )
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines(["*'eventbus.testing:late' on 'order.paid': KeyError*"])


def test_the_marker_says_failures_are_expected(inner: pytest.Pytester) -> None:
    result = run(
        inner,
        """
@pytest.mark.eventbus_expect_failures
async def test_failing_listener(event_bus: EventBus) -> None:
    event_bus.on(OrderPaid, explode)
    event_bus.emit(OrderPaid(order_id=1))
""",
    )
    result.assert_outcomes(passed=2)  # asyncio and trio


def test_the_captured_failures_fixture_says_failures_are_expected(inner: pytest.Pytester) -> None:
    result = run(
        inner,
        """
async def test_failing_listener(event_bus: EventBus, captured_failures) -> None:
    survivor = RecordingListener()
    event_bus.on(OrderPaid, explode)
    event_bus.on(OrderPaid, survivor)
    event_bus.emit(OrderPaid(order_id=1))
    assert survivor.count == 1
    captured_failures.assert_one(listener=explode, error_type=ValueError)
""",
    )
    result.assert_outcomes(passed=2)  # asyncio and trio


def test_failures_seen_by_capture_failures_in_the_test_are_expected(
    inner: pytest.Pytester,
) -> None:
    result = run(
        inner,
        """
async def test_failing_listener(event_bus: EventBus) -> None:
    event_bus.on(OrderPaid, explode)
    with capture_failures(event_bus) as failures:
        event_bus.emit(OrderPaid(order_id=1))
    failures.assert_one(listener=explode)
""",
    )
    result.assert_outcomes(passed=2)  # asyncio and trio


def test_event_bus_options_reach_the_bus(inner: pytest.Pytester) -> None:
    result = run(
        inner,
        """
from eventbus import ListenerErrors

@pytest.fixture
def event_bus_options() -> dict[str, object]:
    return {"errors": "propagate"}

@pytest.mark.eventbus_expect_failures
async def test_propagates(event_bus: EventBus) -> None:
    event_bus.on(OrderPaid, explode)
    with pytest.raises(ListenerErrors):
        event_bus.emit(OrderPaid(order_id=1))
""",
    )
    result.assert_outcomes(passed=2)  # asyncio and trio


def test_tests_that_do_not_ask_for_the_fixtures_are_untouched(inner: pytest.Pytester) -> None:
    result = run(
        inner,
        """
async def test_own_bus() -> None:
    bus = EventBus(reg)
    bus.on(OrderPaid, explode)
    bus.emit(OrderPaid(order_id=1))   # captured, and nobody is watching: not the plugin's business

def test_sync() -> None:
    pass
""",
    )
    result.assert_outcomes(passed=3)


def test_the_marker_is_registered(inner: pytest.Pytester) -> None:
    result = inner.runpytest_inprocess("--markers", *INNER_ARGS)
    result.stdout.fnmatch_lines(["@pytest.mark.eventbus_expect_failures:*"])


@pytest.fixture
def strict_inner(pytester: pytest.Pytester) -> pytest.Pytester:
    """An inner project without ``anyio_mode = "auto"`` (anyio's default, strict mode)."""
    pytester.makepyprojecttoml(
        """
        [tool.pytest.ini_options]
        addopts = ["--strict-config", "--strict-markers"]
        filterwarnings = ["error"]
        """
    )
    pytester.makeconftest(EVENTS)
    return pytester


SETTING = (
    'add anyio_mode = "auto" under [tool.pytest.ini_options] in pyproject.toml '
    "(or mark the test @pytest.mark.anyio)"
)


def test_without_anyio_auto_mode_each_test_fails_with_one_line_naming_the_setting(
    strict_inner: pytest.Pytester,
) -> None:
    """Regression test: the first test errored with a private fixture name and an internal
    pytest assertion (264 lines), and the tests after it with an AssertionError."""
    result = run(
        strict_inner,
        """
async def test_unmarked(event_bus: EventBus) -> None:
    event_bus.emit(OrderPaid(order_id=1))

def test_sync(event_bus: EventBus) -> None:
    event_bus.emit(OrderPaid(order_id=1))

async def test_unmarked_again(captured_failures) -> None:
    pass

@pytest.mark.anyio
async def test_marked(event_bus: EventBus) -> None:
    event_bus.emit(OrderPaid(order_id=1))
""",
    )
    result.assert_outcomes(passed=2, errors=3)  # the marked test, on asyncio and trio
    out = result.stdout.str()
    assert "_eventbus" not in out and "AssertionError" not in out and "Traceback" not in out
    errors = re.findall(r"_ ERROR at setup of (\w+) _+\n(.*)\n(?=_|=)", out)
    assert [name for name, _ in errors] == ["test_unmarked", "test_sync", "test_unmarked_again"]
    assert all(SETTING in message for _, message in errors)  # one line each, then the next
    assert errors[1][1].startswith("event_bus is an async fixture: request it from an 'async def'")
