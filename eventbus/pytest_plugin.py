"""pytest plugin registered under the ``pytest11`` entry point (see ``eventbus.testing``).

Fixtures, all opt-in by name (nothing runs for a test that does not ask for them):

* ``event_bus``: an :class:`~eventbus.EventBus` running (``async with bus:``) for the test, on
  the registry given by ``event_bus_registry``, with options from ``event_bus_options``. At
  teardown, after the bus drained, the test errors if listener failures were recorded that it
  did not expect.
* ``captured_failures``: the :class:`~eventbus.testing.FailureCapture` of that bus; asking for
  it says "this test expects failures and asserts them itself".
* ``event_bus_registry`` (default: the default registry) and ``event_bus_options`` (default:
  ``{}``): override them in a ``conftest.py``.

A failure also counts as expected under ``@pytest.mark.eventbus_expect_failures`` or when a
``with capture_failures(event_bus):`` block inside the test saw it. ``event_bus`` is an async
fixture: it needs anyio's pytest plugin (``anyio_mode = "auto"`` or ``@pytest.mark.anyio``);
without it, each test that asks for it fails with one line saying which setting to add.

Events built during the tests are checked against their annotations (``EVENTBUS_VALIDATE=1``
unless set otherwise; see :func:`eventbus.validate_events`).

The module imports only pytest at load time: every pytest run in a project with ``eventbus``
installed loads it.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from eventbus import EventBus, EventRegistry
    from eventbus.testing import FailureCapture

MARKER = "eventbus_expect_failures"
SETTING = (
    'add anyio_mode = "auto" under [tool.pytest.ini_options] in pyproject.toml '
    "(or mark the test @pytest.mark.anyio)"
)


__all__ = [
    "captured_failures",
    "event_bus",
    "event_bus_options",
    "event_bus_registry",
    "pytest_configure",
]


def pytest_configure(config: pytest.Config) -> None:
    # Events are checked against their annotations when built, in tests (and in the
    # processes they start): a wrong type fails where it is made, not at a later retry.
    os.environ.setdefault("EVENTBUS_VALIDATE", "1")
    events = sys.modules.get("eventbus._events")
    if events is not None:  # imported before the plugin: set it now
        events.validate_events(os.environ["EVENTBUS_VALIDATE"] not in ("", "0"))
    config.addinivalue_line(
        "markers",
        f"{MARKER}: listener failures recorded by the event_bus fixture do not fail this test",
    )


class _Session:
    """What ``event_bus`` and ``captured_failures`` share for one test."""

    def __init__(self, bus: EventBus, capture: FailureCapture) -> None:
        self.bus = bus
        self.capture = capture
        self.expected = False


@pytest.fixture
def event_bus_registry() -> EventRegistry:
    """The registry the ``event_bus`` fixture builds its bus on; override to isolate a test."""
    from eventbus import default_registry

    return default_registry


@pytest.fixture
def event_bus_options() -> dict[str, Any]:
    """Keyword arguments for the ``event_bus`` fixture's :class:`~eventbus.EventBus`."""
    return {}


@pytest.fixture
def _eventbus_needs_anyio(request: pytest.FixtureRequest) -> None:
    """Fail with one line where anyio's plugin will not run the async fixtures below (pytest's
    own error names a private fixture, and leaves state that fails the tests after it)."""
    if "anyio_backend" in request.fixturenames:
        return
    name = "event_bus" if "event_bus" in request.fixturenames else "captured_failures"
    if inspect.iscoroutinefunction(getattr(request, "function", None)):
        pytest.fail(f"the {name} fixture needs anyio's pytest plugin: {SETTING}", pytrace=False)
    pytest.fail(
        f"{name} is an async fixture: request it from an 'async def' test; {SETTING}",
        pytrace=False,
    )


@pytest.fixture
async def _eventbus_session(
    _eventbus_needs_anyio: None,
    request: pytest.FixtureRequest,
    event_bus_registry: EventRegistry,
    event_bus_options: dict[str, Any],
) -> AsyncIterator[_Session]:
    from eventbus import EventBus
    from eventbus.testing import UnexpectedFailuresError, capture_failures

    bus = EventBus(event_bus_registry, **event_bus_options)
    with capture_failures(bus) as capture:
        session = _Session(bus, capture)
        async with bus:
            yield session
    if session.expected or request.node.get_closest_marker(MARKER) is not None:
        return
    unexpected = [r for r in capture.records if r.id not in capture.claimed]
    if unexpected:
        pytest.fail(str(UnexpectedFailuresError(unexpected)), pytrace=False)


@pytest.fixture
def event_bus(_eventbus_session: _Session) -> EventBus:
    """An event bus running for this test; unexpected listener failures fail it at teardown."""
    return _eventbus_session.bus


@pytest.fixture
def captured_failures(_eventbus_session: _Session) -> FailureCapture:
    """Every failure the ``event_bus`` fixture's bus records; using it marks them expected."""
    _eventbus_session.expected = True
    return _eventbus_session.capture
