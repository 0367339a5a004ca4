"""Subscribing and unsubscribing: ``on`` / ``once`` / ``off``, lookups, pattern validation."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from ._events import Event, EventRegistry
from ._exceptions import DuplicateListenerError, ListenerLookupError, UnknownEventError
from ._listeners import ErrorPolicy, Listener, default_listener_name, is_async_callable
from ._patterns import compile_pattern, is_pattern

if TYPE_CHECKING:
    from ._dispatch import FastPlan, Plan, SinglePlan

__all__ = ["Subscriptions"]

E = TypeVar("E", bound=Event)
R = TypeVar("R")


class _TypedDecorator(Protocol[E]):
    def __call__(self, fn: Callable[[E], R], /) -> Callable[[E], R]: ...


class Subscriptions:
    """The bus's subscription list (a mixin of :class:`EventBus`); changes clear the plan cache."""

    if TYPE_CHECKING:
        registry: EventRegistry
        _plans: dict[type[Event], SinglePlan | FastPlan | Plan]
        _subs: list[Listener]
        _names: dict[str, Listener]
        _seq: itertools.count[int]

        def _build_plan(self, cls: type[Event]) -> Plan: ...

    @overload
    def on(
        self,
        event: type[E],
        /,
        *,
        name: str | None = ...,
        once: bool = ...,
        timeout: float | None = ...,
        retries: int = ...,
        errors: ErrorPolicy | None = ...,
    ) -> _TypedDecorator[E]: ...

    @overload
    def on(
        self,
        event: str,
        /,
        *,
        name: str | None = ...,
        once: bool = ...,
        timeout: float | None = ...,
        retries: int = ...,
        errors: ErrorPolicy | None = ...,
    ) -> _TypedDecorator[Event]: ...

    @overload
    def on(
        self,
        event: type[E],
        listener: Callable[[E], R],
        /,
        *,
        name: str | None = ...,
        once: bool = ...,
        timeout: float | None = ...,
        retries: int = ...,
        errors: ErrorPolicy | None = ...,
    ) -> Callable[[E], R]: ...

    @overload
    def on(
        self,
        event: str,
        listener: Callable[[Event], R],
        /,
        *,
        name: str | None = ...,
        once: bool = ...,
        timeout: float | None = ...,
        retries: int = ...,
        errors: ErrorPolicy | None = ...,
    ) -> Callable[[Event], R]: ...

    def on(
        self,
        event: type[Event] | str,
        listener: Callable[[Any], Any] | None = None,
        /,
        *,
        name: str | None = None,
        once: bool = False,
        timeout: float | None = None,
        retries: int = 0,
        errors: ErrorPolicy | None = None,
    ) -> Any:
        """Subscribe a listener to an event type, an event name or a wildcard pattern.

        Use as ``@bus.on(OrderPaid)`` or ``bus.on("order.*", fn)``; the function is returned
        unchanged. Everything is validated before anything is registered.

        :param name: stable name for the failure table (default ``module:qualname``)
        :param once: remove the listener after its first call
        :param timeout: seconds after which an async listener is cancelled and a timeout recorded
        :param retries: extra attempts before a failure is recorded (recorded once)
        :param errors: this listener's policy; default: the bus's
        :raises DuplicateListenerError: if another listener on this bus already has that name
        """
        pattern = self._pattern_of(event)
        if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
            raise ValueError(f"timeout={timeout!r} must be a positive number of seconds")
        if not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries={retries!r} must be an int >= 0")
        if errors not in (None, "capture", "propagate"):
            raise ValueError(f"errors={errors!r} is not a policy; use 'capture' or 'propagate'")

        def subscribe(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
            if not callable(fn):
                raise TypeError(f"listener for {pattern!r} must be callable, got {fn!r}")
            is_async = is_async_callable(fn)
            if timeout is not None and not is_async:
                raise ValueError(
                    f"timeout= applies to async listeners only; {default_listener_name(fn)!r} "
                    "is sync and cannot be cancelled while it runs"
                )
            lname = name if name is not None else default_listener_name(fn)
            if lname in self._names:
                raise DuplicateListenerError(lname)
            sub = Listener(
                fn=fn,
                name=lname,
                pattern=pattern,
                is_async=is_async,
                once=once,
                timeout=timeout,
                retries=retries,
                errors=errors,
                seq=next(self._seq),
                segments=compile_pattern(pattern),
            )
            self._subs.append(sub)
            self._names[lname] = sub
            self._plans.clear()
            return fn

        if listener is not None:
            return subscribe(listener)
        return subscribe

    @overload
    def once(
        self,
        event: type[E],
        /,
        *,
        name: str | None = ...,
        timeout: float | None = ...,
        retries: int = ...,
        errors: ErrorPolicy | None = ...,
    ) -> _TypedDecorator[E]: ...

    @overload
    def once(
        self,
        event: str,
        /,
        *,
        name: str | None = ...,
        timeout: float | None = ...,
        retries: int = ...,
        errors: ErrorPolicy | None = ...,
    ) -> _TypedDecorator[Event]: ...

    @overload
    def once(
        self,
        event: type[E],
        listener: Callable[[E], R],
        /,
        *,
        name: str | None = ...,
        timeout: float | None = ...,
        retries: int = ...,
        errors: ErrorPolicy | None = ...,
    ) -> Callable[[E], R]: ...

    @overload
    def once(
        self,
        event: str,
        listener: Callable[[Event], R],
        /,
        *,
        name: str | None = ...,
        timeout: float | None = ...,
        retries: int = ...,
        errors: ErrorPolicy | None = ...,
    ) -> Callable[[Event], R]: ...

    def once(
        self,
        event: type[Event] | str,
        listener: Callable[[Any], Any] | None = None,
        /,
        *,
        name: str | None = None,
        timeout: float | None = None,
        retries: int = 0,
        errors: ErrorPolicy | None = None,
    ) -> Any:
        """Like :meth:`on` with ``once=True``, as a decorator or a call."""
        options: dict[str, Any] = {
            "name": name,
            "timeout": timeout,
            "retries": retries,
            "errors": errors,
        }
        if listener is None:
            return self.on(event, once=True, **options)
        return self.on(event, listener, once=True, **options)

    def off(self, event: type[Event] | str, listener: Callable[..., Any] | str, /) -> None:
        """Unsubscribe by function or by listener name; an emit already running is unaffected.

        :raises ListenerLookupError: if no such subscription exists
        """
        pattern = self._pattern_of(event)
        for sub in self._subs:
            # ``==``, not ``is``: a bound method is a new object at each attribute access.
            if sub.pattern == pattern and (
                sub.name == listener if isinstance(listener, str) else sub.fn == listener
            ):
                self._remove(sub)
                return
        who = listener if isinstance(listener, str) else default_listener_name(listener)
        raise ListenerLookupError(f"no listener {who!r} is subscribed to {pattern!r}")

    def listeners(self, event: type[Event] | str) -> list[Listener]:
        """The listeners an emit of *event* would call, in the order it would call them."""
        cls = self.registry.get(event) if isinstance(event, str) else event
        return list(self._build_plan(cls).listeners)

    def listener(self, name: str) -> Listener | None:
        """The subscription with that name, if any (retries look listeners up this way)."""
        return self._names.get(name)

    def _remove(self, sub: Listener) -> None:
        try:
            self._subs.remove(sub)
        except ValueError:
            return
        if self._names.get(sub.name) is sub:
            del self._names[sub.name]
        self._plans.clear()

    def _pattern_of(self, event: type[Event] | str) -> str:
        if isinstance(event, str):
            compile_pattern(event)
            if not is_pattern(event) and event not in self.registry:
                raise UnknownEventError(
                    event, "declare it before subscribing, or subscribe with a wildcard pattern"
                )
            return event
        if isinstance(event, type) and issubclass(event, Event):
            if not event.__event_name__:
                raise UnknownEventError(event.__qualname__, "an event base class has no name=")
            if self.registry.get(event.__event_name__) is not event:
                raise UnknownEventError(event.__event_name__, "it is declared in another registry")
            return event.__event_name__
        raise TypeError(f"expected an Event subclass or a pattern string, got {event!r}")
