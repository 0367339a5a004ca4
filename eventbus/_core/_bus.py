"""The event bus: its public methods, and the hot path of ``emit()``.

The bus owns parts that each keep their own state and know nothing of the bus:

* :class:`~eventbus._core._table.ListenerTable`: subscriptions, names, and one plan per event type;
* :func:`~eventbus._core._compiler.compile_plan`: a plan becomes the function ``emit()`` calls;
* :class:`~eventbus._core._sink.FailureSink`: records, rate-limited log lines, ``on_failure``;
* :class:`~eventbus._core._pool.WorkerPool`: the bounded queue of async calls, its workers;
* :class:`~eventbus._core._nesting.Nesting`: how deep emits are nested (``max_depth``);
* :func:`~eventbus._core._emit_async.run_plan`: what ``emit_async()`` runs;
* :class:`~eventbus._core._counting.CallCounts`: per-listener call counts, when they are on.

* :class:`~eventbus._core._lifecycle.TaskGroupHost`: the task group between enter and exit;
* :class:`~eventbus._core._observe.Observer`: what :meth:`EventBus.instrument` attaches.

Every method of the bus is here, in the order of its life: settings, subscriptions, ``emit``,
``emit_async``, ``publish``, retries, statistics, instrumentation, start and stop. Only this
module touches the bus's private attributes; the parts get what they need when they are made.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar, Unpack, overload

import anyio
from anyio.abc import TaskGroup

from .._events import Event, EventRegistry, coerce_event, default_registry
from .._exceptions import DuplicateListenerError, DurableError, RecursionLimitError
from .._failures import FailureRecord
from ..backends.memory import MemoryFailureStore
from ._calls import checkpoint
from ._compiler import DispatchCache, Runtime
from ._counting import ListenerStatistics
from ._emission import Emission, current_emission, register_emit_frame
from ._emit_async import run_hooked, run_plan
from ._lifecycle import TaskGroupHost
from ._listeners import (
    E,
    ErrorPolicy,
    Listener,
    ListenerOptions,
    OnceOptions,
    Outcome,
    R,
    TypedDecorator,
    default_listener_name,
)
from ._nesting import RUNNING, Nesting
from ._observe import Observer
from ._pool import WorkerPool
from ._retry import RetryParts, RetryReport, retry_failures
from ._sink import FailureSink
from ._subscription import Subscription
from ._table import ListenerTable, check_max_listeners, check_policy
from ._threads import LoopThread
from ._wait import wait_for as _wait_for

if TYPE_CHECKING:
    from ..abc import DurableTransport, FailureStore

__all__ = ["BusStatistics", "EventBus"]

#: The keyword options of on(), which subscribed() takes too.
ON_OPTIONS = ListenerOptions.__required_keys__ | ListenerOptions.__optional_keys__

#: a durable listener as given (it may take ``tx``), returned unchanged by ``on()``
F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True, slots=True)
class BusStatistics:
    """A snapshot of the bus, for health endpoints and tests."""

    listeners: int
    running: bool
    queued: int
    in_flight: int
    dropped: int
    failures: int


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
    :param max_listeners: more listeners than this on one event name or pattern issue a
        :class:`MaxListenersExceededWarning` (once, naming it); 0 turns the check off
    :param durable: a transport for durable events across processes (e.g.
        :class:`eventbus.durable.RedisStreams`): enables :meth:`publish` and
        ``on(..., durable=True)``; it runs in the bus's task group, its dead deliveries go to
        the bus's failure store, and it emits its lifecycle events on the bus
    :param count_calls: count each listener's calls and failures per event, for
        :meth:`listener_statistics` (default off: a bus that does not count pays nothing)
    :raises TypeError: if *on_failure* is async (the bus would never await it)
    """

    __slots__ = (
        "__weakref__",
        "_compiled",
        "_dispatch",
        "_durable",
        "_host",
        "_loop",
        "_nesting",
        "_pool",
        "_sink",
        "_table",
        "_thread",
        "queue_size",
        "shutdown_grace",
        "workers",
    )

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
        max_listeners: int = 100,
        durable: DurableTransport | None = None,
        count_calls: bool = False,
    ) -> None:
        if queue_size < 0 or workers < 1 or max_depth < 1 or shutdown_grace < 0:
            raise ValueError(
                "queue_size must be >= 0, workers >= 1, max_depth >= 1 and shutdown_grace >= 0"
            )
        check_policy(errors)
        self.queue_size = queue_size
        self.workers = workers
        self.shutdown_grace = shutdown_grace
        self._nesting = Nesting(max_depth)
        self._table = ListenerTable(
            registry if registry is not None else default_registry, max_listeners=max_listeners
        )
        self._sink = FailureSink(failures if failures is not None else MemoryFailureStore())
        self._sink.hook = on_failure
        self._sink.limited = self._table.failed
        self._pool = WorkerPool(self._sink, self._nesting, backoff=retry_backoff)
        self._compiled = DispatchCache(
            Runtime(self._nesting, self._sink, self._pool, self._table), errors
        )
        # event type -> (what emit() calls, what it was compiled from): the hot path's dict
        self._dispatch = self._compiled.entries
        self._host = TaskGroupHost()
        self._loop = LoopThread()
        #: while the bus runs, a thread-local whose ``__dict__`` is non-empty in the loop's
        #: thread only: emit()'s thread check (see eventbus._core._threads.thread_mark)
        self._thread: threading.local | None = None
        self.count_calls = count_calls
        self._durable = durable
        if durable is not None:
            self._bind_durable(durable)

    # -- settings -----------------------------------------------------------------------------

    @property
    def registry(self) -> EventRegistry:
        """Where event names are looked up; subscriptions and emits are checked against it."""
        return self._table.registry

    @registry.setter
    def registry(self, registry: EventRegistry) -> None:
        self._table.registry = registry
        self._table.invalidate()

    @property
    def errors(self) -> ErrorPolicy:
        """The default error policy; setting it recompiles the dispatch functions."""
        return self._compiled.policy

    @errors.setter
    def errors(self, errors: ErrorPolicy) -> None:
        check_policy(errors)
        self._compiled.policy = errors

    @property
    def max_depth(self) -> int:
        """How deeply emits may nest, sync and async hops together."""
        return self._nesting.max_depth

    @max_depth.setter
    def max_depth(self, max_depth: int) -> None:
        if not isinstance(max_depth, int) or max_depth < 1:
            raise ValueError(f"max_depth={max_depth!r} must be an int >= 1")
        self._nesting.max_depth = max_depth

    @property
    def max_listeners(self) -> int:
        """Listeners on one event name or pattern beyond which a warning is issued (0: off)."""
        return self._table.max_listeners

    @max_listeners.setter
    def max_listeners(self, value: int) -> None:
        self._table.max_listeners = check_max_listeners(value)

    @property
    def on_failure(self) -> Callable[[FailureRecord], object] | None:
        """Called with each new :class:`FailureRecord`; must be a plain (sync) callable."""
        return self._sink.hook

    @on_failure.setter
    def on_failure(self, hook: Callable[[FailureRecord], object] | None) -> None:
        # Wider than the constructor's type, so that a saved hook can be put back; what
        # matters, that it is not async, is checked at run time.
        self._sink.hook = hook

    @property
    def failures(self) -> FailureStore:
        """The failure store every record goes to."""
        return self._sink.store

    @failures.setter
    def failures(self, store: FailureStore) -> None:
        self._sink.store = store
        if self._durable is not None:
            self._bind_durable(self._durable)

    @property
    def retry_backoff(self) -> float:
        """First delay between retries in workers and ``emit_async()`` (doubling, max 30 s)."""
        return self._pool.backoff

    @retry_backoff.setter
    def retry_backoff(self, seconds: float) -> None:
        self._pool.backoff = seconds

    @property
    def count_calls(self) -> bool:
        """Whether each listener's calls are counted (:meth:`listener_statistics`); changing
        it recompiles the dispatch functions, and the counts so far are kept."""
        return self._compiled.counting

    @count_calls.setter
    def count_calls(self, on: bool) -> None:
        if on is not True and on is not False:
            raise TypeError(f"count_calls={on!r} must be True or False")
        self._compiled.counting = on

    @property
    def running(self) -> bool:
        return self._pool.accepting

    @property
    def durable(self) -> DurableTransport | None:
        """The transport of durable events, if the bus was given one."""
        return self._durable

    def __repr__(self) -> str:
        return (
            f"EventBus(listeners={len(self._table)}, errors={self.errors!r}, "
            f"queue_size={self.queue_size}, workers={self.workers}, running={self.running}, "
            f"failures={self.failures!r})"
        )

    # -- subscriptions -------------------------------------------------------------------------

    @overload
    def on(
        self, event: type[E], /, *, durable: Literal[True], name: str | None = ...
    ) -> Callable[[F], F]: ...
    @overload
    def on(
        self, event: type[E], listener: F, /, *, durable: Literal[True], name: str | None = ...
    ) -> F: ...
    @overload
    def on(self, event: type[E], /, **options: Unpack[ListenerOptions]) -> TypedDecorator[E]: ...
    @overload
    def on(self, event: str, /, **options: Unpack[ListenerOptions]) -> TypedDecorator[Event]: ...
    @overload
    def on(
        self,
        event: type[E],
        listener: Callable[[E], R],
        /,
        **options: Unpack[ListenerOptions],
    ) -> Callable[[E], R]: ...
    @overload
    def on(
        self,
        event: str,
        listener: Callable[[Event], R],
        /,
        **options: Unpack[ListenerOptions],
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
        priority: int = 0,
        times: int | None = None,
        durable: bool = False,
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
        :raises DuplicateListenerError: if another listener on this bus, in-process or durable,
            already has that name
        :raises ValueError: naming the option, for a value out of range (``times=0``)
        :raises TypeError: naming the option, for a value of the wrong type
        """
        if durable:
            return self._durable_subscriber(
                event, listener, name, once or timeout is not None or bool(retries)
                or errors is not None or priority != 0 or times is not None,
            )  # fmt: skip
        subscribe = self._table.subscriber(
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
    def once(self, event: type[E], /, **options: Unpack[OnceOptions]) -> TypedDecorator[E]: ...
    @overload
    def once(self, event: str, /, **options: Unpack[OnceOptions]) -> TypedDecorator[Event]: ...
    @overload
    def once(
        self, event: type[E], listener: Callable[[E], R], /, **options: Unpack[OnceOptions]
    ) -> Callable[[E], R]: ...
    @overload
    def once(
        self, event: str, listener: Callable[[Event], R], /, **options: Unpack[OnceOptions]
    ) -> Callable[[Event], R]: ...

    def once(
        self,
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
            return self.on(event, once=True, **options)
        return self.on(event, listener, once=True, **options)

    @overload
    def subscribed(
        self,
        event: type[E],
        listener: Callable[[E], Any],
        /,
        **options: Unpack[ListenerOptions],
    ) -> Subscription: ...
    @overload
    def subscribed(
        self,
        event: str,
        listener: Callable[[Event], Any],
        /,
        **options: Unpack[ListenerOptions],
    ) -> Subscription: ...

    def subscribed(
        self, event: type[Event] | str, listener: Callable[[Any], Any], /, **options: Any
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
        return Subscription(self._table, self._table.binder(event, **options), listener)

    @overload
    async def wait_for(
        self,
        event: type[E],
        /,
        *,
        where: Callable[[E], object] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109  (EventEmitter2's waitFor has one)
    ) -> E: ...
    @overload
    async def wait_for(
        self,
        event: str,
        /,
        *,
        where: Callable[[Event], object] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> Event: ...

    async def wait_for(
        self,
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
        return await _wait_for(self._table, event, where, timeout)

    def off(self, event: type[Event] | str, listener: Callable[..., Any] | str, /) -> None:
        """Unsubscribe by function or by listener name; an emit already running is unaffected.

        :raises ListenerLookupError: if no such subscription exists
        """
        self._table.remove_matching(event, listener)

    def listeners(self, event: type[Event] | str) -> list[Listener]:
        """The listeners an emit of *event* would call, in the order it would call them."""
        cls = self.registry.get(event) if isinstance(event, str) else event
        return list(self._table.plan(cls).listeners)

    def listener(self, name: str) -> Listener | None:
        """The subscription with that name, if any (retries look listeners up this way)."""
        return self._table.get(name)

    # -- emit ---------------------------------------------------------------------------------

    def emit(self, event: Event | str, payload: Mapping[str, Any] | None = None, /) -> None:
        """Run sync listeners now, in order; queue async ones for the workers; never wait.

        :param event: an event instance, or a declared name with *payload* as a mapping
        :raises BusNotRunningError: if async listeners match and ``async with bus:`` is not entered
        :raises ListenerErrors: under ``errors="propagate"``, after every sync listener ran
        """
        # The hot path: a declared event at the top level (no emit or async listener call in
        # progress anywhere), and no payload, from the running loop's thread (any thread while
        # the bus does not run). Everything else takes _emit_checked. See eventbus._core._nesting.
        try:
            call, compiled = self._dispatch[type(event)]
        except KeyError:
            pass  # not compiled yet, or not an event (the check runs outside this handler, so
            # that the KeyError does not become the context of what a listener raises)
        else:
            nesting = self._nesting
            # At rest, and the bus does not run: take the slot. Check and take on one line: a
            # trace function in Python (pdb, coverage) runs between lines, and another thread
            # may run while it does (see eventbus._core._nesting); within a line, none can.
            if payload is None and nesting.top is None: nesting.top = event  # noqa: E701  # fmt: skip
            # At rest while the bus runs: the same, from the loop's thread only (tested second,
            # so that a bus that does not run pays nothing for the thread check).
            elif payload is None and nesting.top is RUNNING and self._thread.__dict__:
                nesting.top = event  # the loop's thread alone gets here: nothing to race
            else:
                return self._emit_checked(event, payload)
            # The emission is the slot's bare event until something asks for it.
            try:
                if (value := call(event)) is not None:
                    compiled.returned(value)
            except Exception as exc:
                if compiled.single is None:
                    raise  # for the publisher: generated functions record their listeners'
                compiled.record(self._sink, nesting, exc)
            finally:
                nesting.top = nesting.rest
            return None
        return self._emit_checked(event, payload)

    def _emit_checked(self, event: Event | str, payload: Mapping[str, Any] | None) -> None:
        """``emit()`` with every check: the thread, coercion, compiling, the depth limit, the
        cause; the emission is kept in this thread's own state."""
        if self._thread is not None:
            self._loop.check("emit", event)
        event = coerce_event(self.registry, event, payload)
        call, compiled = self._compiled.get(type(event))
        nesting = self._nesting
        cause = nesting.current(sys._getframe(2))  # above this emit's own two frames
        if cause is None:
            emission = Emission.first(event)
        elif cause.depth >= nesting.max_depth:
            raise RecursionLimitError(event.__event_name__, nesting.max_depth)
        else:
            emission = cause.child(event)
        local = nesting.local
        saved, local.sync = local.sync, emission
        nesting.park()
        try:  # as in emit()
            if (value := call(event)) is not None:
                compiled.returned(value)
        except Exception as exc:
            if compiled.single is None:
                raise
            compiled.record(self._sink, nesting, exc)
        finally:
            local.sync = saved
            nesting.unpark()

    def _dispatch_source(self, event: type[Event]) -> str | None:
        """The generated source ``emit()`` runs for *event* (``None``: it calls one listener)."""
        return self._compiled.get(event)[1].source

    # -- emit_async (the work: run_plan) ------------------------------------------------------

    async def emit_async(
        self,
        event: Event | str,
        payload: Mapping[str, Any] | None = None,
        /,
        *,
        concurrent: bool = True,
    ) -> list[Outcome]:
        """Run every matching listener (async ones concurrently) and wait for all of them.

        :param concurrent: false: await the listeners one after another, in order (a failure
            does not stop the rest), as blinker's ``send_async`` does
        :return: one :class:`Outcome` per listener, in call order
        :raises ListenerErrors: under ``errors="propagate"``, after every listener finished
        """
        await checkpoint()
        if self._thread is not None:
            self._loop.check("emit_async", event)
        if payload is not None or not isinstance(event, Event):
            event = coerce_event(self.registry, event, payload)
        plan = self._table.plan(type(event))
        compiled = self._compiled
        if concurrent is not True and concurrent is not False:
            raise TypeError(f"concurrent={concurrent!r} must be True or False")
        if not compiled.hooked:
            return await run_plan(plan, event, compiled.runtime, compiled.policy, concurrent)
        return await run_hooked(compiled, plan, event, concurrent)

    def emit_threadsafe(
        self, event: Event | str, payload: Mapping[str, Any] | None = None, /
    ) -> Future[list[Outcome]]:
        """From another thread: run ``emit_async(event)`` in the running bus's event loop.

        For sync code in worker threads (``anyio.to_thread``, a thread pool). The event is
        checked in the calling thread; the returned future gives the outcomes, or what
        ``emit_async()`` raised (a ``ListenerErrors`` group under ``propagate``). Cancelling
        the future cancels the emit.

        :raises BusNotRunningError: if the bus is not running (or closed): nothing was emitted
        :raises WrongThreadError: if called from the bus's own event loop thread
        """
        event = coerce_event(self.registry, event, payload)
        self._table.pattern_of(type(event))  # UnknownEventError here, in the caller's thread
        return self._loop.submit(self.emit_async, event, event.__event_name__)

    # -- durable events -----------------------------------------------------------------------

    async def publish(
        self,
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
        transport = self._durable_transport("publish", event)
        if causation_id is None or correlation_id is None:
            cause = current_emission()  # the chain goes on across processes
            if cause is not None:
                causation_id = causation_id if causation_id is not None else cause.event_id
                correlation_id = (
                    correlation_id if correlation_id is not None else cause.correlation_id
                )
        return await transport.publish(
            event,
            conn,
            aggregate_key=aggregate_key,
            causation_id=causation_id,
            correlation_id=correlation_id,
            headers=headers,
        )

    def _durable_transport(self, what: str, event: type[Event] | str | Event) -> DurableTransport:
        """The bus's transport, for a durable *event* (or its type).

        :raises DurableError: naming *what* and the event, if the bus has no transport or the
            event's type was not declared ``durable=True``
        """
        cls = event if isinstance(event, type) else type(event)
        name = getattr(cls, "__event_name__", None) or repr(event)
        if self._durable is None:
            raise DurableError(
                what,
                name,
                "the bus has no durable transport; "
                "build it with EventBus(durable=RedisStreams(...))",
            )
        if not (isinstance(cls, type) and issubclass(cls, Event) and cls.__durable__):
            raise DurableError(
                what,
                name,
                "its type is not declared durable; declare it with "
                "'class X(Event, name=..., durable=True)', or emit() it in-process",
            )
        return self._durable

    def _durable_subscriber(
        self,
        event: type[Event] | str,
        listener: Callable[..., Any] | None,
        name: str | None,
        other_options: bool,
    ) -> Any:
        """``on(event, durable=True)``: checked now, handed to the durable transport; its name
        is then taken for in-process listeners too (and the other way round).

        :raises DuplicateListenerError: if a listener of the bus, of either kind, has the name
        """
        if isinstance(event, str):
            raise DurableError(
                "on",
                event,
                "a durable listener subscribes to one event type, not a name or pattern",
            )
        transport = self._durable_transport("on", event)
        if other_options:
            raise DurableError(
                "on",
                event.__event_name__,
                "once=, timeout=, retries=, errors=, priority= and times= do not apply to a "
                "durable listener (deliveries are retried per DurableOptions, then dead-lettered)",
            )
        if name is not None and self._table.taken(name):
            raise DuplicateListenerError(name)

        def subscribe(fn: Callable[..., Any]) -> Callable[..., Any]:
            # One name space for both kinds: failure rows and retries find listeners by name.
            shown = name if name is not None else default_listener_name(fn)
            if self._table.taken(shown):
                raise DuplicateListenerError(shown)
            made = transport.subscribe(event, fn, name=name)
            self._table.reserved.add(getattr(made, "name", shown))
            return fn

        return subscribe if listener is None else subscribe(listener)

    def _bind_durable(self, transport: DurableTransport) -> None:
        """Give *transport* the bus's registry, failure store, failure sink and ``emit`` (again
        when the bus's failure store changes)."""
        transport.bind(
            registry=self.registry, failures=self.failures, record=self._sink.add, notify=self.emit
        )

    # -- retries ------------------------------------------------------------------------------

    async def retry_failures(
        self,
        *,
        event: str | None = None,
        listener: str | None = None,
        limit: int | None = None,
        max_attempts: int = 5,
        correlation: str | None = None,
        ids: Sequence[str] | None = None,
    ) -> RetryReport:
        """Retry the pending failures in ``bus.failures``, oldest first, one call each.

        Each row's payload is rebuilt through ``bus.registry`` and handed to the listener that
        ``bus.listener(name)`` finds (or a spent ``once``/``times`` listener of that name, see the
        module docstring), in the failed emission's chain; the call honours the listener's
        ``timeout=`` but not its ``retries=``, and records no new failure row: the row itself is
        updated.

        :param event: only rows of this event name
        :param listener: only rows of this listener name
        :param limit: at most this many rows (the newest ones, tried oldest first)
        :param max_attempts: a row that has failed this many times becomes ``dead``
        :param correlation: only rows of this correlation id: one business transaction's
            failures, retried together
        :param ids: exactly these rows (the console's Retry button on one failure), instead of
            the filters above; an id that is not pending (nor a dead durable failure, with a
            durable transport) is reported as skipped and left as it is
        :raises TypeError: naming ``ids``, for one string instead of a list of ids
        :raises ValueError: naming the argument, for ``max_attempts`` below 1, an empty
            ``correlation``, or *ids* combined with a filter

        With a durable transport, dead rows of durable listeners (up to *limit* more) are handed
        back to their consumer groups too (see the module docstring).
        """
        parts = RetryParts(self._table, self._nesting, self.failures, self._durable)
        return await retry_failures(
            parts,
            event=event,
            listener=listener,
            limit=limit,
            max_attempts=max_attempts,
            correlation=correlation,
            ids=ids,
        )

    # -- statistics ---------------------------------------------------------------------------

    def statistics(self) -> BusStatistics:
        pool = self._pool
        return BusStatistics(
            listeners=len(self._table),
            running=pool.accepting,
            queued=pool.queued,
            in_flight=pool.in_flight,
            dropped=pool.dropped,
            failures=self._sink.count,
        )

    def listener_statistics(self) -> list[ListenerStatistics]:
        """Calls and failures per event and listener, counted while :attr:`count_calls` was on
        (see :mod:`eventbus._core._counting` for what is a call); empty if it never was."""
        return self._compiled.counts.snapshot()

    # -- instrumentation ----------------------------------------------------------------------

    def instrument(self, observer: Observer | None) -> None:
        """Attach *observer* (replacing any), or detach it with ``None``: the one hook of
        instrumentation, which :mod:`eventbus.interop.opentelemetry` uses.

        The observer wraps what the bus already calls, at the moments it is built, never per
        emit (see :class:`~eventbus._core._observe.Observer`): a bus without one runs the code
        it would run without this hook. It is handed the bus's nesting state first
        (``bound``), which tells it the emission in progress.
        """
        compiled, sink, table = self._compiled, self._sink, self._table
        previous = compiled.observer
        if previous is not None:
            sink.observers.remove(previous.failed)
        if observer is not None:
            observer.bound(self._nesting)
        compiled.observer = observer
        table.wrap = None if observer is None else observer.listener
        for sub in table:
            sub.call = sub.fn if observer is None else observer.listener(sub)
        if observer is not None:
            sink.observers.append(observer.failed)
        table.invalidate()  # recompiled with the listeners' new calls, and wrapped

    @property
    def observer(self) -> Observer | None:
        """The observer :meth:`instrument` attached, if any."""
        return self._compiled.observer

    def add_failure_observer(self, observer: Callable[[FailureRecord], object]) -> None:
        """Call *observer* with each failure record the bus makes (dropped calls too), after
        the store and ``on_failure`` got it, including a record caused while ``on_failure``
        runs; for tests and instruments (:func:`eventbus.testing.capture_failures`)."""
        self._sink.observers.append(observer)

    def remove_failure_observer(self, observer: Callable[[FailureRecord], object]) -> None:
        """Stop calling *observer*, added by :meth:`add_failure_observer`.

        :raises ValueError: if it was not added
        """
        self._sink.observers.remove(observer)

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._pool.accepting or self._host.is_open:
            raise RuntimeError("this bus is already running; enter 'async with bus:' once")
        await self._host.open(self._start)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._host.close(self._drain)

    async def aclose(self) -> None:
        """Leave the running state as ``async with`` would, draining with the grace period.

        :raises RuntimeError: if called from another task than the one that entered the bus
        """
        if self._host.is_open:
            self._host.check_closer(self)
            await self.__aexit__(None, None, None)

    async def _start(self, tg: TaskGroup) -> None:
        """Start the bus's parts in *tg*: the failure store, the workers, the way in from other
        threads, then the durable transport (whose refusal undoes the rest)."""
        await self.failures.start(tg)
        self._pool.start(tg, size=self.queue_size, workers=self.workers)
        self._loop.open(tg)
        self._thread = self._loop.mark
        self._nesting.running(True)
        if self._durable is not None:
            try:
                await self._durable.start(tg)
            except BaseException:  # refused (an evicting Redis, say): undo what started
                with anyio.CancelScope(shield=True):
                    await self._drain()
                raise

    async def _drain(self) -> None:
        """Stop the parts in the order that loses nothing: the durable transport (its dead
        deliveries go to the store), calls handed over from threads, the queue (the two within
        one grace period), then the failure store."""
        try:
            if self._durable is not None:
                await self._durable.aclose()
            deadline = anyio.current_time() + self.shutdown_grace
            await self._loop.close(self.shutdown_grace)
            await self._pool.drain(
                self.shutdown_grace, within=max(0.0, deadline - anyio.current_time())
            )
            self._sink.close()
            await self.failures.aclose()
        finally:
            self._pool.stopped()
            self._nesting.running(False)  # first: emit() reads the mark only while running
            self._loop.forget()
            self._thread = None


# current_emission() finds a sync listener's emission by these frames on the stack.
register_emit_frame(EventBus.emit.__code__, fast=True)
register_emit_frame(EventBus._emit_checked.__code__, fast=False)
