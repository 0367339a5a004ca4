"""The event bus: subscription, dispatch plans, sync and async emit, failure capture.

``emit()`` runs sync listeners inline and hands async ones to a bounded queue served by a fixed
set of worker tasks; ``emit_async()`` runs every listener and waits. A listener exception is
captured per listener, logged and recorded, and (under ``errors="propagate"``) re-raised to the
publisher as a :class:`ListenerErrors` group once every listener has run.
"""

from __future__ import annotations

import contextvars
import dataclasses
import inspect
import itertools
import logging
import math
import time
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar, overload

import anyio
from anyio.abc import TaskGroup
from anyio.lowlevel import checkpoint
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ._events import Event, EventRegistry, default_registry
from ._exceptions import (
    BusNotRunningError,
    DuplicateListenerError,
    ListenerDroppedError,
    ListenerErrors,
    ListenerLookupError,
    ListenerShutdownError,
    ListenerTimeoutError,
    PayloadError,
    RecursionLimitError,
    UnknownEventError,
)
from ._failures import FailureRecord, new_event_id
from ._listeners import ErrorPolicy, Listener, Outcome, default_listener_name, is_async_callable
from ._patterns import compile_pattern, is_pattern, match_segments
from .backends.memory import MemoryFailureStore

if TYPE_CHECKING:
    from ._retry import RetryReport
    from .abc import FailureStore

__all__ = ["BusStatistics", "EventBus"]

logger = logging.getLogger("eventbus")

E = TypeVar("E", bound=Event)
R = TypeVar("R")

# Async-hop depth (a listener run by a worker or by emit_async that emits again). Sync nesting
# is counted on the bus itself: between two awaits it always returns to zero. The bus counts the
# calls that have set it (``_hops``), so that ``emit()`` reads it only while one is running.
_async_depth: contextvars.ContextVar[int] = contextvars.ContextVar("eventbus_depth", default=0)

_AWAITABLE_HINT = "returned an awaitable; declare it async def or subscribe the coroutine function"
_HOOK = "on_failure"


def _cancelled_from_outside() -> bool:
    """Whether a cancellation seen now comes from an enclosing scope, not from the listener.

    A listener may raise the cancellation exception itself (asyncio: it awaited a future that
    was cancelled elsewhere); that is its failure. A scope of ours or the publisher's shows as a
    cancelled effective deadline, and a plain ``task.cancel()`` as ``cancelling()``.
    """
    deadline = anyio.current_effective_deadline()
    if deadline == -math.inf or deadline <= anyio.current_time():
        return True
    if anyio.get_cancelled_exc_class() is not _asyncio_cancelled():
        return False  # trio: a listener cannot raise Cancelled without a scope
    import asyncio

    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _asyncio_cancelled() -> type[BaseException]:
    import asyncio

    return asyncio.CancelledError


def _awaitable_error(name: str, value: object) -> TypeError:
    """Close what a sync-looking listener returned and say how to subscribe it properly."""
    close = getattr(value, "close", None)
    if callable(close):
        try:
            close()
        except Exception:
            logger.exception("closing the awaitable of %r raised", name)
    return TypeError(f"listener {name!r} {_AWAITABLE_HINT}")


def _add_note_once(exc: BaseException, listener: str) -> None:
    # An exception instance raised again (a cached error, say) must not gain a note per emit.
    note = f"listener: {listener}"
    if note not in getattr(exc, "__notes__", ()):
        exc.add_note(note)


class _TypedDecorator(Protocol[E]):
    def __call__(self, fn: Callable[[E], R], /) -> Callable[[E], R]: ...


@dataclasses.dataclass(frozen=True, slots=True)
class BusStatistics:
    """A snapshot of the bus, for health endpoints and tests."""

    listeners: int
    running: bool
    queued: int
    in_flight: int
    dropped: int
    failures: int


class _Emission:
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


class _Job:
    """A queued async call; its attempts and last error survive a shutdown that cuts it short."""

    __slots__ = ("attempts", "emission", "last_error", "listener", "scope")

    def __init__(self, listener: Listener, emission: _Emission) -> None:
        self.listener = listener
        self.emission = emission
        self.attempts = 0
        self.last_error: BaseException | None = None
        self.scope: anyio.CancelScope | None = None


class _FastPlan(tuple[Callable[[Any], Any], ...]):
    """Plain callables for the hot path: all sync, capture policy, no once, no retries.

    ``subs`` maps a failing position back to its subscription, so a failure is recorded under
    the right name even if the listener was removed while the emit ran. ``plan`` is the full
    plan it was made from, kept so that ``emit_async()`` does not rebuild it on every call.
    """

    subs: tuple[Listener, ...]
    plan: _Plan


class _Plan:
    """Listeners for one event type in subscription order, plus what the slow path needs."""

    __slots__ = ("listeners", "n_async")

    def __init__(self, listeners: tuple[Listener, ...]) -> None:
        self.listeners = listeners
        self.n_async = sum(1 for lst in listeners if lst.is_async)


class EventBus:
    """Dispatches events to listeners; see the ``eventbus`` module docstring for the semantics.

    :param registry: where event names are looked up (default: the module-level registry)
    :param failures: the failure store (default: a new :class:`MemoryFailureStore`); the bus
        starts it in its task group and closes it on exit, but never owns its engine or client
    :param errors: the default error policy, ``"capture"`` or ``"propagate"``
    :param queue_size: capacity of the background queue; a full queue records a drop
    :param workers: number of worker tasks running async listeners started by ``emit()``
    :param shutdown_grace: seconds that leaving ``async with bus:`` waits for queued work
    :param max_depth: how deeply emits may nest before :class:`RecursionLimitError`
    :param retry_backoff: first delay between retries (doubling, at most 30 s), in workers and
        in ``emit_async()``; sync retries inside ``emit()`` do not sleep, since it never waits
    :param on_failure: a sync callable given each new :class:`FailureRecord` (for alerting);
        its own exceptions are logged, never raised, and failures it causes (it emits, say)
        are recorded without calling it again
    :raises TypeError: if *on_failure* is async (the bus would never await it)
    """

    # Class defaults, set on the instance only when used: the instance keeps few attributes,
    # which keeps its attribute loads (and so the emit() hot path) fast.
    _in_hook = False  # inside on_failure: failures it causes do not call it again
    _owner: object = None  # id of the task that entered, the only one that may close

    def __init__(
        self,
        registry: EventRegistry | None = None,
        failures: FailureStore | None = None,
        *,
        errors: ErrorPolicy = "capture",
        queue_size: int = 10_000,
        workers: int = 16,
        shutdown_grace: float = 5.0,
        max_depth: int = 32,
        retry_backoff: float = 0.1,
        on_failure: Callable[[FailureRecord], None] | None = None,
    ) -> None:
        if queue_size < 0 or workers < 1 or max_depth < 1 or shutdown_grace < 0:
            raise ValueError(
                "queue_size must be >= 0, workers >= 1, max_depth >= 1 and shutdown_grace >= 0"
            )
        # event type -> plain callables (fast path) or a _Plan (slow path)
        self._plans: dict[type[Event], _FastPlan | _Plan] = {}
        self.registry = registry if registry is not None else default_registry
        self.failures: FailureStore = failures if failures is not None else MemoryFailureStore()
        self.errors = errors
        self.queue_size = queue_size
        self.workers = workers
        self.shutdown_grace = shutdown_grace
        self._hops = 0  # async listener calls in progress that set ``_async_depth``
        self.max_depth = max_depth
        self.retry_backoff = retry_backoff
        self.on_failure = on_failure
        self._subs: list[Listener] = []
        self._names: dict[str, Listener] = {}
        self._seq = itertools.count()
        self._depth = 0
        self._running = False
        self._closing = False
        self._send: MemoryObjectSendStream[_Job] | None = None
        self._leftovers: MemoryObjectReceiveStream[_Job] | None = None
        self._in_flight: set[_Job] = set()
        self._stack: AsyncExitStack | None = None
        self._workers_done: anyio.Event | None = None
        self._worker_scope: anyio.CancelScope | None = None
        self._tg: TaskGroup | None = None
        self._dropped = 0
        self._failure_count = 0

    @property
    def errors(self) -> ErrorPolicy:
        """The default error policy; setting it rebuilds the cached dispatch plans."""
        return self._errors

    @errors.setter
    def errors(self, errors: ErrorPolicy) -> None:
        if errors not in ("capture", "propagate"):
            raise ValueError(f"errors={errors!r} is not a policy; use 'capture' or 'propagate'")
        self._errors: ErrorPolicy = errors
        self._plans.clear()

    @property
    def max_depth(self) -> int:
        """How deeply emits may nest, sync and async hops together."""
        return self._max_depth

    @max_depth.setter
    def max_depth(self, max_depth: int) -> None:
        if not isinstance(max_depth, int) or max_depth < 1:
            raise ValueError(f"max_depth={max_depth!r} must be an int >= 1")
        self._max_depth = max_depth
        self._sync_limit()

    def _sync_limit(self) -> None:
        # ``emit()`` compares its sync depth with ``_fast_limit`` alone: max_depth while no
        # async call is in progress, else 0, which sends it to the exact check with the hop depth.
        self._fast_limit = 0 if self._hops else self._max_depth

    def _enter_hop(self, depth: int) -> contextvars.Token[int]:
        self._hops += 1
        self._fast_limit = 0
        return _async_depth.set(depth)

    def _leave_hop(self, token: contextvars.Token[int]) -> None:
        _async_depth.reset(token)
        self._hops -= 1
        if not self._hops:
            self._fast_limit = self._max_depth

    @property
    def on_failure(self) -> Callable[[FailureRecord], object] | None:
        """Called with each new :class:`FailureRecord`; must be a plain (sync) callable."""
        return self._on_failure

    @on_failure.setter
    def on_failure(self, hook: Callable[[FailureRecord], object] | None) -> None:
        # Wider than the constructor's type, so that a saved hook can be put back; what
        # matters, that it is not async, is checked here at run time.
        if hook is not None and (not callable(hook) or is_async_callable(hook)):
            raise TypeError(
                f"on_failure={hook!r} must be a sync callable: the bus calls it inline and "
                "never awaits it; to alert asynchronously, start a task or emit an event from it"
            )
        self._on_failure = hook

    def __repr__(self) -> str:
        return (
            f"EventBus(listeners={len(self._subs)}, errors={self.errors!r}, "
            f"queue_size={self.queue_size}, workers={self.workers}, running={self._running}, "
            f"failures={self.failures!r})"
        )

    # -- subscription ---------------------------------------------------------------------------

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

    # -- plans ----------------------------------------------------------------------------------

    def _build_plan(self, cls: type[Event]) -> _Plan:
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
        return _Plan(
            tuple(s for s in self._subs if s.pattern == name or match_segments(s.segments, segs))
        )

    def _plan_for(self, cls: type[Event]) -> _FastPlan | _Plan:
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
        result: _FastPlan | _Plan = plan
        if fast:
            result = _FastPlan(fns)
            result.subs = plan.listeners
            result.plan = plan
        self._plans[cls] = result
        return result

    # -- emit -----------------------------------------------------------------------------------

    def emit(self, event: Event | str, payload: Mapping[str, Any] | None = None, /) -> None:
        """Run sync listeners now, in order; queue async ones for the workers; never wait.

        :param event: an event instance, or a declared name with *payload* as a mapping
        :raises BusNotRunningError: if async listeners match and ``async with bus:`` is not entered
        :raises ListenerErrors: under ``errors="propagate"``, after every sync listener ran
        """
        if payload is not None:  # a name and its payload; an instance with one is refused
            event = self._coerce(event, payload)
        try:
            plan = self._plans[event.__class__]  # type: ignore[index]
        except KeyError:
            event = self._coerce(event, None)
            plan = self._cached_plan(event.__class__)
        if type(plan) is _FastPlan:  # narrows for mypy, unlike ``plan.__class__``
            depth = self._depth
            # _fast_limit is max_depth, or 0 while async calls (with their own depth) run
            if depth >= self._fast_limit and depth + _async_depth.get() >= self._max_depth:
                raise RecursionLimitError(event.__event_name__, self._max_depth)  # type: ignore[union-attr]
            self._depth = depth + 1
            event_id = None  # made by the first failure, shared by the emission's others
            try:
                for fn in plan:
                    try:
                        if (value := fn(event)) is not None and inspect.isawaitable(value):
                            raise _awaitable_error(self._fast_sub(plan, fn).name, value)
                    except Exception as exc:
                        event_id = self._fast_failure(
                            event,  # type: ignore[arg-type]
                            plan,
                            fn,
                            exc,
                            event_id,
                        )
            finally:
                self._depth = depth
            return None
        return self._emit_planned(event, plan)  # type: ignore[arg-type]

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

    def _cached_plan(self, cls: type[Event]) -> _FastPlan | _Plan:
        plan = self._plans.get(cls)
        return plan if plan is not None else self._plan_for(cls)

    @staticmethod
    def _fast_sub(plan: _FastPlan, fn: Callable[[Any], Any]) -> Listener:
        # By identity: a fast plan holds no object twice, but ``tuple.index`` compares with
        # ``==``, and equal callables (a bound method subscribed twice under two names) differ.
        return next(s for s, f in zip(plan.subs, plan, strict=True) if f is fn)

    def _fast_failure(
        self,
        event: Event,
        plan: _FastPlan,
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

    def _emit_planned(self, event: Event, plan: _Plan) -> None:
        ename = event.__event_name__
        if plan.n_async and not self._running:
            if self._closing:
                pass  # recorded per listener below as dropped: the bus is closing
            else:
                raise BusNotRunningError(ename, plan.n_async)
        depth = self._depth + _async_depth.get()
        if depth >= self.max_depth:
            raise RecursionLimitError(ename, self.max_depth)
        emission = _Emission(event, depth + 1)
        raised: list[Exception] = []
        self._depth += 1
        try:
            for sub in plan.listeners:
                if sub.once:
                    if sub.fired:
                        continue
                    sub.fired = True
                    self._remove(sub)
                if sub.is_async:
                    self._enqueue(sub, emission)
                    continue
                exc, _value, _rec = self._call_sync(sub, emission)
                if exc is not None and (sub.errors or self.errors) == "propagate":
                    _add_note_once(exc, sub.name)
                    raised.append(exc)
        finally:
            self._depth -= 1
        if raised:
            raise ListenerErrors.for_event(ename, raised)

    def _enqueue(self, sub: Listener, emission: _Emission) -> None:
        if self._send is None or not self._running:
            self._dropped += 1
            self._record(
                emission.event,
                emission.event_id,
                sub.name,
                ListenerDroppedError(sub.name, "the bus is shutting down"),
                0,
            )
            return
        try:
            self._send.send_nowait(_Job(sub, emission))
        except anyio.WouldBlock:
            self._dropped += 1
            self._record(
                emission.event,
                emission.event_id,
                sub.name,
                ListenerDroppedError(sub.name, f"queue full ({self.queue_size} waiting)"),
                0,
            )

    def _call_sync(
        self, sub: Listener, emission: _Emission
    ) -> tuple[Exception | None, Any, FailureRecord | None]:
        """One sync call with immediate retries (``emit()`` never waits, so it never sleeps)."""
        attempts = 0
        while True:
            attempts += 1
            try:
                value = sub.fn(emission.event)
                if value is not None and inspect.isawaitable(value):
                    # Retrying cannot help: the listener is declared wrong, not failing.
                    attempts = sub.retries + 1
                    raise _awaitable_error(sub.name, value)
                return None, value, None
            except Exception as exc:
                if attempts <= sub.retries:
                    continue
                rec = self._record(emission.event, emission.event_id, sub.name, exc, attempts)
                return exc, None, rec

    def _backoff(self, attempts: int) -> float:
        return min(self.retry_backoff * 2.0 ** (attempts - 1), 30.0)

    async def _call_async(
        self, sub: Listener, emission: _Emission, job: _Job | None = None
    ) -> tuple[BaseException | None, Any, FailureRecord | None]:
        """Call *sub* with retries and backoff; a sync *sub* is run inline (``emit_async()``).

        A cancellation the listener raised itself is its failure; one from an enclosing scope
        propagates. With a *job*, attempts and the last error are kept on it, and a failure
        after shutdown cut the job short is left for shutdown to record.
        """
        attempts = 0
        token = self._enter_hop(emission.depth)
        try:
            while True:
                attempts += 1
                if job is not None:
                    job.attempts = attempts
                try:
                    if sub.is_async:
                        value = await self._invoke(sub, emission.event)
                    else:
                        value = sub.fn(emission.event)
                        if value is not None and inspect.isawaitable(value):
                            value = await value
                    return None, value, None
                except BaseException as exc:
                    if not isinstance(exc, Exception) and (
                        not isinstance(exc, anyio.get_cancelled_exc_class())
                        or _cancelled_from_outside()
                    ):
                        raise
                    if job is not None:
                        job.last_error = exc
                        if job.scope is not None and job.scope.cancel_called:
                            return exc, None, None  # shutdown records it, with attempts
                    if attempts <= sub.retries:
                        await anyio.sleep(self._backoff(attempts))
                        continue
                    rec = self._record(emission.event, emission.event_id, sub.name, exc, attempts)
                    return exc, None, rec
        finally:
            self._leave_hop(token)

    async def _invoke(self, sub: Listener, event: Event) -> Any:
        if sub.timeout is None:
            return await sub.fn(event)
        with anyio.move_on_after(sub.timeout) as scope:
            try:
                value = await sub.fn(event)
            except Exception as exc:
                if scope.cancel_called:  # the listener turned our cancellation into an error
                    raise ListenerTimeoutError(sub.name, sub.timeout) from exc
                raise
        if scope.cancel_called:  # cancelled, whether or not the listener swallowed it
            raise ListenerTimeoutError(sub.name, sub.timeout)
        return value

    async def call_listener(self, sub: Listener, event: Event) -> Outcome:
        """Call one listener once, honouring its timeout, recording nothing (retries use this)."""
        start = time.perf_counter()
        try:
            if sub.is_async:
                value = await self._invoke(sub, event)
            else:
                await checkpoint()
                value = sub.fn(event)
                if value is not None and inspect.isawaitable(value):
                    value = await value
        except Exception as exc:
            return Outcome(sub.name, None, exc, time.perf_counter() - start)
        return Outcome(sub.name, value, None, time.perf_counter() - start)

    async def emit_async(
        self, event: Event | str, payload: Mapping[str, Any] | None = None, /
    ) -> list[Outcome]:
        """Run every matching listener (async ones concurrently) and wait for all of them.

        :return: one :class:`Outcome` per listener, in subscription order
        :raises ListenerErrors: under ``errors="propagate"``, after every listener finished
        """
        await checkpoint()
        event = self._coerce(event, payload)
        plan = self._build_plan_cached(event.__class__)
        depth = self._depth + _async_depth.get()
        if depth >= self._max_depth:
            raise RecursionLimitError(event.__event_name__, self._max_depth)
        emission = _Emission(event, depth + 1)
        outcomes: list[Outcome | None] = [None] * len(plan.listeners)

        async def run(i: int, sub: Listener) -> None:
            start = time.perf_counter()
            exc, value, rec = await self._call_async(sub, emission)
            outcomes[i] = Outcome(sub.name, value, exc, time.perf_counter() - start, rec)

        async with anyio.create_task_group() as tg:
            for i, sub in enumerate(plan.listeners):
                if sub.once:
                    if sub.fired:  # a nested emit already ran it: not this emit's listener
                        continue
                    sub.fired = True
                    self._remove(sub)
                if sub.is_async:
                    tg.start_soon(run, i, sub)
                else:  # inline, in order; retries sleep here, and an awaitable is awaited
                    await run(i, sub)
        ran = [(s, o) for s, o in zip(plan.listeners, outcomes, strict=True) if o is not None]
        done = [out for _, out in ran]
        raised: list[Exception] = []
        for sub, out in ran:
            if isinstance(out.error, Exception) and (sub.errors or self.errors) == "propagate":
                _add_note_once(out.error, sub.name)
                raised.append(out.error)
        if raised:
            raise ListenerErrors.for_event(event.__event_name__, raised)
        return done

    def _build_plan_cached(self, cls: type[Event]) -> _Plan:
        plan = self._plans.get(cls)
        if plan is None:
            plan = self._plan_for(cls)
        return plan if isinstance(plan, _Plan) else plan.plan

    # -- failures -------------------------------------------------------------------------------

    def _record(
        self, event: Event, event_id: str, listener: str, exc: BaseException, attempts: int
    ) -> FailureRecord:
        """Build, log, store and announce one failure; nothing here may raise to the caller."""
        try:
            rec = FailureRecord.from_exception(
                event=event, event_id=event_id, listener=listener, exc=exc, attempts=attempts
            )
        except Exception:
            logger.exception("building the failure record of %r failed; keeping less", listener)
            rec = FailureRecord.minimal(
                event_name=event.__event_name__,
                event_id=event_id,
                listener=listener,
                exc=exc,
                attempts=attempts,
            )
        self._failure_count += 1
        logger.error(
            "listener %r failed for %r (event_id=%s, attempts=%d): %s: %s",
            listener,
            rec.event_name,
            event_id,
            attempts,
            rec.error_type,
            rec.message,
            # A bus-made error (dropped, shutdown) has no frames worth formatting again.
            exc_info=exc if exc.__traceback__ is not None or exc.__cause__ is not None else None,
        )
        try:
            self.failures.record(rec)
        except Exception:
            logger.exception(
                "failure store %r refused a record; its content: %r", self.failures, rec
            )
        hook = self._on_failure
        if hook is not None and not self._in_hook:
            # Failures the hook causes (it emits, say) are recorded, but do not re-enter it:
            # a hook that alerts through a failing bus would otherwise multiply them.
            self._in_hook = True
            try:
                result = hook(rec)
                if result is not None and inspect.isawaitable(result):
                    _awaitable_error(_HOOK, result)
                    logger.error("on_failure hook %r %s", hook, _AWAITABLE_HINT)
            except Exception:
                logger.exception("on_failure hook %r raised", hook)
            finally:
                self._in_hook = False
        return rec

    async def retry_failures(
        self,
        *,
        event: str | None = None,
        listener: str | None = None,
        limit: int | None = None,
        max_attempts: int = 5,
    ) -> RetryReport:
        """Re-run pending failures from the store; see :func:`eventbus._retry.retry_failures`."""
        from ._retry import retry_failures

        return await retry_failures(
            self, event=event, listener=listener, limit=limit, max_attempts=max_attempts
        )

    def statistics(self) -> BusStatistics:
        queued = 0
        if self._send is not None:
            queued = self._send.statistics().current_buffer_used
        return BusStatistics(
            listeners=len(self._subs),
            running=self._running,
            queued=queued,
            in_flight=len(self._in_flight),
            dropped=self._dropped,
            failures=self._failure_count,
        )

    @property
    def running(self) -> bool:
        return self._running

    # -- lifecycle ------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._running or self._stack is not None:
            raise RuntimeError("this bus is already running; enter 'async with bus:' once")
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            tg = await stack.enter_async_context(anyio.create_task_group())
            self._tg = tg
            await self.failures.start(tg)
            send, recv = anyio.create_memory_object_stream[_Job](max_buffer_size=self.queue_size)
            self._send = send
            self._leftovers = recv.clone()
            self._workers_done = anyio.Event()
            self._worker_scope = anyio.CancelScope()
            tg.start_soon(self._run_workers, recv)
        except BaseException:
            await stack.__aexit__(None, None, None)
            raise
        self._stack = stack
        self._running = True
        self._closing = False
        self._owner = anyio.get_current_task().id
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, self._stack = self._stack, None
        tg, self._tg = self._tg, None
        assert stack is not None and tg is not None
        assert self._send is not None and self._workers_done is not None
        self._running = False
        self._closing = True
        try:
            with anyio.CancelScope(shield=True):
                self._send.close()  # workers finish what is queued, then see the end of stream
                with anyio.move_on_after(self.shutdown_grace):
                    await self._workers_done.wait()
                if not self._workers_done.is_set():
                    assert self._worker_scope is not None
                    for job in list(self._in_flight):
                        if job.scope is not None:
                            job.scope.cancel()
                    self._worker_scope.cancel()
                    await self._workers_done.wait()
                self._record_unfinished()
                await self.failures.aclose()
        finally:
            self._closing, self._send = False, None
            # The body's exception (or cancellation) is not handed to the task group, which
            # would wrap it in an ExceptionGroup: it propagates as raised. What still runs in
            # the group after the drain and the store's close is ours, and is cancelled.
            tg.cancel_scope.cancel()
            await stack.__aexit__(None, None, None)

    async def aclose(self) -> None:
        """Leave the running state as ``async with`` would, draining with the grace period.

        :raises RuntimeError: if called from another task than the one that entered the bus
        """
        if self._stack is not None:
            if anyio.get_current_task().id != self._owner:
                raise RuntimeError(
                    f"aclose() of {self!r} from another task than the one that entered it; "
                    "close the bus in the task that entered it (its task group lives there)"
                )
            await self.__aexit__(None, None, None)

    async def _run_workers(self, recv: MemoryObjectReceiveStream[_Job]) -> None:
        assert self._worker_scope is not None and self._workers_done is not None
        try:
            with recv, self._worker_scope:  # closed even when shutdown cancels the workers
                async with anyio.create_task_group() as tg:
                    for _ in range(self.workers):
                        tg.start_soon(self._worker, recv.clone())
        finally:
            self._workers_done.set()

    async def _worker(self, recv: MemoryObjectReceiveStream[_Job]) -> None:
        async with recv:
            async for job in recv:
                self._in_flight.add(job)
                # Its own scope, cancelled by shutdown: a job cut short is recorded as such even
                # if the listener swallowed the cancellation and returned.
                try:
                    with anyio.CancelScope() as job.scope:
                        await self._call_async(job.listener, job.emission, job)
                except anyio.get_cancelled_exc_class():
                    raise  # the worker scope: shutdown records the job
                except BaseException:
                    self._in_flight.discard(job)  # it propagates, crashing the bus: not ours
                    raise
                if not job.scope.cancel_called:
                    self._in_flight.discard(job)  # else shutdown records it

    def _record_unfinished(self) -> None:
        for job in list(self._in_flight):
            err = ListenerShutdownError(
                job.listener.name, self.shutdown_grace, started=True, last_error=job.last_error
            )
            err.__cause__ = job.last_error
            self._record(
                job.emission.event,
                job.emission.event_id,
                job.listener.name,
                err,
                max(job.attempts, 1),
            )
        self._in_flight.clear()
        leftovers, self._leftovers = self._leftovers, None
        if leftovers is None:
            return
        while True:
            try:
                job = leftovers.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream):
                break
            self._record(
                job.emission.event,
                job.emission.event_id,
                job.listener.name,
                ListenerShutdownError(job.listener.name, self.shutdown_grace, started=False),
                0,
            )
        leftovers.close()
