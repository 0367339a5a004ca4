"""Exceptions raised by the event bus.

The tree::

    EventBusError
     ├── UnknownEventError           (LookupError)   an event name or type nobody declared
     ├── DuplicateEventError         (ValueError)    a name declared twice in one registry
     ├── InvalidEventNameError       (ValueError)    a name outside ``[a-z0-9_-]`` dot segments
     ├── InvalidPatternError         (ValueError)    a subscription pattern that cannot match
     ├── PayloadError                (TypeError)     a payload that does not fit its declared type
     ├── DuplicateListenerError      (ValueError)    two listeners would share one name
     ├── ListenerLookupError         (LookupError)   ``off()`` or a retry names no listener
     ├── BusNotRunningError          (RuntimeError)  async listeners, bus not entered
     ├── WrongThreadError            (RuntimeError)  emit() from another thread than the loop's
     ├── RecursionLimitError         (RuntimeError)  nested emits deeper than ``max_depth``
     ├── DurableError                (TypeError)     durable use of what is not durable
     ├── NoTransactionError          (RuntimeError)  a durable publish outside a transaction
     ├── DeliveriesExhaustedError    (RuntimeError)  a dead letter's error: crashed every time
     ├── EnvelopeError               (ValueError)    a stream entry that is no event envelope
     ├── UnsafeRedisError            (RuntimeError)  a Redis that may evict, or is too old
     ├── ListenerTimeoutError        (TimeoutError)  a listener's ``timeout=`` expired
     ├── ListenerDroppedError        a call that never ran (queue full, bus closing)
     ├── ListenerShutdownError       a call that shutdown cut short
     ├── ListenerCancelledError      a listener raised a cancellation itself (``propagate``)
     ├── AppLoadError                (ValueError)    ``--app`` names nothing usable
     ├── InputError                  (ValueError)    a command's bad input (exit status 2)
     ├── MissingExtraError           (ImportError)   an optional part without its extra
     ├── UnmappedEventError          (LookupError)   a bridged pyee name with no mapping
     ├── UnsupportedPyeeEventError   (ValueError)    pyee's ``error`` or ``new_listener``
     ├── LoginSecretError            (ValueError)    a console secret too short to guard actions
     └── ActionError                 input a console action refuses (a 400 or 404 page)
    ListenerErrors (ExceptionGroup)  what ``errors="propagate"`` raises, always a group
    UnexpectedFailuresError (AssertionError)  failures a test did not expect
    MaxListenersExceededWarning (RuntimeWarning)  one name has more listeners than it should

Defined beside what raises them: ``AppLoadError`` and ``InputError`` in :mod:`eventbus.cli`,
``MissingExtraError`` in :mod:`eventbus.extras`, the two pyee errors
in :mod:`eventbus.interop.pyee` (``UnmappedEventError`` is a ``LookupError`` as pyee's own
``KeyError`` is; ``UnsupportedPyeeEventError`` a ``ValueError``: the name means nothing on the
bus), ``UnexpectedFailuresError`` in :mod:`eventbus.testing`, the console's two in
:mod:`eventbus.console`, the durable transport's three in :mod:`eventbus.durable`, and
``UnsafeRedisError`` in :mod:`eventbus.backends.redis`. ``tests/test_docstrings.py``
checks this tree against the classes.

Messages are built here from data, so that raise sites pass values, not prose.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "BusNotRunningError",
    "DuplicateEventError",
    "DuplicateListenerError",
    "DurableError",
    "EventBusError",
    "InvalidEventNameError",
    "InvalidPatternError",
    "ListenerCancelledError",
    "ListenerDroppedError",
    "ListenerErrors",
    "ListenerLookupError",
    "ListenerShutdownError",
    "ListenerTimeoutError",
    "MaxListenersExceededWarning",
    "PayloadError",
    "RecursionLimitError",
    "UnknownEventError",
    "WrongThreadError",
]


class EventBusError(Exception):
    """Root of every error the bus raises on purpose."""


class UnknownEventError(EventBusError, LookupError):
    """An event name or type that nobody declared in the registry in use."""

    def __init__(
        self, name: str, hint: str = "declare it with 'class X(Event, name=...)' first"
    ) -> None:
        self.name = name
        super().__init__(f"event {name!r} is not declared in this registry; {hint}")


class DuplicateEventError(EventBusError, ValueError):
    """An event name declared twice in one registry."""

    def __init__(self, name: str, existing: type, new: type) -> None:
        self.name = name
        super().__init__(
            f"event {name!r} is already declared by {existing.__module__}.{existing.__qualname__}; "
            f"{new.__module__}.{new.__qualname__} must use another name or another registry"
        )


class InvalidEventNameError(EventBusError, ValueError):
    """An event name outside dot-separated segments of ``[a-z0-9_-]``."""

    def __init__(self, name: object, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"invalid event name {name!r}: {reason}")


class InvalidPatternError(EventBusError, ValueError):
    """A subscription pattern that cannot match any event name."""

    def __init__(self, pattern: object, reason: str) -> None:
        self.pattern = pattern
        self.reason = reason
        super().__init__(f"invalid pattern {pattern!r}: {reason}")


class PayloadError(EventBusError, TypeError):
    """A payload that does not fit its event's declared fields and types."""

    def __init__(self, event: str, problem: str) -> None:
        self.event = event
        self.problem = problem
        super().__init__(f"payload of {event!r}: {problem}")


class DuplicateListenerError(EventBusError, ValueError):
    """Two listeners on one bus would share one name (names identify them in the failure table)."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"a listener named {name!r} is already subscribed on this bus; "
            "pass a distinct name= (the name identifies it in the failure table and in retries)"
        )


class DurableError(EventBusError, TypeError):
    """A durable operation on what is not durable: a type not declared ``durable=True``, a
    bus without a durable transport, an option durable listeners do not take."""

    def __init__(self, what: str, name: str, problem: str) -> None:
        self.name = name
        super().__init__(f"{what}({name!r}): {problem}")


class ListenerLookupError(EventBusError, LookupError):
    """``off()`` or a retry names a listener that is not subscribed."""

    def __init__(self, what: str) -> None:
        super().__init__(what)


class BusNotRunningError(EventBusError, RuntimeError):
    """The bus must be running (``async with bus:``) for this call; *call* names the method."""

    def __init__(self, event: str, async_listeners: int = 0, *, call: str = "emit") -> None:
        self.event = event
        if call == "emit":
            message = (
                f"emit({event!r}) found {async_listeners} async listener"
                f"{'s' if async_listeners != 1 else ''} but the bus is not running; "
                "enter 'async with bus:' first, or use 'await bus.emit_async(...)'"
            )
        else:
            message = (
                f"{call}({event!r}) needs a running bus to hand the event to, and this one is "
                "not running (not entered yet, or closed): nothing was emitted; enter "
                "'async with bus:' in the bus's event loop first"
            )
        super().__init__(message)


class WrongThreadError(EventBusError, RuntimeError):
    """An emit from another thread than the running bus's event loop thread (or
    ``emit_threadsafe()`` from that thread itself, where it would deadlock)."""

    def __init__(self, call: str, event: str, thread: str, loop_thread: str) -> None:
        self.event = event
        if call == "emit_threadsafe":
            message = (
                f"emit_threadsafe({event!r}) was called from thread {thread!r}, the bus's own "
                "event loop thread, where waiting for it would deadlock; there, use emit() "
                "or 'await emit_async()'"
            )
        else:
            message = (
                f"{call}({event!r}) was called from thread {thread!r}, but the bus runs in "
                f"the event loop of thread {loop_thread!r} and is not thread-safe; from other "
                "threads use bus.emit_threadsafe(event), which hands the emit to the bus's loop"
            )
        super().__init__(message)


class MaxListenersExceededWarning(RuntimeWarning):
    """More listeners on one event name or pattern than ``max_listeners``: usually a leak."""

    def __init__(self, pattern: str, count: int, limit: int) -> None:
        self.pattern = pattern
        self.count = count
        self.limit = limit
        super().__init__(
            f"{count} listeners are subscribed to {pattern!r} on one bus "
            f"(max_listeners={limit}): listeners added per request and never removed? "
            "Remove them with off() or subscribe with 'with bus.subscribed(...)'; or raise "
            "EventBus(max_listeners=...) (0 turns this warning off)"
        )


class RecursionLimitError(EventBusError, RuntimeError):
    """Emits nested deeper than ``max_depth``: a listener probably re-emits its own event."""

    def __init__(self, event: str, depth: int) -> None:
        self.event = event
        self.depth = depth
        super().__init__(
            f"emit({event!r}) is nested {depth} levels deep (max_depth={depth}); "
            "a listener probably re-emits the event that triggered it"
        )


class ListenerTimeoutError(EventBusError, TimeoutError):
    """A listener's ``timeout=`` expired; the call was cancelled."""

    def __init__(self, listener: str, timeout: float) -> None:
        self.listener = listener
        self.timeout = timeout
        super().__init__(f"listener {listener!r} did not finish within timeout={timeout:g}s")


class ListenerDroppedError(EventBusError):
    """A call that never ran: the queue was full, or the bus was closing."""

    def __init__(self, listener: str, reason: str) -> None:
        self.listener = listener
        self.reason = reason
        super().__init__(f"dropped: {reason} (listener {listener!r} never ran)")


class ListenerShutdownError(EventBusError):
    """A call that shutdown cut short; ``__cause__`` is its last attempt's error, if any."""

    def __init__(
        self, listener: str, grace: float, started: bool, last_error: BaseException | None = None
    ) -> None:
        self.listener = listener
        self.started = started
        self.grace = grace
        state = (
            "was still running, and was cancelled," if started else "never started: still queued"
        )
        last = ""
        if last_error is not None:
            last = f"; its last attempt raised {type(last_error).__name__}: {_safe(last_error)}"
        super().__init__(
            f"shutdown: listener {listener!r} {state} when the grace period ({grace:g}s) ended"
            + last
        )


class ListenerCancelledError(EventBusError):
    """A listener raised a cancellation exception itself (asyncio: it awaited a future
    cancelled elsewhere): its member of :class:`ListenerErrors` under ``propagate``, which
    holds exceptions only. ``__cause__`` is the cancellation, as recorded."""

    def __init__(self, listener: str, cancellation: BaseException) -> None:
        self.listener = listener
        super().__init__(
            f"listener {listener!r} raised {_safe_repr(cancellation)} itself (not a "
            "cancellation of the publisher)"
        )


class ListenerErrors(ExceptionGroup[Exception]):
    """Raised to the publisher under ``errors="propagate"``: always a group, even of one.

    Each member carries a note ``listener: <name>``; ``split()`` and ``except*`` keep this type.
    """

    event: str

    def __new__(cls, message: str, exceptions: Sequence[Exception], *, event: str = "") -> Any:
        self = super().__new__(cls, message, exceptions)
        self.event = event
        return self

    def __init__(self, message: str, exceptions: Sequence[Exception], *, event: str = "") -> None:
        super().__init__(message, exceptions)

    @classmethod
    def for_event(cls, event: str, exceptions: Sequence[Exception]) -> ListenerErrors:
        n = len(exceptions)
        return cls(
            f"{n} listener{'s' if n != 1 else ''} failed for {event!r}", exceptions, event=event
        )

    def derive(self, excs: Sequence[Exception]) -> ListenerErrors:  # type: ignore[override]
        return ListenerErrors(self.message, excs, event=self.event)


def _safe_repr(exc: BaseException) -> str:
    try:
        return repr(exc)
    except Exception:
        return f"{type(exc).__name__}(<unprintable>)"


def _safe(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return f"<unprintable {type(exc).__qualname__}>"
