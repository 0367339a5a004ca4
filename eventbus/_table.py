"""The listener table of one bus: subscriptions in order, by name, and the plans built from them.

A :class:`Plan` is plain data: the listeners one event type reaches, in call order. The table
builds a plan once per event type and keeps it until the subscriptions change; caches derived
from plans (the bus's compiled dispatch functions) register with :meth:`ListenerTable.watch`
and are cleared with it. Call order is subscription order today; an ordering rule (priorities)
belongs in :meth:`ListenerTable._build`, the one place plans are made.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator
from typing import Any

from ._events import Event, EventRegistry
from ._exceptions import DuplicateListenerError, ListenerLookupError, UnknownEventError
from ._listeners import ErrorPolicy, Listener, default_listener_name, is_async_callable
from ._patterns import compile_pattern, is_pattern, match_segments

__all__ = ["ListenerTable", "Plan", "check_policy"]


def check_policy(errors: object, *, optional: bool = False) -> None:
    """:raises ValueError: naming the value, if it is not an error policy"""
    if errors not in ("capture", "propagate") and not (optional and errors is None):
        raise ValueError(f"errors={errors!r} is not a policy; use 'capture' or 'propagate'")


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    """The listeners an emit of ``event_type`` calls, in order: a snapshot, never changed."""

    event_type: type[Event]
    listeners: tuple[Listener, ...]

    @property
    def n_async(self) -> int:
        return sum(1 for sub in self.listeners if sub.is_async)


class ListenerTable:
    """Subscriptions of one bus, validated against *registry*; see the module docstring."""

    def __init__(self, registry: EventRegistry) -> None:
        self.registry = registry
        self._subs: list[Listener] = []
        self._names: dict[str, Listener] = {}
        self._seq = itertools.count()
        self._plans: dict[type[Event], Plan] = {}
        self._watched: list[dict[Any, Any]] = [self._plans]

    def __len__(self) -> int:
        return len(self._subs)

    def __iter__(self) -> Iterator[Listener]:
        return iter(list(self._subs))

    def watch(self, cache: dict[Any, Any]) -> None:
        """Clear *cache* whenever the subscriptions change (it holds what plans became)."""
        self._watched.append(cache)

    def invalidate(self) -> None:
        for cache in self._watched:
            cache.clear()

    # -- subscribing -------------------------------------------------------------------------

    def subscriber(
        self,
        event: type[Event] | str,
        *,
        name: str | None,
        once: bool,
        timeout: float | None,
        retries: int,
        errors: ErrorPolicy | None,
    ) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
        """What ``on()`` returns: checks its options now, subscribes a function when called.

        The function is returned unchanged, so that this works as a decorator.
        """
        pattern = self.pattern_of(event)
        if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
            raise ValueError(f"timeout={timeout!r} must be a positive number of seconds")
        if not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries={retries!r} must be an int >= 0")
        check_policy(errors, optional=True)

        def subscribe(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
            self.add(
                pattern, fn, name=name, once=once, timeout=timeout, retries=retries, errors=errors
            )
            return fn

        return subscribe

    def add(
        self,
        pattern: str,
        fn: Callable[[Any], Any],
        *,
        name: str | None,
        once: bool,
        timeout: float | None,
        retries: int,
        errors: ErrorPolicy | None,
    ) -> Listener:
        """Subscribe *fn* to an already validated *pattern*."""
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
        self.invalidate()
        return sub

    def remove_matching(self, event: type[Event] | str, listener: Callable[..., Any] | str) -> None:
        """Unsubscribe by function or by listener name (``off()``).

        :raises ListenerLookupError: if no such subscription exists
        """
        pattern = self.pattern_of(event)
        for sub in self._subs:
            # ``==``, not ``is``: a bound method is a new object at each attribute access.
            if sub.pattern == pattern and (
                sub.name == listener if isinstance(listener, str) else sub.fn == listener
            ):
                self.remove(sub)
                return
        who = listener if isinstance(listener, str) else default_listener_name(listener)
        raise ListenerLookupError(f"no listener {who!r} is subscribed to {pattern!r}")

    def remove(self, sub: Listener) -> None:
        """Unsubscribe *sub* if it still is (a ``once`` listener removes itself this way)."""
        try:
            self._subs.remove(sub)
        except ValueError:
            return
        if self._names.get(sub.name) is sub:
            del self._names[sub.name]
        self.invalidate()

    def get(self, name: str) -> Listener | None:
        return self._names.get(name)

    # -- plans -------------------------------------------------------------------------------

    def plan(self, cls: type[Event]) -> Plan:
        """The plan of *cls*, built on first use after a change.

        :raises UnknownEventError: if *cls* is not the type the registry declares for its name
        """
        plan = self._plans.get(cls)
        if plan is None:
            plan = self._plans[cls] = self._build(cls)
        return plan

    def _build(self, cls: type[Event]) -> Plan:
        name = cls.__event_name__
        if not name or name not in self.registry or self.registry.get(name) is not cls:
            hint = "emit only events declared in the bus's registry"
            if name in self.registry:
                own = self.registry.get(name)
                hint = (
                    f"{cls.__module__}.{cls.__qualname__} is declared in another registry; "
                    f"the bus's registry declares {name!r} as {own.__module__}.{own.__qualname__}"
                )
            raise UnknownEventError(name or cls.__qualname__, hint)
        segs = tuple(name.split("."))
        return Plan(
            cls,
            tuple(s for s in self._subs if s.pattern == name or match_segments(s.segments, segs)),
        )

    def pattern_of(self, event: type[Event] | str) -> str:
        """The pattern a subscription to *event* uses, validated against the registry."""
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
