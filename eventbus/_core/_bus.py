"""The event bus: its public methods, and the hot path of ``emit()``.

The bus owns parts that each keep their own state and know nothing of the bus:

* :class:`~eventbus._core._table.ListenerTable`: subscriptions, names, and one plan per event type;
* :func:`~eventbus._core._compiler.compile_plan`: a plan becomes the function ``emit()`` calls;
* :class:`~eventbus._core._sink.FailureSink`: records, rate-limited log lines, the ``on_failure`` hook;
* :class:`~eventbus._core._pool.WorkerPool`: the bounded queue of async calls, its workers, the drain;
* :class:`~eventbus._core._nesting.Nesting`: how deep emits are nested (``max_depth``);
* :func:`~eventbus._core._emit_async.run_plan`: what ``emit_async()`` runs;
* :class:`~eventbus._core._counting.CallCounts`: per-listener call counts, when they are on.

Methods that are not the hot path are bound from the modules of their concept (the class
body lists them): the subscription front-end (:mod:`~eventbus._core._subscribing`), ``publish``
(:mod:`~eventbus._core._durable_front`), ``emit_async`` (:mod:`~eventbus._core._emit_async`),
``retry_failures`` (:mod:`~eventbus._core._retry`), instrumentation (:mod:`~eventbus._core._observe`).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Self

from . import _durable_front, _emit_async, _lifecycle, _retry, _subscribing
from . import _observe as _observe_mod
from ._compiler import DispatchCache, Runtime
from ._counting import ListenerStatistics
from ._emission import Emission, register_emit_frame
from .._events import Event, EventRegistry, coerce_event, default_registry
from .._exceptions import RecursionLimitError
from .._failures import FailureRecord
from ._lifecycle import TaskGroupHost
from ._listeners import ErrorPolicy, Outcome
from ._nesting import RUNNING, Nesting
from ._pool import WorkerPool
from ._sink import FailureSink
from ._table import ListenerTable, check_max_listeners, check_policy
from ._threads import LoopThread
from ..backends.memory import MemoryFailureStore

if TYPE_CHECKING:
    from ..abc import DurableTransport, FailureStore

__all__ = ["BusStatistics", "EventBus"]


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
            _durable_front.bind(self, durable)

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
            _durable_front.bind(self, self._durable)

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

    # -- subscriptions (the typed front-end: eventbus._core._subscribing) ---------------------------

    on = _subscribing.on
    once = _subscribing.once
    subscribed = _subscribing.subscribed
    wait_for = _subscribing.wait_for
    off = _subscribing.off
    listeners = _subscribing.listeners
    listener = _subscribing.listener

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

    _observe = _observe_mod.attach

    def _dispatch_source(self, event: type[Event]) -> str | None:
        """The generated source ``emit()`` runs for *event* (``None``: it calls one listener)."""
        return self._compiled.get(event)[1].source

    emit_async = _emit_async.emit_async

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

    publish = _durable_front.publish

    retry_failures = _retry.retry_failures

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

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._pool.accepting or self._host.is_open:
            raise RuntimeError("this bus is already running; enter 'async with bus:' once")
        await self._host.open(functools.partial(_lifecycle.start, self))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._host.close(functools.partial(_lifecycle.drain, self))

    async def aclose(self) -> None:
        """Leave the running state as ``async with`` would, draining with the grace period.

        :raises RuntimeError: if called from another task than the one that entered the bus
        """
        if self._host.is_open:
            self._host.check_closer(self)
            await self.__aexit__(None, None, None)


# current_emission() finds a sync listener's emission by these frames on the stack.
register_emit_frame(EventBus.emit.__code__, fast=True)
register_emit_frame(EventBus._emit_checked.__code__, fast=False)
