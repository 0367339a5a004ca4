"""The bus's side of durable events: ``bus.publish()``, ``bus.on(E, durable=True)``, and the
checks that name what is not durable.

The transport (:class:`eventbus.durable.RedisStreams`) does the work; these functions check
what the bus is asked against its transport and its event types first. ``publish`` is bound
as a method in :class:`~eventbus.EventBus`'s class body, as :mod:`eventbus._subscribing` is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._emission import current_emission
from ._events import Event
from ._exceptions import DuplicateListenerError, DurableError
from ._listeners import default_listener_name

if TYPE_CHECKING:
    from ._bus import EventBus
    from .abc import DurableTransport

__all__ = ["bind", "durable_subscriber", "durable_transport", "publish"]


def bind(bus: EventBus, transport: DurableTransport) -> None:
    """Give *transport* the bus's registry, failure store, failure sink and ``emit`` (again
    when the bus's failure store changes)."""
    transport.bind(
        registry=bus.registry, failures=bus.failures, record=bus._sink.add, notify=bus.emit
    )


async def publish(
    bus: EventBus,
    event: Event,
    conn: Any,
    /,
    *,
    aggregate_key: str | None = None,
    causation_id: str | None = None,
    correlation_id: str | None = None,
    headers: dict[str, str] | None = None,
) -> str:
    """Write a durable event in the caller's open transaction (*conn*, an
    ``AsyncConnection`` or ``AsyncSession``): once committed, every durable listener of
    every service gets it at least once; rolled back, none does. In-process listeners
    are not called (``emit()`` it too for them).

    :param aggregate_key: what the event is about (an order id): listeners that apply
        events in order compare the envelope's ``seq`` per key
    :param causation_id: the id of what caused it (an event, a command); default, while a
        listener runs: the event id of the emission it runs for (``current_emission()``)
    :param correlation_id: the id shared by everything one request caused; default, while a
        listener runs: its emission's ``correlation_id``
    :param headers: small text values carried in the envelope
    :return: the event id, which the envelope and ``current_delivery()`` carry
    :raises DurableError: if the bus has no durable transport, or the event's type was
        not declared ``durable=True``
    :raises NoTransactionError: if *conn* has no open transaction
    """
    transport = durable_transport(bus, "publish", event)
    if causation_id is None or correlation_id is None:
        cause = current_emission()  # the chain goes on across processes
        if cause is not None:
            causation_id = causation_id if causation_id is not None else cause.event_id
            correlation_id = correlation_id if correlation_id is not None else cause.correlation_id
    return await transport.publish(
        event,
        conn,
        aggregate_key=aggregate_key,
        causation_id=causation_id,
        correlation_id=correlation_id,
        headers=headers,
    )


def durable_transport(
    bus: EventBus, what: str, event: type[Event] | str | Event
) -> DurableTransport:
    """The bus's transport, for a durable *event* (or its type).

    :raises DurableError: naming *what* and the event, if the bus has no transport or the
        event's type was not declared ``durable=True``
    """
    cls = event if isinstance(event, type) else type(event)
    name = getattr(cls, "__event_name__", None) or repr(event)
    if bus.durable is None:
        raise DurableError(
            what,
            name,
            "the bus has no durable transport; build it with EventBus(durable=RedisStreams(...))",
        )
    if not (isinstance(cls, type) and issubclass(cls, Event) and cls.__durable__):
        raise DurableError(
            what,
            name,
            "its type is not declared durable; declare it with "
            "'class X(Event, name=..., durable=True)', or emit() it in-process",
        )
    return bus.durable


def durable_subscriber(
    bus: EventBus,
    event: type[Event] | str,
    listener: Callable[..., Any] | None,
    name: str | None,
    other_options: bool,
    *,
    trip_on: Any = None,
) -> Any:
    """``on(event, durable=True)``: checked now, handed to the durable transport; its name
    is then taken for in-process listeners too (and the other way round).

    :raises DuplicateListenerError: if a listener of the bus, of either kind, has the name
    """
    if isinstance(event, str):
        raise DurableError(
            "on", event, "a durable listener subscribes to one event type, not a name or pattern"
        )
    transport = durable_transport(bus, "on", event)
    if other_options:
        raise DurableError(
            "on",
            event.__event_name__,
            "once=, timeout=, retries=, errors=, priority= and times= do not apply to a durable "
            "listener (deliveries are retried per DurableOptions, then dead-lettered)",
        )
    if name is not None and bus._table.taken(name):
        raise DuplicateListenerError(name)

    def subscribe(fn: Callable[..., Any]) -> Callable[..., Any]:
        # One name space for both kinds: failure rows and retries find listeners by name.
        shown = name if name is not None else default_listener_name(fn)
        if bus._table.taken(shown):
            raise DuplicateListenerError(shown)
        # trip_on only when given: a transport without a kill switch need not take it
        extra = {} if trip_on is None else {"trip_on": trip_on}
        made = transport.subscribe(event, fn, name=name, **extra)
        bus._table.reserved.add(getattr(made, "name", shown))
        return fn

    return subscribe if listener is None else subscribe(listener)
