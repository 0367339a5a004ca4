"""Helpers for users' own tests of listeners and of failure behaviour.

In the spirit of blinker's ``connected_to()``: small, public, and tested as API.

* :class:`RecordingListener` / :class:`AsyncRecordingListener` record what they receive, with a
  process-wide call sequence so that the order *across* listeners can be asserted
  (:func:`call_order`); either can be told to fail.
* :func:`capture_failures` collects the :class:`~eventbus.FailureRecord` objects a bus records
  while the block is active, with assertion helpers.
* :func:`fresh_registry` and :func:`running_bus` isolate a test from the default registry and
  run a bus that fails loudly on failures nobody expected (the pytest fixture ``event_bus``,
  from the plugin this package registers, does the same per test).
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, cast

import anyio

from ._core._bus import EventBus
from ._core._listeners import default_listener_name
from ._events import Event, EventRegistry
from ._failures import FailureRecord

__all__ = [
    "AsyncRecordingListener",
    "FailureCapture",
    "RecordedCall",
    "RecordingListener",
    "UnexpectedFailuresError",
    "call_order",
    "capture_failures",
    "fresh_registry",
    "running_bus",
]

# One sequence for the whole process, so calls of different listeners can be ordered.
_sequence = itertools.count(1)
_instances = itertools.count(1)


@dataclasses.dataclass(frozen=True, slots=True)
class RecordedCall:
    """One call of a recording listener: a process-wide sequence number, who, and what."""

    seq: int
    listener: str
    event: Event


class _Recorder:
    """What both recording listeners share: the log, the failure switch and the waiters."""

    def __init__(
        self,
        name: str | None = None,
        *,
        raises: BaseException | type[BaseException] | None = None,
        fail_times: int | None = None,
    ) -> None:
        if fail_times is not None and (raises is None or fail_times < 0):
            raise ValueError(f"fail_times={fail_times!r} needs raises= and must be >= 0")
        self.name = name if name is not None else f"{type(self).__name__}#{next(_instances)}"
        # default_listener_name() reads these: each instance gets its own stable bus name,
        # the same whether or not the package re-exports (and renames the module of) the class.
        self.__module__ = "eventbus.testing"
        self.__qualname__ = self.name
        self.raises = raises
        self.fail_times = fail_times
        self.calls: list[RecordedCall] = []
        self._waiters: list[tuple[int, anyio.Event]] = []

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} calls={len(self.calls)}>"

    @property
    def listener_name(self) -> str:
        """The name the bus gives this listener unless ``bus.on(..., name=)`` says otherwise."""
        return default_listener_name(cast(Callable[..., Any], self))

    @property
    def events(self) -> list[Event]:
        return [c.event for c in self.calls]

    @property
    def count(self) -> int:
        return len(self.calls)

    def reset(self) -> None:
        self.calls.clear()

    async def wait_for(self, count: int = 1) -> None:
        """Wait until at least *count* calls were recorded (background listeners run later).

        Bound it as any wait in a test: ``with anyio.fail_after(5): await rec.wait_for(2)``.
        """
        if len(self.calls) >= count:
            await anyio.lowlevel.checkpoint()
            return
        event = anyio.Event()
        self._waiters.append((count, event))
        await event.wait()

    def _record(self, event: Event) -> None:
        self.calls.append(RecordedCall(next(_sequence), self.name, event))
        n = len(self.calls)
        if self._waiters:
            for want, waiter in [w for w in self._waiters if w[0] <= n]:
                self._waiters.remove((want, waiter))
                waiter.set()
        if self.raises is not None and (self.fail_times is None or n <= self.fail_times):
            raise self.raises() if isinstance(self.raises, type) else self.raises


class RecordingListener(_Recorder):
    """A sync listener that records every event it receives, then optionally raises.

    :param name: a label for :func:`call_order` and the listener's default bus name
        (``eventbus.testing:<name>``); default ``RecordingListener#<n>``, unique per instance
    :param raises: raise this after recording (an exception class is instantiated per call)
    :param fail_times: raise only on the first *n* calls (to test ``retries=``); default: always
    """

    def __call__(self, event: Event) -> None:
        self._record(event)


class AsyncRecordingListener(_Recorder):
    """An async twin of :class:`RecordingListener`; the bus sees it as an async listener.

    :param gate: when given, each call waits for it after recording, so a test can hold a
        listener in flight (shutdown and queue tests)
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        raises: BaseException | type[BaseException] | None = None,
        fail_times: int | None = None,
        gate: anyio.Event | None = None,
    ) -> None:
        super().__init__(name, raises=raises, fail_times=fail_times)
        self.gate = gate

    async def __call__(self, event: Event) -> None:
        if self.gate is None:
            await anyio.lowlevel.checkpoint()
            self._record(event)
            return
        try:
            self._record(event)
        finally:
            await self.gate.wait()


def call_order(*listeners: _Recorder) -> list[str]:
    """The names of the given recording listeners in the order they were called, merged."""
    calls = sorted((c for lst in listeners for c in lst.calls), key=lambda c: c.seq)
    return [c.listener for c in calls]


# -- failure capture -----------------------------------------------------------------------------


class FailureCapture:
    """The failure records one bus made while a :func:`capture_failures` block was active.

    ``claimed`` holds the ids of records that a capture nested inside this one also saw: the
    pytest fixture treats those as expected by the test.
    """

    def __init__(self, bus: EventBus) -> None:
        self.bus = bus
        self.records: list[FailureRecord] = []
        self.claimed: set[str] = set()

    def __repr__(self) -> str:
        return f"<FailureCapture records={len(self.records)}>"

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[FailureRecord]:
        return iter(self.records)

    def clear(self) -> None:
        self.records.clear()

    def matching(
        self,
        *,
        listener: str | Callable[..., Any] | None = None,
        error_type: str | type[BaseException] | None = None,
        event: str | type[Event] | None = None,
        match: str | None = None,
    ) -> list[FailureRecord]:
        """Records that fit every filter given.

        :param listener: a listener name, or a callable (compared by its default name)
        :param error_type: an exception class, or its name as recorded (``"ValueError"``,
            ``"mypkg.errors.Declined"``); compared exactly, not by subclass
        :param event: an event name or type
        :param match: a regular expression searched in the message
        """
        listener, error_type, event = _normalize(listener, error_type, event)
        return [
            r
            for r in self.records
            if (listener is None or r.listener == listener)
            and (error_type is None or r.error_type == error_type)
            and (event is None or r.event_name == event)
            and (match is None or re.search(match, r.message) is not None)
        ]

    def assert_one(
        self,
        *,
        listener: str | Callable[..., Any] | None = None,
        error_type: str | type[BaseException] | None = None,
        event: str | type[Event] | None = None,
        match: str | None = None,
    ) -> FailureRecord:
        """Assert that exactly one record fits the filters, and return it.

        :raises AssertionError: naming the filters and listing every captured record
        """
        found = self.matching(listener=listener, error_type=error_type, event=event, match=match)
        if len(found) != 1:
            wanted = _describe_filters(*_normalize(listener, error_type, event), match)
            raise AssertionError(
                f"expected exactly one failure {wanted}, found {len(found)}; "
                f"captured: {_describe_records(self.records)}"
            )
        return found[0]

    def assert_none(self) -> None:
        """:raises AssertionError: if anything was captured, listing it"""
        if self.records:
            raise AssertionError(
                f"expected no failures; captured: {_describe_records(self.records)}"
            )


def _normalize(
    listener: str | Callable[..., Any] | None,
    error_type: str | type[BaseException] | None,
    event: str | type[Event] | None,
) -> tuple[str | None, str | None, str | None]:
    """Filters as the record stores them: names, not objects."""
    if listener is not None and not isinstance(listener, str):
        listener = default_listener_name(listener)
    if isinstance(error_type, type):
        error_type = _type_name(error_type)
    if isinstance(event, type):
        event = event.__event_name__
    return listener, error_type, event


def _type_name(cls: type[BaseException]) -> str:
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def _describe_filters(*values: object) -> str:
    keys = ("listener", "error_type", "event", "match")
    parts = [f"{k}={v!r}" for k, v in zip(keys, values, strict=True) if v is not None]
    return f"with {', '.join(parts)}" if parts else "at all"


def _describe_records(records: list[FailureRecord]) -> str:
    if not records:
        return "none"
    return "; ".join(
        f"{r.listener!r} on {r.event_name!r}: {r.error_type}: {r.message}" for r in records
    )


class _CaptureObserver:
    """Told of every record the bus makes (the sink's observers): records into its capture,
    and marks the record claimed in the captures active around it."""

    def __init__(self, capture: FailureCapture, outer: list[_CaptureObserver]) -> None:
        self.capture = capture
        self.outer = outer

    def __call__(self, record: FailureRecord) -> None:
        self.capture.records.append(record)
        for observer in self.outer:
            observer.capture.claimed.add(record.id)


#: the captures open on each bus, outermost first (an inner one claims what it sees)
_captures: weakref.WeakKeyDictionary[EventBus, list[_CaptureObserver]] = weakref.WeakKeyDictionary()


@contextmanager
def capture_failures(bus: EventBus) -> Iterator[FailureCapture]:
    """Collect the failure records *bus* makes while the block runs.

    It observes the bus's failure sink, as instrumentation does, rather than ``on_failure``
    (which it leaves alone) or the store: it sees every record, with any store, including a
    failure caused while ``on_failure`` runs (which does not call the hook again). Background
    listeners record when they run, so wait for them (``await listener.wait_for()``) inside
    the block.
    """
    capture = FailureCapture(bus)
    outer = _captures.setdefault(bus, [])
    observer = _CaptureObserver(capture, list(outer))
    bus.add_failure_observer(observer)
    outer.append(observer)
    try:
        yield capture
    finally:
        outer.remove(observer)
        bus.remove_failure_observer(observer)


# -- isolation -----------------------------------------------------------------------------------


def fresh_registry(base: EventRegistry | None = None) -> EventRegistry:
    """A new registry, empty or holding *base*'s declarations, so a test can add its own events.

    Declarations made in the copy never reach *base*; the event classes themselves are shared.
    """
    reg = EventRegistry()
    if base is not None:
        for name in base:
            reg.register(base.get(name), name)
    return reg


class UnexpectedFailuresError(AssertionError):
    """Listener failures were recorded that the test did not say it expected."""

    def __init__(self, records: list[FailureRecord]) -> None:
        self.records = records
        super().__init__(
            f"{len(records)} unexpected listener failure{'s' if len(records) != 1 else ''}: "
            f"{_describe_records(records)}; assert them inside 'with capture_failures(bus):' "
            "(or through the 'captured_failures' fixture), or mark the test with "
            "@pytest.mark.eventbus_expect_failures"
        )


@asynccontextmanager
async def running_bus(
    registry: EventRegistry | None = None, *, expect_failures: bool = False, **options: Any
) -> AsyncIterator[EventBus]:
    """Run a new :class:`EventBus` for a block; on exit, fail on failures nobody expected.

    A failure is expected when *expect_failures* is true or a :func:`capture_failures` block
    inside saw it. Shutdown failures (work cut short by the drain) count too.

    :param options: passed to :class:`EventBus`
    :raises UnexpectedFailuresError: on leaving the block, listing the records
    """
    bus = EventBus(registry, **options)
    with capture_failures(bus) as capture:
        async with bus:
            yield bus
    unexpected = [r for r in capture.records if r.id not in capture.claimed]
    if unexpected and not expect_failures:
        raise UnexpectedFailuresError(unexpected)
