"""The event bus: its options, sync and async emit, and statistics.

``emit()`` runs sync listeners inline and hands async ones to a bounded queue served by a fixed
set of worker tasks; ``emit_async()`` runs every listener and waits. A listener exception is
captured per listener, logged and recorded, and (under ``errors="propagate"``) re-raised to the
publisher as a :class:`ListenerErrors` group once every listener has run.

The other jobs live next door, as mixins of :class:`EventBus`: ``_subscriptions`` (on/off),
``_dispatch`` (plans), ``_calls`` (calling listeners, recording failures) and ``_workers`` (the
queue, its workers and shutdown).
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import time
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup
from anyio.lowlevel import checkpoint
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ._calls import Calls, async_depth, on_asyncio
from ._dispatch import (
    Emission,
    FastPlan,
    Plan,
    Plans,
    SinglePlan,
    add_note_once,
    awaitable_error,
)
from ._events import Event, EventRegistry, default_registry
from ._exceptions import BusNotRunningError, ListenerErrors, RecursionLimitError
from ._failures import FailureRecord, new_event_id
from ._listeners import ErrorPolicy, Listener, Outcome, is_async_callable, new_outcome
from ._subscriptions import Subscriptions
from ._workers import Job, Workers
from .backends.memory import MemoryFailureStore

if TYPE_CHECKING:
    from ._retry import RetryReport
    from .abc import FailureStore

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


class EventBus(Subscriptions, Plans, Workers, Calls):
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

    # Slots: CPython 3.11 loads a slot at a fixed offset whatever the number of attributes,
    # which keeps the emit() hot path fast. The mixins have no ``__slots__``, so a bus keeps a
    # ``__dict__`` for callers that set their own attributes (a test wrapping ``_build_plan``).
    __slots__ = (
        "_closing",
        "_depth",
        "_dropped",
        "_errors",
        "_failure_count",
        "_fast_limit",
        "_hops",
        "_in_flight",
        "_in_hook",
        "_leftovers",
        "_max_depth",
        "_names",
        "_on_failure",
        "_owner",
        "_plans",
        "_running",
        "_send",
        "_seq",
        "_stack",
        "_subs",
        "_tg",
        "_worker_scope",
        "_workers_done",
        "failures",
        "queue_size",
        "registry",
        "retry_backoff",
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
    ) -> None:
        if queue_size < 0 or workers < 1 or max_depth < 1 or shutdown_grace < 0:
            raise ValueError(
                "queue_size must be >= 0, workers >= 1, max_depth >= 1 and shutdown_grace >= 0"
            )
        # event type -> plain callables (fast path) or a Plan (slow path)
        self._plans: dict[type[Event], SinglePlan | FastPlan | Plan] = {}
        self.registry = registry if registry is not None else default_registry
        self.failures: FailureStore = failures if failures is not None else MemoryFailureStore()
        self.errors = errors
        self.queue_size = queue_size
        self.workers = workers
        self.shutdown_grace = shutdown_grace
        self._hops = 0  # async listener calls in progress that set ``async_depth``
        self.max_depth = max_depth
        self.retry_backoff = retry_backoff
        self.on_failure = on_failure
        self._subs: list[Listener] = []
        self._names: dict[str, Listener] = {}
        self._seq = itertools.count()
        self._depth = 0
        self._running = False
        self._closing = False
        self._send: MemoryObjectSendStream[Job] | None = None
        self._leftovers: MemoryObjectReceiveStream[Job] | None = None
        self._in_flight: set[Job] = set()
        self._stack: AsyncExitStack | None = None
        self._workers_done: anyio.Event | None = None
        self._worker_scope: anyio.CancelScope | None = None
        self._tg: TaskGroup | None = None
        self._dropped = 0
        self._failure_count = 0
        self._in_hook = False  # inside on_failure: failures it causes do not call it again
        self._owner: object = None  # id of the task that entered, the only one that may close

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
        # ``plan.__class__`` (a plain slot load) picks the path; the annotated names narrow it.
        kind = plan.__class__
        if kind is SinglePlan:  # one plain sync listener, the commonest case: no loop
            one: SinglePlan = plan  # type: ignore[assignment]
            # The recursion guard, as below. _fast_limit is max_depth, or 0 while async calls
            # (with their own depth) run, which sends every emit to the exact check.
            depth = self._depth
            if depth >= self._fast_limit and depth + async_depth.get() >= self._max_depth:
                raise RecursionLimitError(event.__event_name__, self._max_depth)  # type: ignore[union-attr]
            self._depth = depth + 1
            try:
                if (value := one.fn(event)) is not None and inspect.isawaitable(value):
                    raise awaitable_error(one.sub.name, value)
            except Exception as exc:
                self._record(event, new_event_id(), one.sub.name, exc, 1)  # type: ignore[arg-type]
            finally:
                self._depth = depth
            return None
        if kind is FastPlan:
            fast: FastPlan = plan  # type: ignore[assignment]
            depth = self._depth
            if depth >= self._fast_limit and depth + async_depth.get() >= self._max_depth:
                raise RecursionLimitError(event.__event_name__, self._max_depth)  # type: ignore[union-attr]
            self._depth = depth + 1
            event_id = None  # made by the first failure, shared by the emission's others
            try:
                for fn in fast:
                    try:
                        if (value := fn(event)) is not None and inspect.isawaitable(value):
                            raise awaitable_error(self._fast_sub(fast, fn).name, value)
                    except Exception as exc:
                        event_id = self._fast_failure(
                            event,  # type: ignore[arg-type]
                            fast,
                            fn,
                            exc,
                            event_id,
                        )
            finally:
                self._depth = depth
            return None
        return self._emit_planned(event, plan)  # type: ignore[arg-type]

    def _emit_planned(self, event: Event, plan: Plan) -> None:
        ename = event.__event_name__
        if plan.n_async and not self._running:
            if self._closing:
                pass  # recorded per listener below as dropped: the bus is closing
            else:
                raise BusNotRunningError(ename, plan.n_async)
        depth = self._depth + async_depth.get()
        if depth >= self.max_depth:
            raise RecursionLimitError(ename, self.max_depth)
        emission = Emission(event, depth + 1)
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
                    add_note_once(exc, sub.name)
                    raised.append(exc)
        finally:
            self._depth -= 1
        if raised:
            raise ListenerErrors.for_event(ename, raised)

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
        depth = self._depth + async_depth.get()
        if depth >= self._max_depth:
            raise RecursionLimitError(event.__event_name__, self._max_depth)
        emission = Emission(event, depth + 1)
        outcomes: list[Outcome | None] = [None] * len(plan.listeners)

        async def run(i: int, sub: Listener) -> None:
            start = time.perf_counter()
            exc, value, rec = await self._call_async(sub, emission)
            outcomes[i] = new_outcome(sub.name, value, exc, time.perf_counter() - start, rec)

        # One hop for the whole emit: the listeners' tasks copy the context it sets.
        token = self._enter_hop(emission.depth)
        try:
            if plan.n_async < 2:
                # No task group for one async listener: it runs in this task, after the sync ones
                # (when a task group would have started it).
                later: list[tuple[int, Listener]] = []
                await self._run_listeners(plan, run, lambda i, sub: later.append((i, sub)))
                for i, sub in later:
                    await run(i, sub)
            elif on_asyncio():
                # asyncio's own task group is far cheaper than anyio's, with the same rules: each
                # task runs in a copy of the context, a BaseException cancels the siblings, and a
                # cancelled publisher cancels them (our cancel scopes work in any asyncio task).
                import asyncio

                async with asyncio.TaskGroup() as atg:
                    await self._run_listeners(
                        plan, run, lambda i, sub: atg.create_task(run(i, sub))
                    )
            else:
                async with anyio.create_task_group() as tg:
                    await self._run_listeners(plan, run, lambda i, sub: tg.start_soon(run, i, sub))
        finally:
            self._leave_hop(token)
        ran = [(s, o) for s, o in zip(plan.listeners, outcomes, strict=True) if o is not None]
        done = [out for _, out in ran]
        raised: list[Exception] = []
        for sub, out in ran:
            if isinstance(out.error, Exception) and (sub.errors or self.errors) == "propagate":
                add_note_once(out.error, sub.name)
                raised.append(out.error)
        if raised:
            raise ListenerErrors.for_event(event.__event_name__, raised)
        return done

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
