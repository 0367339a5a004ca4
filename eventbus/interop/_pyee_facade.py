"""pyee's call shapes on top of the bus (:func:`as_pyee`), for publishers and subscribers
being moved from pyee; how it differs from pyee is in :mod:`eventbus.interop.pyee`, which
re-exports it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar, overload

from .._core._bus import EventBus
from .._core._listeners import default_listener_name, is_async_callable
from .._events import Event
from .._exceptions import ListenerLookupError, PayloadError
from ._pyee_common import (
    PYEE_SPECIAL,
    CallShape,
    UnsupportedPyeeEventError,
    call_shape,
    event_fields,
)

__all__ = ["PyeeFacade", "as_pyee"]

H = TypeVar("H", bound=Callable[..., Any])


class PyeeFacade:
    """pyee's call shapes on a :class:`~eventbus.EventBus`; see :mod:`eventbus.interop.pyee`.

    Each listener is subscribed under ``<module:qualname>@<event>`` (``#2``, ``#3`` appended
    when another function already holds that name), so the same function can listen to several
    events, as in pyee, and its failures are recorded under a stable name.
    """

    def __init__(self, bus: EventBus, *, call: CallShape = "event") -> None:
        self.bus = bus
        self._spread = call_shape(call)
        self._names: dict[tuple[str, Callable[..., Any]], str] = {}
        self._originals: dict[Callable[..., Any], Callable[..., Any]] = {}

    def __repr__(self) -> str:
        return f"PyeeFacade({self.bus!r})"

    @overload
    def on(self, event: str | type[Event], /) -> Callable[[H], H]: ...
    @overload
    def on(self, event: str | type[Event], f: H, /) -> H: ...

    def on(self, event: str | type[Event], f: H | None = None, /) -> H | Callable[[H], H]:
        """Subscribe *f* (or decorate): ``@ee.on("order.paid")`` or ``ee.on("order.*", f)``."""
        if f is None:
            return self.listens_to(event)
        return self.add_listener(event, f)

    def listens_to(self, event: str | type[Event]) -> Callable[[H], H]:
        def decorate(f: H) -> H:
            return self.add_listener(event, f)

        return decorate

    def add_listener(self, event: str | type[Event], f: H) -> H:
        self._subscribe(event, f, once=False)
        return f

    @overload
    def once(self, event: str | type[Event], /) -> Callable[[H], H]: ...
    @overload
    def once(self, event: str | type[Event], f: H, /) -> H: ...

    def once(self, event: str | type[Event], f: H | None = None, /) -> H | Callable[[H], H]:
        """Like :meth:`on`, removed after its first call."""

        def decorate(fn: H) -> H:
            self._subscribe(event, fn, once=True)
            return fn

        return decorate if f is None else decorate(f)

    def _subscribe(self, event: str | type[Event], f: Callable[..., Any], *, once: bool) -> None:
        key = (_name_of(event), f)
        if key[0] in PYEE_SPECIAL:
            raise UnsupportedPyeeEventError(key[0])
        current = self._names.get(key)
        if current is not None and self.bus.listener(current) is not None:
            return  # pyee keeps one registration per (event, function)
        base = f"{default_listener_name(f)}@{key[0]}"
        lname, n = base, 1
        while self.bus.listener(lname) is not None:
            n += 1
            lname = f"{base}#{n}"
        fn = self._wrap(f) if self._spread else f
        self.bus.on(key[0], fn, name=lname, once=once)
        self._names[key] = lname
        self._originals[fn] = f

    def _wrap(self, f: Callable[..., Any]) -> Callable[[Event], Any]:
        if is_async_callable(f):

            async def spread_async(event: Event) -> Any:
                return await f(**event_fields(event))

            return spread_async

        def spread(event: Event) -> Any:
            return f(**event_fields(event))

        return spread

    def emit(self, event: str | type[Event], *args: Any, **kwargs: Any) -> bool:
        """Emit a declared event; return whether any listener was subscribed (as pyee does).

        ``emit(name, **fields)``, ``emit(name, {...})`` and ``emit(name, event)`` all work;
        listener failures are captured by the bus, not raised (under its default policy).
        """
        name = _name_of(event)
        if name in PYEE_SPECIAL:
            raise UnsupportedPyeeEventError(name)
        if not args:
            built = self.bus.registry.build(name, kwargs)
        elif len(args) == 1 and not kwargs and isinstance(args[0], Event | Mapping):
            arg = args[0]
            if isinstance(arg, Event):
                if arg.event_name != name:
                    raise PayloadError(name, f"emit({name!r}, ...) got a {arg.event_name!r} event")
                built = arg
            else:
                built = self.bus.registry.build(name, arg)
        else:
            raise PayloadError(
                name,
                f"emit() got {len(args)} positional argument(s); pass the fields as keyword "
                "arguments, one mapping, or the event itself",
            )
        handled = bool(self.bus.listeners(type(built)))
        self.bus.emit(built)
        return handled

    def remove_listener(self, event: str | type[Event], f: Callable[..., Any]) -> None:
        """:raises ListenerLookupError: if *f* is not subscribed to *event* through this facade"""
        name = _name_of(event)
        lname = self._names.pop((name, f), None)
        if lname is None:
            raise ListenerLookupError(
                f"{default_listener_name(f)!r} is not subscribed to {name!r} through this facade"
            )
        sub = self.bus.listener(lname)
        if sub is not None:
            self._originals.pop(sub.fn, None)
            self.bus.off(name, lname)

    def remove_all_listeners(self, event: str | type[Event] | None = None) -> None:
        """Remove what this facade subscribed (to *event*, or everywhere); others stay."""
        only = None if event is None else _name_of(event)
        for name, f in [k for k in self._names if only is None or k[0] == only]:
            self.remove_listener(name, f)

    def listeners(self, event: str | type[Event]) -> list[Callable[..., Any]]:
        """The functions an emit of *event* calls, in order, wildcard listeners included."""
        return [self._originals.get(sub.fn, sub.fn) for sub in self.bus.listeners(event)]

    def event_names(self) -> set[str]:
        """Names and patterns this facade has listeners on."""
        return {name for (name, _), lname in self._names.items() if self.bus.listener(lname)}


def as_pyee(bus: EventBus, *, call: CallShape = "event") -> PyeeFacade:
    """A :class:`PyeeFacade` over *bus*: pyee's call shapes, the bus's semantics.

    :param call: how listeners are called: with the event (default) or ``**fields``
    """
    return PyeeFacade(bus, call=call)


def _name_of(event: str | type[Event]) -> str:
    return event if isinstance(event, str) else event.__event_name__
