"""The subscription front-end of the bus: ``on``, ``once``, ``subscribed``, ``wait_for``,
``off``, ``listeners`` and ``listener``, with the typed overloads users see.

These are module-level functions of a bus, bound as its methods in :class:`~eventbus.EventBus`'s
class body (``on = _subscribing.on``): the overloads, which make most of their length, live
here, and :mod:`eventbus._bus` keeps the state and the emit paths. They check their options
and hand the subscription to the bus's :class:`~eventbus._table.ListenerTable` (or, for
``durable=True``, to :func:`eventbus._durable_front.durable_subscriber`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Unpack, overload

from ._durable_front import durable_subscriber
from ._events import Event
from ._listeners import (
    E,
    ErrorPolicy,
    Listener,
    ListenerOptions,
    OnceOptions,
    R,
    TypedDecorator,
)
from ._subscription import Subscription
from ._wait import wait_for as _wait_for

if TYPE_CHECKING:
    from ._bus import EventBus

__all__ = ["listener", "listeners", "off", "on", "once", "subscribed", "wait_for"]

#: The keyword options of on(), which subscribed() takes too.
ON_OPTIONS = ListenerOptions.__required_keys__ | ListenerOptions.__optional_keys__

#: what a durable listener's kill switch counts: an exception type, or a tuple of them
TripOn = type[BaseException] | tuple[type[BaseException], ...]

#: a durable listener as given (it may take ``tx``), returned unchanged by ``on()``
F = TypeVar("F", bound=Callable[..., Any])


@overload
def on(
    bus: EventBus,
    event: type[E],
    /,
    *,
    durable: Literal[True],
    name: str | None = ...,
    trip_on: TripOn | None = ...,
) -> Callable[[F], F]: ...
@overload
def on(
    bus: EventBus,
    event: type[E],
    listener: F,
    /,
    *,
    durable: Literal[True],
    name: str | None = ...,
    trip_on: TripOn | None = ...,
) -> F: ...
@overload
def on(
    bus: EventBus, event: type[E], /, **options: Unpack[ListenerOptions]
) -> TypedDecorator[E]: ...
@overload
def on(
    bus: EventBus, event: str, /, **options: Unpack[ListenerOptions]
) -> TypedDecorator[Event]: ...
@overload
def on(
    bus: EventBus,
    event: type[E],
    listener: Callable[[E], R],
    /,
    **options: Unpack[ListenerOptions],
) -> Callable[[E], R]: ...
@overload
def on(
    bus: EventBus,
    event: str,
    listener: Callable[[Event], R],
    /,
    **options: Unpack[ListenerOptions],
) -> Callable[[Event], R]: ...


def on(
    bus: EventBus,
    event: type[Event] | str,
    listener: Callable[[Any], Any] | None = None,
    /,
    *,
    name: str | None = None,
    once: bool = False,
    timeout: float | None = None,
    retries: int = 0,
    errors: ErrorPolicy | None = None,
    priority: int = 0,
    times: int | None = None,
    durable: bool = False,
    trip_on: TripOn | None = None,
) -> Any:
    """Subscribe a listener to an event type, an event name or a wildcard pattern.

    Use as ``@bus.on(OrderPaid)`` or ``bus.on("order.*", fn)``; the function is returned
    unchanged. Everything is validated before anything is registered.

    :param name: stable name for the failure table (default ``module:qualname``)
    :param once: remove the listener after its first call (``times=1``)
    :param timeout: seconds after which an async listener is cancelled and a timeout recorded
    :param retries: extra attempts before a failure is recorded (recorded once)
    :param errors: this listener's policy; default: the bus's
    :param priority: higher runs first (default 0); equal priorities run in subscription
        order, exact and wildcard listeners alike
    :param times: unsubscribe after this many calls (default: no limit)
    :param durable: deliver the published events of this durable type across processes,
        through a consumer group of its own (``service:name``; give a stable *name*); the
        listener may take ``tx``, an open connection whose writes happen once per event.
        The other options do not apply (retries follow ``DurableOptions``)
    :param trip_on: durable only: the exceptions its group's kill switch counts as failures
        (``(OperationalError,)``: a payload bug then does not pause the group); default all
    :raises DuplicateListenerError: if another listener on this bus, in-process or durable,
        already has that name
    :raises ValueError: naming the option, for a value out of range (``times=0``)
    :raises TypeError: naming the option, for a value of the wrong type
    """
    if durable:
        return durable_subscriber(
            bus, event, listener, name, once or timeout is not None or bool(retries)
            or errors is not None or priority != 0 or times is not None, trip_on=trip_on,
        )  # fmt: skip
    if trip_on is not None:
        raise TypeError("trip_on= applies to durable listeners only (on(..., durable=True))")
    subscribe = bus._table.subscriber(
        event,
        name=name,
        once=once,
        timeout=timeout,
        retries=retries,
        errors=errors,
        priority=priority,
        times=times,
    )
    return subscribe if listener is None else subscribe(listener)


@overload
def once(bus: EventBus, event: type[E], /, **options: Unpack[OnceOptions]) -> TypedDecorator[E]: ...
@overload
def once(bus: EventBus, event: str, /, **options: Unpack[OnceOptions]) -> TypedDecorator[Event]: ...
@overload
def once(
    bus: EventBus, event: type[E], listener: Callable[[E], R], /, **options: Unpack[OnceOptions]
) -> Callable[[E], R]: ...
@overload
def once(
    bus: EventBus, event: str, listener: Callable[[Event], R], /, **options: Unpack[OnceOptions]
) -> Callable[[Event], R]: ...


def once(
    bus: EventBus,
    event: type[Event] | str,
    listener: Callable[[Any], Any] | None = None,
    /,
    **options: Any,
) -> Any:
    """Like :meth:`on` with ``once=True``, as a decorator or a call."""
    for option in ("once", "times"):
        if option in options:
            raise TypeError(f"once() got an unexpected keyword argument {option!r}")
    if listener is None:
        return on(bus, event, once=True, **options)
    return on(bus, event, listener, once=True, **options)


@overload
def subscribed(
    bus: EventBus,
    event: type[E],
    listener: Callable[[E], Any],
    /,
    **options: Unpack[ListenerOptions],
) -> Subscription: ...
@overload
def subscribed(
    bus: EventBus,
    event: str,
    listener: Callable[[Event], Any],
    /,
    **options: Unpack[ListenerOptions],
) -> Subscription: ...


def subscribed(
    bus: EventBus, event: type[Event] | str, listener: Callable[[Any], Any], /, **options: Any
) -> Subscription:
    """``with bus.subscribed(E, fn):`` (or ``async with``): subscribed inside the block only.

    The options are :meth:`on`'s, checked now; the listener is subscribed on entering the
    block (``as`` gives its :class:`Listener`) and removed on leaving it, however it is left.
    """
    if not callable(listener):
        raise TypeError(f"subscribed() needs a callable listener, got {listener!r}")
    for option in options:
        if option not in ON_OPTIONS:
            raise TypeError(f"subscribed() got an unexpected keyword argument {option!r}")
    return Subscription(bus._table, bus._table.binder(event, **options), listener)


@overload
async def wait_for(
    bus: EventBus,
    event: type[E],
    /,
    *,
    where: Callable[[E], object] | None = None,
    timeout: float | None = None,  # noqa: ASYNC109  (EventEmitter2's waitFor has one)
) -> E: ...
@overload
async def wait_for(
    bus: EventBus,
    event: str,
    /,
    *,
    where: Callable[[Event], object] | None = None,
    timeout: float | None = None,  # noqa: ASYNC109
) -> Event: ...


async def wait_for(
    bus: EventBus,
    event: type[Event] | str,
    /,
    *,
    where: Callable[[Any], object] | None = None,
    timeout: float | None = None,  # noqa: ASYNC109
) -> Any:
    """The first event matching *event* (a type, a name or a pattern) emitted after the call.

    :param where: a predicate on the event; only events it accepts count (what it raises
        is raised here, and the emit goes on)
    :param timeout: seconds to wait at most (default: no limit)
    :raises TimeoutError: naming the event, when *timeout* passes first
    :raises UnknownEventError: for a name nobody declared
    """
    return await _wait_for(bus._table, event, where, timeout)


def off(bus: EventBus, event: type[Event] | str, listener: Callable[..., Any] | str, /) -> None:
    """Unsubscribe by function or by listener name; an emit already running is unaffected.

    :raises ListenerLookupError: if no such subscription exists
    """
    bus._table.remove_matching(event, listener)


def listeners(bus: EventBus, event: type[Event] | str) -> list[Listener]:
    """The listeners an emit of *event* would call, in the order it would call them."""
    cls = bus.registry.get(event) if isinstance(event, str) else event
    return list(bus._table.plan(cls).listeners)


def listener(bus: EventBus, name: str) -> Listener | None:
    """The subscription with that name, if any (retries look listeners up this way)."""
    return bus._table.get(name)
