"""Dispatch plans: which listeners an event type reaches, and the fast path's plain form.

A plan is built once per event type and cached on the bus until the subscriptions (or the bus's
error policy) change. A plan whose listeners are all plain sync capture-policy callables becomes
a :class:`FastPlan`, a tuple that ``emit()`` iterates with nothing else to check, or, with one
listener (the commonest case), a :class:`SinglePlan` that it calls without a loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ._events import Event, EventRegistry
from ._exceptions import PayloadError, UnknownEventError
from ._failures import FailureRecord, new_event_id
from ._listeners import ErrorPolicy, Listener
from ._patterns import match_segments

__all__ = [
    "AWAITABLE_HINT",
    "Emission",
    "FastPlan",
    "Plan",
    "Plans",
    "SinglePlan",
    "add_note_once",
    "awaitable_error",
]

logger = logging.getLogger("eventbus")

AWAITABLE_HINT = "returned an awaitable; declare it async def or subscribe the coroutine function"


def awaitable_error(name: str, value: object) -> TypeError:
    """Close what a sync-looking listener returned and say how to subscribe it properly."""
    close = getattr(value, "close", None)
    if callable(close):
        try:
            close()
        except Exception:
            logger.exception("closing the awaitable of %r raised", name)
    return TypeError(f"listener {name!r} {AWAITABLE_HINT}")


def add_note_once(exc: BaseException, listener: str) -> None:
    # An exception instance raised again (a cached error, say) must not gain a note per emit.
    note = f"listener: {listener}"
    if note not in getattr(exc, "__notes__", ()):
        exc.add_note(note)


class Emission:
    """One emit: its event and an id made only if something fails (nothing per emit otherwise)."""

    __slots__ = ("_event_id", "depth", "event")

    def __init__(self, event: Event, depth: int) -> None:
        self.event = event
        self.depth = depth
        self._event_id: str | None = None

    @property
    def event_id(self) -> str:
        if self._event_id is None:
            self._event_id = new_event_id()
        return self._event_id


class FastPlan(tuple[Callable[[Any], Any], ...]):
    """Plain callables for the hot path: all sync, capture policy, no once, no retries.

    ``subs`` maps a failing position back to its subscription, so a failure is recorded under
    the right name even if the listener was removed while the emit ran. ``plan`` is the full
    plan it was made from, kept so that ``emit_async()`` does not rebuild it on every call.
    """

    subs: tuple[Listener, ...]
    plan: Plan


class SinglePlan:
    """A fast plan of exactly one plain listener ``fn``: ``emit()`` calls it without a loop.

    Slots, not a tuple: a slot load is cheaper than ``plan[0]`` on a tuple subclass. ``sub`` and
    ``plan`` serve as in :class:`FastPlan`.
    """

    __slots__ = ("fn", "plan", "sub")

    def __init__(self, plan: Plan) -> None:
        [self.sub] = plan.listeners
        self.fn = self.sub.fn
        self.plan = plan


class Plan:
    """Listeners for one event type in subscription order, plus what the slow path needs."""

    __slots__ = ("listeners", "n_async")

    def __init__(self, listeners: tuple[Listener, ...]) -> None:
        self.listeners = listeners
        self.n_async = sum(1 for lst in listeners if lst.is_async)


class Plans:
    """The bus's plan cache (building, caching, fast-path failures) and event coercion."""

    if TYPE_CHECKING:
        registry: EventRegistry
        errors: ErrorPolicy
        _plans: dict[type[Event], SinglePlan | FastPlan | Plan]
        _subs: list[Listener]

        def _record(
            self, event: Event, event_id: str, listener: str, exc: BaseException, attempts: int
        ) -> FailureRecord: ...

    def _build_plan(self, cls: type[Event]) -> Plan:
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
            tuple(s for s in self._subs if s.pattern == name or match_segments(s.segments, segs))
        )

    def _plan_for(self, cls: type[Event]) -> SinglePlan | FastPlan | Plan:
        plan = self._build_plan(cls)
        fns = [s.fn for s in plan.listeners]
        fast = (
            self.errors == "capture"
            and all(
                not s.is_async and not s.once and s.retries == 0 and s.errors != "propagate"
                for s in plan.listeners
            )
            and len(set(map(id, fns))) == len(fns)
        )
        result: SinglePlan | FastPlan | Plan = plan
        if fast and len(fns) == 1:
            result = SinglePlan(plan)
        elif fast:
            result = FastPlan(fns)
            result.subs = plan.listeners
            result.plan = plan
        self._plans[cls] = result
        return result

    def _cached_plan(self, cls: type[Event]) -> SinglePlan | FastPlan | Plan:
        plan = self._plans.get(cls)
        return plan if plan is not None else self._plan_for(cls)

    @staticmethod
    def _fast_sub(plan: FastPlan, fn: Callable[[Any], Any]) -> Listener:
        # By identity: a fast plan holds no object twice, but ``tuple.index`` compares with
        # ``==``, and equal callables (a bound method subscribed twice under two names) differ.
        return next(s for s, f in zip(plan.subs, plan, strict=True) if f is fn)

    def _fast_failure(
        self,
        event: Event,
        plan: FastPlan,
        fn: Callable[[Any], Any],
        exc: Exception,
        event_id: str | None = None,
    ) -> str:
        """Record a fast-path failure; pass the id it returns back for the emission's next one."""
        sub = self._fast_sub(plan, fn)
        if event_id is None:
            event_id = new_event_id()
        self._record(event, event_id, sub.name, exc, 1)
        return event_id

    def _build_plan_cached(self, cls: type[Event]) -> Plan:
        plan = self._plans.get(cls)
        if plan is None:
            plan = self._plan_for(cls)
        return plan if isinstance(plan, Plan) else plan.plan

    def _coerce(self, event: Event | str, payload: Mapping[str, Any] | None) -> Event:
        if isinstance(event, str):
            if payload is None:
                payload = {}
            return self.registry.build(event, payload)
        if payload is not None:
            raise TypeError("pass either an event instance or a name and a payload, not both")
        if not isinstance(event, Event):
            raise PayloadError(
                getattr(event, "__event_name__", type(event).__name__),
                f"emit() takes an Event instance or a declared name, got {type(event).__name__}",
            )
        return event
