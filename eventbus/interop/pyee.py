"""Interop with pyee, so code written against pyee can move to the bus one module at a time.

* :func:`bridge_from_pyee` forwards what an existing pyee emitter emits into typed bus events;
* :func:`bridge_to_pyee` forwards bus events to a pyee emitter, for listeners not yet moved;
* :func:`as_pyee` gives the bus pyee's call shapes (``on``, ``once``, ``emit``,
  ``remove_listener``, ``listeners``) for publishers and subscribers being moved.

Where the facade differs from pyee, on purpose:

* **Errors are captured, not emitted.** A failing listener becomes a
  :class:`~eventbus.FailureRecord` (logged, stored, passed to ``on_failure``), the other
  listeners still run and ``emit`` returns normally; pyee's ``EventEmitter`` raises into the
  publisher and ``AsyncIOEventEmitter`` emits ``error``. There is no ``error`` (nor
  ``new_listener``) event: subscribing to or emitting one raises
  :class:`UnsupportedPyeeEventError`, which says where to look instead.
* **Names are declared.** ``emit`` takes a declared dotted name and builds the typed event
  from keyword arguments, from one mapping, or takes the event itself; anything else is a
  :class:`~eventbus.PayloadError`. Listeners receive the event (``call="kwargs"`` spreads its
  fields as keyword arguments instead).
* **Wildcards work**: ``on("order.*", f)`` matches; ``listeners(name)`` therefore also lists
  wildcard listeners that match, in the order an emit calls them.
* **Async listeners are the bus's**: ``emit`` queues them for the bus's workers (the bus must
  be running); pyee's plain ``EventEmitter`` would call them and drop the coroutine.
* ``remove_listener`` of an unknown pair raises :class:`~eventbus.ListenerLookupError` (a
  ``LookupError``, as pyee's ``KeyError`` is). The bus, unlike pyee, is not thread-safe: emit
  from the event loop's thread.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Literal, Self, cast

from .._public import show_as_module
from ..extras import missing_extra

if _missing := missing_extra(__name__, "pyee"):
    raise _missing

from pyee import EventEmitter

from .._core._bus import EventBus
from .._events import Event
from .._exceptions import EventBusError, PayloadError, UnknownEventError
from ._pyee_common import PYEE_SPECIAL, call_shape, event_fields
from ._pyee_common import CallShape as CallShape
from ._pyee_common import UnsupportedPyeeEventError as UnsupportedPyeeEventError
from ._pyee_facade import PyeeFacade as PyeeFacade
from ._pyee_facade import as_pyee as as_pyee

__all__ = [
    "PyeeBridge",
    "PyeeFacade",
    "UnmappedEventError",
    "UnsupportedPyeeEventError",
    "as_pyee",
    "bridge_from_pyee",
    "bridge_to_pyee",
]

Converter = type[Event] | Callable[..., Event]

# What the bridges are forwarding right now, so that an event is never sent back where it came
# from (one emitter bridged both ways would loop): emitters that bridge_from_pyee is reading
# from, and (emitter, event) pairs that bridge_to_pyee is writing to.
_from: contextvars.ContextVar[tuple[int, ...]] = contextvars.ContextVar(
    "eventbus_pyee_from", default=()
)
_to: contextvars.ContextVar[tuple[tuple[int, Event], ...]] = contextvars.ContextVar(
    "eventbus_pyee_to", default=()
)


class UnmappedEventError(EventBusError, LookupError):
    """A bridged pyee emitter emitted a name that ``mapping`` does not cover."""

    def __init__(self, name: str, mapped: list[str]) -> None:
        self.name = name
        super().__init__(
            f"pyee event {name!r} has no mapping to a bus event (mapped: "
            f"{', '.join(map(repr, mapped)) or 'none'}); add it to mapping=, "
            "or bridge with unmapped='ignore'"
        )


class PyeeBridge:
    """A live bridge between a pyee emitter and a bus; :meth:`detach` (or ``with``) ends it."""

    def __init__(self, description: str, undo: list[Callable[[], None]]) -> None:
        self._description = description
        self._undo = undo

    def __repr__(self) -> str:
        state = "attached" if self.attached else "detached"
        return f"<PyeeBridge {self._description} ({state})>"

    @property
    def attached(self) -> bool:
        return bool(self._undo)

    def detach(self) -> None:
        """Stop forwarding; calling it again does nothing."""
        undo, self._undo = self._undo, []
        for step in reversed(undo):
            step()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.detach()


def bridge_from_pyee(
    emitter: EventEmitter,
    bus: EventBus,
    mapping: Mapping[str, Converter],
    *,
    unmapped: Literal["ignore", "reject"] = "ignore",
) -> PyeeBridge:
    """Forward events emitted on a pyee emitter into typed events on *bus* (with ``bus.emit``).

    Each mapped name gets one pyee listener, so forwarding happens in pyee's listener order and
    the emitter's own listeners keep working. A mapped value is either an event type, built
    from the pyee call's keyword arguments or single mapping argument (validated like
    ``bus.emit(name, payload)``) or passed through if it is already that event; or a function
    of the pyee call's arguments returning the event.

    Errors follow pyee's rules for its listeners, since the bridge is one: a bad payload, or a
    bus listener's error under ``errors="propagate"``, raises into the pyee publisher
    (``EventEmitter``) or is emitted as ``error`` (``AsyncIOEventEmitter``). Under the default
    ``capture`` policy the publisher never sees a bus listener fail.

    :param mapping: pyee event name -> event type or converter
    :param unmapped: ``"ignore"`` other names, or ``"reject"`` them: ``emitter.emit`` of a
        name not in *mapping* then raises :class:`UnmappedEventError` before any listener runs
        (pyee's own ``error`` and ``new_listener`` pass)
    :raises UnknownEventError: if a mapped event type is not declared in the bus's registry
    """
    if unmapped not in ("ignore", "reject"):
        raise ValueError(f"unmapped={unmapped!r} must be 'ignore' or 'reject'")
    converters = {name: _converter(bus, name, conv) for name, conv in mapping.items()}
    undo: list[Callable[[], None]] = []
    for name, convert in converters.items():
        handler = functools.partial(_forward, emitter, bus, convert)
        emitter.add_listener(name, handler)
        undo.append(functools.partial(_remove, emitter, name, handler))
    if unmapped == "reject":
        undo.append(_guard_emit(emitter, sorted(converters)))
    return PyeeBridge(f"{type(emitter).__name__} -> {sorted(converters)}", undo)


def _converter(bus: EventBus, name: str, conv: Converter) -> Callable[..., Event]:
    if name in PYEE_SPECIAL:
        raise UnsupportedPyeeEventError(name)
    if isinstance(conv, type) and issubclass(conv, Event):
        cls = conv
        if not cls.__event_name__ or cls not in bus.registry:
            raise UnknownEventError(
                cls.__event_name__ or cls.__qualname__,
                f"mapping[{name!r}] must be declared in the bus's registry",
            )
        return functools.partial(_build, bus, name, cls)
    if not callable(conv):
        raise TypeError(
            f"mapping[{name!r}] must be an Event type or a function returning an event, "
            f"got {conv!r}"
        )
    return functools.partial(_checked, name, cast(Callable[..., Event], conv))


def _build(bus: EventBus, pyee_name: str, cls: type[Event], *args: Any, **kwargs: Any) -> Event:
    if not args:
        return bus.registry.build(cls.__event_name__, kwargs)
    if len(args) == 1 and not kwargs:
        (arg,) = args
        if isinstance(arg, cls):
            return arg
        if isinstance(arg, Mapping):
            return bus.registry.build(cls.__event_name__, arg)
    raise PayloadError(
        cls.__event_name__,
        f"pyee event {pyee_name!r} was emitted with {len(args)} positional argument(s) "
        f"and {len(kwargs)} keyword argument(s); an event type in mapping= takes keyword "
        "arguments, one mapping or the event itself: map it with a function instead",
    )


def _checked(pyee_name: str, conv: Callable[..., Event], *args: Any, **kwargs: Any) -> Event:
    event = conv(*args, **kwargs)
    if not isinstance(event, Event):
        raise PayloadError(
            pyee_name,
            f"mapping[{pyee_name!r}] returned {type(event).__name__}, not an Event instance",
        )
    return event


def _forward(
    emitter: EventEmitter, bus: EventBus, convert: Callable[..., Event], *args: Any, **kwargs: Any
) -> None:
    event = convert(*args, **kwargs)
    if any(eid == id(emitter) and sent == event for eid, sent in _to.get()):
        return  # bridge_to_pyee is sending this very event to this emitter: an echo
    token = _from.set((*_from.get(), id(emitter)))
    try:
        bus.emit(event)
    finally:
        _from.reset(token)


def _remove(emitter: EventEmitter, name: str, handler: Callable[..., Any]) -> None:
    try:
        emitter.remove_listener(name, handler)
    except KeyError:
        pass  # already removed (remove_all_listeners)


def _guard_emit(emitter: EventEmitter, mapped: list[str]) -> Callable[[], None]:
    """Shadow ``emitter.emit`` with a check; return the step that takes it away again."""
    original = emitter.emit
    active = True
    allowed = frozenset(mapped) | PYEE_SPECIAL

    def emit(event: str, *args: Any, **kwargs: Any) -> bool:
        if active and event not in allowed:
            raise UnmappedEventError(event, mapped)
        return original(event, *args, **kwargs)

    setattr(emitter, "emit", emit)  # noqa: B010 - an instance attribute, not a method

    def undo() -> None:
        nonlocal active
        if vars(emitter).get("emit") is emit:
            delattr(emitter, "emit")
        else:  # wrapped again since: stay in place, but only pass through
            active = False

    return undo


def bridge_to_pyee(
    bus: EventBus,
    emitter: EventEmitter,
    pattern: str | type[Event] = "**",
    *,
    name: str | None = None,
    call: CallShape = "event",
) -> PyeeBridge:
    """Forward bus events matching *pattern* to ``emitter.emit(event_name, ...)``.

    The forwarder is one sync bus listener, so a pyee listener that raises (or an
    ``AsyncIOEventEmitter`` ``error`` nobody handles) is recorded by the bus as that listener's
    failure, and can be retried from the failure table. An event is never sent back where it
    came from, so one emitter can be bridged both ways (events are compared by value, which
    covers ``call="kwargs"``).

    :param name: the forwarder's listener name (default
        ``eventbus.interop.pyee:to_pyee[<pattern>]``); give one per bridge on the same pattern
    :param call: pass the event as one argument (``"event"``) or its fields as keywords
    """
    target = pattern if isinstance(pattern, str) else pattern.__event_name__
    lname = name if name is not None else f"{__name__}:to_pyee[{target}]"
    spread = call_shape(call)

    def to_pyee(event: Event) -> None:
        if id(emitter) in _from.get():
            return  # it came from this emitter: sending it back would loop
        token = _to.set((*_to.get(), (id(emitter), event)))
        try:
            if spread:
                emitter.emit(event.event_name, **event_fields(event))
            else:
                emitter.emit(event.event_name, event)
        finally:
            _to.reset(token)

    bus.on(target, to_pyee, name=lname)
    return PyeeBridge(f"{target!r} -> {type(emitter).__name__}", [lambda: bus.off(target, lname)])


# Defined in private modules; reprs and tracebacks show the path users import from.
show_as_module(__name__, PyeeFacade, UnsupportedPyeeEventError, as_pyee, within="eventbus.interop")
