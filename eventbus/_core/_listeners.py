"""Listener subscriptions and the outcome of one listener call."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any, Literal, Protocol, TypedDict, TypeVar

from .._events import Event
from .._failures import FailureRecord

__all__ = [
    "E",
    "ErrorPolicy",
    "Listener",
    "ListenerOptions",
    "OnceOptions",
    "Outcome",
    "R",
    "TypedDecorator",
    "default_listener_name",
    "is_async_callable",
    "new_outcome",
]

ErrorPolicy = Literal["capture", "propagate"]

E = TypeVar("E", bound=Event)
R = TypeVar("R")


class TypedDecorator(Protocol[E]):
    """What ``bus.on(OrderPaid)`` returns: takes a listener of that event, returns it unchanged."""

    def __call__(self, fn: Callable[[E], R], /) -> Callable[[E], R]: ...


class OnceOptions(TypedDict, total=False):
    """The keyword options of ``bus.once()`` (for the type checker; see ``bus.on()``)."""

    name: str | None
    timeout: float | None
    retries: int
    errors: ErrorPolicy | None
    priority: int


class ListenerOptions(OnceOptions, total=False):
    """The keyword options of ``bus.on()`` (for the type checker)."""

    once: bool
    times: int | None


@dataclasses.dataclass(eq=False, slots=True)
class Listener:
    """One subscription on a bus. ``name`` identifies it in the failure table and in retries."""

    fn: Callable[[Any], Any]
    name: str
    pattern: str
    is_async: bool
    times: int | None = None  #: calls before it unsubscribes itself (None: no limit)
    timeout: float | None = None
    retries: int = 0
    errors: ErrorPolicy | None = None
    priority: int = 0  #: higher runs first; equal priorities run in subscription order
    seq: int = 0
    left: int | None = None  #: calls left of ``times`` (taken when an emit claims a call)
    segments: tuple[str, ...] = ()  # the compiled pattern, matched when a plan is built
    #: what the bus calls: ``fn`` itself, or a wrapper of it (instrumentation)
    call: Callable[[Any], Any] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.left is None:
            self.left = self.times
        self.call = self.fn

    @property
    def once(self) -> bool:
        """Subscribed with ``once=True`` (or ``times=1``)."""
        return self.times == 1

    def __repr__(self) -> str:
        kind = "async" if self.is_async else "sync"
        extra = "" if self.priority == 0 else f", priority={self.priority}"
        extra += "" if self.times is None else f", times={self.times}"
        return f"<Listener {self.name!r} on {self.pattern!r} ({kind}{extra})>"

    def claim(self) -> bool:
        """Take one of the calls left (``times=``): False when none is, because a nested
        emit took the last one; unlimited listeners are never asked."""
        left = self.left
        if not left:
            return False
        self.left = left - 1
        return True


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """What one listener call of ``emit_async()`` produced."""

    listener: str
    value: Any = None
    error: BaseException | None = None
    duration: float = 0.0
    failure: FailureRecord | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class _OutcomeDraft:
    """The slots of :class:`Outcome`, not frozen: :func:`new_outcome` fills one, then retypes it."""

    __slots__ = Outcome.__slots__


_new = object.__new__


def new_outcome(
    listener: str,
    value: Any,
    error: BaseException | None,
    duration: float,
    failure: FailureRecord | None,
) -> Outcome:
    """``Outcome(listener, value, error, duration, failure)`` at about a third of the cost.

    ``emit_async()`` makes one outcome per listener, so this is its hot path. A frozen
    dataclass's ``__init__`` calls ``object.__setattr__`` per field; plain slot stores on a draft
    with the same slots, then a ``__class__`` assignment (which CPython allows between classes
    of the same layout), give the same object.
    """
    out: Any = _new(_OutcomeDraft)
    out.listener = listener
    out.value = value
    out.error = error
    out.duration = duration
    out.failure = failure
    out.__class__ = Outcome
    result: Outcome = out
    return result


def default_listener_name(fn: Callable[..., Any]) -> str:
    """``module:qualname``: stable across restarts, which a retry from the table relies on."""
    target = getattr(fn, "func", fn)  # functools.partial
    module = getattr(target, "__module__", None) or type(target).__module__
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    return f"{module}:{qualname}"


def is_async_callable(fn: Callable[..., Any]) -> bool:
    """Whether calling *fn* makes a coroutine, seeing through partials and ``functools.wraps``.

    A sync wrapper around an ``async def`` (a logging decorator, say) returns a coroutine, so it
    must run as an async listener or it never runs at all.
    """
    for _ in range(100):  # partial(wraps(partial(...))): peel until nothing changes
        inner = fn.func if isinstance(fn, functools.partial) else inspect.unwrap(fn)
        if inner is fn:
            break
        fn = inner
    # An instance's ``__call__`` may come from a base class (a subclass of
    # eventbus.testing.AsyncRecordingListener, say): look it up as Python does.
    call = None if inspect.isroutine(fn) or not callable(fn) else type(fn).__call__
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)
