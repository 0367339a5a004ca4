"""The listener table of one bus: subscriptions in order, by name, and the plans built from them.

A :class:`Plan` is plain data: the listeners one event type reaches, in call order. The table
builds a plan once per event type and keeps it until the subscriptions change; caches derived
from plans (the bus's compiled dispatch functions) register with :meth:`ListenerTable.watch`
and are cleared with it. Call order is decided in :meth:`ListenerTable._build`, the one place
plans are made: higher ``priority`` first, and subscription order among equal priorities,
exact and wildcard listeners alike.

The table also watches for leaks: more than ``max_listeners`` listeners on one event name or
pattern is the usual symptom of listeners added per request and never removed, and is
reported once as a :class:`~eventbus.MaxListenersExceededWarning` (as Node's emitters do).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import sys
import warnings
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from .._events import Event, EventRegistry
from .._exceptions import (
    DuplicateListenerError,
    ListenerLookupError,
    MaxListenersExceededWarning,
    UnknownEventError,
)
from .._patterns import compile_pattern, is_pattern, match_segments
from ._listeners import ErrorPolicy, Listener, default_listener_name, is_async_callable

__all__ = ["SPENT_KEPT", "ListenerTable", "Plan", "check_max_listeners", "check_policy"]

#: ``once``/``times`` listeners kept for retries of their failures, at most
SPENT_KEPT = 1000


def check_policy(errors: object, *, optional: bool = False) -> None:
    """:raises ValueError: naming the value, if it is not an error policy"""
    if errors not in ("capture", "propagate") and not (optional and errors is None):
        raise ValueError(f"errors={errors!r} is not a policy; use 'capture' or 'propagate'")


def check_max_listeners(value: object) -> int:
    """:raises ValueError: naming the value, unless it is an int >= 0"""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"max_listeners={value!r} must be an int >= 0 (0 turns the warning off)")
    return value


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

    def __init__(self, registry: EventRegistry, *, max_listeners: int = 100) -> None:
        self.registry = registry
        self.max_listeners = check_max_listeners(max_listeners)
        self._subs: list[Listener] = []
        self._names: dict[str, Listener] = {}
        #: names taken by the bus's durable listeners, which live in the transport
        self.reserved: set[str] = set()
        self._per_pattern: collections.Counter[str] = collections.Counter()
        #: makes each new listener's ``call`` (instrumentation); None: ``call`` is ``fn``
        self.wrap: Callable[[Listener], Callable[[Any], Any]] | None = None
        self._warned: set[str] = set()  # patterns warned about, until back under the limit
        self._seq = itertools.count()
        self._plans: dict[type[Event], Plan] = {}
        self._watched: list[dict[Any, Any]] = [self._plans]
        #: told of each listener unsubscribed (caches holding listeners let go of it)
        self._forgetters: list[Callable[[Listener], object]] = []
        #: ``once``/``times`` listeners with failures recorded (failed, dropped, cut short
        #: by shutdown), by name, with those records' ids: once its calls are all taken, such
        #: a listener is still called by retries of those records. The latest
        #: :data:`SPENT_KEPT`; one goes when its records are settled, when it is unsubscribed
        #: with ``off()``, or when another listener is subscribed under its name. A listener
        #: that never failed is never kept: its closure goes with its last call.
        self._failed: collections.OrderedDict[str, tuple[Listener, set[str]]] = (
            collections.OrderedDict()
        )

    def __len__(self) -> int:
        return len(self._subs)

    def __iter__(self) -> Iterator[Listener]:
        return iter(list(self._subs))

    def watch(self, cache: dict[Any, Any]) -> None:
        """Keep *cache* (keyed by event type: what plans became) in step with the plans: an
        entry goes when the subscriptions of its event type change."""
        self._watched.append(cache)

    def on_forget(self, forget: Callable[[Listener], object]) -> None:
        """Call *forget* with each listener unsubscribed (``off()``, or its last call taken)."""
        self._forgetters.append(forget)

    def invalidate(self, pattern: str | None = None) -> None:
        """Drop the plans (and what they became) of the event types a subscription to
        *pattern* reaches; of every type without *pattern* (a new registry, say).

        Only those: a subscription per request (``wait_for``, ``subscribed()``) rebuilds the
        dispatch of the event it waits for, not of every other event the service emits.
        """
        if pattern is None:
            for cache in self._watched:
                cache.clear()
            return
        if is_pattern(pattern):
            pat = compile_pattern(pattern)
            stale = {
                cls
                for cache in self._watched
                for cls in list(cache)  # a snapshot: another thread may be compiling
                if match_segments(pat, tuple(cls.__event_name__.split(".")))
            }
        else:  # plans are built for the registry's classes only
            stale = {self.registry.get(pattern)} if pattern in self.registry else set()
        for cache in self._watched:
            for cls in stale:
                cache.pop(cls, None)

    # -- subscribing -------------------------------------------------------------------------

    def subscriber(
        self,
        event: type[Event] | str,
        **options: Any,
    ) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
        """What ``on()`` returns: checks its options now, subscribes a function when called.

        The function is returned unchanged, so that this works as a decorator.
        """
        subscribe = self.binder(event, **options)

        def subscriber(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
            subscribe(fn)
            return fn

        return subscriber

    def binder(
        self,
        event: type[Event] | str,
        *,
        name: str | None = None,
        once: bool = False,
        times: int | None = None,
        timeout: float | None = None,
        retries: int = 0,
        errors: ErrorPolicy | None = None,
        priority: int = 0,
    ) -> Callable[[Callable[[Any], Any]], Listener]:
        """Check ``on()``'s options now; the result subscribes a function and returns its
        :class:`Listener`.

        :raises ValueError: naming the option, for a value out of range
        :raises TypeError: naming the option, for a value of the wrong type
        """
        pattern = self.pattern_of(event)
        if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
            raise ValueError(f"timeout={timeout!r} must be a positive number of seconds")
        if not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries={retries!r} must be an int >= 0")
        check_policy(errors, optional=True)
        if times is not None and (not isinstance(times, int) or isinstance(times, bool)):
            raise TypeError(f"times={times!r} must be an int >= 1, or None for no limit")
        if times is not None and times < 1:
            raise ValueError(f"times={times!r} must be an int >= 1, or None for no limit")
        if once:
            if times not in (None, 1):
                raise ValueError(f"once=True means times=1; got times={times!r} as well")
            times = 1
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise TypeError(f"priority={priority!r} must be an int (higher runs first)")

        def subscribe(fn: Callable[[Any], Any]) -> Listener:
            return self.add(
                pattern,
                fn,
                name=name,
                times=times,
                timeout=timeout,
                retries=retries,
                errors=errors,
                priority=priority,
            )

        return subscribe

    def add(
        self,
        pattern: str,
        fn: Callable[[Any], Any],
        *,
        name: str | None,
        times: int | None,
        timeout: float | None,
        retries: int,
        errors: ErrorPolicy | None,
        priority: int,
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
        if lname in self._names or lname in self.reserved:
            raise DuplicateListenerError(lname)
        sub = Listener(
            fn=fn,
            name=lname,
            pattern=pattern,
            is_async=is_async,
            times=times,
            timeout=timeout,
            retries=retries,
            errors=errors,
            priority=priority,
            seq=next(self._seq),
            segments=compile_pattern(pattern),
        )
        if self.wrap is not None:
            sub.call = self.wrap(sub)
        # Before registering: under warnings-as-errors the warning raises, and then nothing
        # is subscribed (a subscribed() block would otherwise leak what it never entered).
        leaking = self._check_leak(pattern)
        self._subs.append(sub)
        self._names[lname] = sub
        self._failed.pop(lname, None)  # a used-up listener of that name: never called again
        self.invalidate(pattern)
        self._per_pattern[pattern] += 1
        if leaking:
            self._warned.add(pattern)
        return sub

    def _check_leak(self, pattern: str) -> bool:
        """Warn if one more listener on *pattern* passes the limit (once per pattern, until
        back under it); whether it did."""
        limit, n = self.max_listeners, self._per_pattern[pattern] + 1
        if not limit or n <= limit or pattern in self._warned:
            return False
        warnings.warn(
            MaxListenersExceededWarning(pattern, n, limit), stacklevel=_caller_stacklevel()
        )
        return True

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
                self.settled(sub)  # retired on purpose: its failures are not retried
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
        self.invalidate(sub.pattern)
        self._per_pattern[sub.pattern] -= 1
        if self._per_pattern[sub.pattern] <= self.max_listeners:
            self._warned.discard(sub.pattern)  # warn again if it grows past the limit again
        for forget in self._forgetters:
            forget(sub)

    def spend(self, sub: Listener) -> None:
        """Unsubscribe *sub*, whose last call (``times=``) was just taken (kept only if a
        failure of it is recorded: see :meth:`failed`)."""
        self.remove(sub)

    def failed(self, sub: Listener, record_id: str) -> None:
        """A failure of the ``once``/``times`` listener *sub* was recorded: keep it for the
        retry of that record (:meth:`get_spent`), unless it was unsubscribed with calls left
        (``off()``) or another listener has its name now."""
        current = self._names.get(sub.name)
        if current is not sub and (current is not None or sub.left):
            return
        kept = self._failed.get(sub.name)
        if kept is None or kept[0] is not sub:
            kept = self._failed[sub.name] = (sub, set())
        kept[1].add(record_id)
        self._failed.move_to_end(sub.name)
        while len(self._failed) > SPENT_KEPT:
            self._failed.popitem(last=False)

    def settled(self, sub: Listener, record_id: str | None = None) -> None:
        """The record *record_id* of *sub* will not be retried again (resolved, dead), or
        none of them (``None``): let go of *sub* once nothing is left to retry."""
        kept = self._failed.get(sub.name)
        if kept is None or kept[0] is not sub:
            return
        if record_id is not None:
            kept[1].discard(record_id)
        if record_id is None or not kept[1]:
            del self._failed[sub.name]

    def get(self, name: str) -> Listener | None:
        return self._names.get(name)

    def get_spent(self, name: str, record_id: str) -> Listener | None:
        """The used-up listener of that name whose failure *record_id* is, if kept (see
        :meth:`failed`): never another listener than the one that failed."""
        kept = self._failed.get(name)
        return kept[0] if kept is not None and record_id in kept[1] else None

    def taken(self, name: str) -> bool:
        """Whether a listener of this bus, in-process or durable, has that name."""
        return name in self._names or name in self.reserved

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
        # A name without '*' matches itself only: the glob match runs for wildcards alone.
        subs = [
            s
            for s in self._subs
            if s.pattern == name or ("*" in s.pattern and match_segments(s.segments, segs))
        ]
        if any(s.priority for s in subs):
            subs.sort(key=_by_priority)  # stable: subscription order among equal priorities
        return Plan(cls, tuple(subs))

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


def _by_priority(sub: Listener) -> int:
    return -sub.priority


def _caller_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside this package."""
    level = 1
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("eventbus."):
        frame = frame.f_back
        level += 1
    return level
