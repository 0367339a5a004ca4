"""``emit_async()``: run every listener of a plan and wait for all of them.

:meth:`EventBus.emit_async <eventbus.EventBus.emit_async>` checks the event and finds the plan;
:func:`run_plan` does the work.

Sync listeners run first, inline and in order; async ones then run concurrently, each in its
own task (a copy of the publisher's context), or in the publisher's own task when there is
only one. With ``concurrent=False`` every listener runs in the publisher's task, one after
another in plan order. Every call becomes an :class:`Outcome`, in plan order.
"""

from __future__ import annotations

import functools
import inspect
import time
from types import CoroutineType
from typing import Any

import anyio

from .._events import Event
from .._exceptions import ListenerCancelledError, ListenerErrors, RecursionLimitError
from ._calls import (
    ABORTED,
    absorb_cancel,
    add_note_once,
    call_async,
    cancelled_from_outside,
    on_asyncio,
)
from ._compiler import DispatchCache, Runtime
from ._emission import Emission
from ._listeners import ErrorPolicy, Listener, Outcome, new_outcome
from ._sink import FailureSink
from ._table import Plan

__all__ = ["new_emission", "run_hooked", "run_plan"]

_perf = time.perf_counter
_new = object.__new__
_isawaitable = inspect.isawaitable


async def run_hooked(
    compiled: DispatchCache, plan: Plan, event: Event, concurrent: bool
) -> list[Outcome]:
    """What ``EventBus.emit_async()`` runs when hooked: :func:`run_plan` observed by
    instrumentation, or with its calls counted, or both."""
    runtime = compiled.runtime
    emission = new_emission(runtime, event)
    outcomes: list[Any] = [None] * len(plan.listeners)
    run = functools.partial(
        run_plan, plan, event, runtime, compiled.policy, concurrent, emission, outcomes
    )
    observer = compiled.observer
    try:
        return await (run() if observer is None else observer.emit_async(plan, emission, run))
    finally:
        if compiled.counting:
            compiled.counts.delivered(plan, outcomes)


def new_emission(runtime: Runtime, event: Event) -> Emission:
    """The emission of an ``emit_async()`` of *event* starting now (its ids: made on use).

    :raises RecursionLimitError: if emits are already nested ``max_depth`` deep
    """
    nesting = runtime.nesting
    cause = nesting.current()
    if cause is None:
        return Emission(event)
    if cause.depth >= nesting.max_depth:
        raise RecursionLimitError(event.__event_name__, nesting.max_depth)
    return cause.child(event)


async def run_plan(
    plan: Plan,
    event: Event,
    runtime: Runtime,
    policy: ErrorPolicy,
    concurrent: bool = True,
    emission: Emission | None = None,
    outcomes: list[Any] | None = None,
) -> list[Outcome]:
    """Run *plan*'s listeners for *event*, one hop deeper, and return their outcomes.

    :param policy: the bus's default error policy
    :param concurrent: false: await each async listener before the next listener starts
    :param emission: made by :func:`new_emission` already (instrumentation needs it first)
    :param outcomes: with *emission*: a list of ``None`` per listener, filled in as calls end,
        for a caller that must see them however this ends (counting calls)
    :raises RecursionLimitError: if emits are already nested ``max_depth`` deep
    :raises ListenerErrors: when listeners under the ``propagate`` policy failed, once all ran
    """
    nesting, sink = runtime.nesting, runtime.sink
    subs = plan.listeners
    if emission is None:  # new_emission(), inline: this is emit_async()'s hot path
        # What the listeners' own emits and failures refer to.
        top = nesting.top
        cause = None if top is None or top is nesting.idle else nesting.current()
        if cause is None:  # Emission.first(event), inline
            emission = _new(Emission)
            emission.event = event
        elif cause.depth >= nesting.max_depth:
            raise RecursionLimitError(event.__event_name__, nesting.max_depth)
        else:
            emission = cause.child(event)
        if not subs:
            return []
        # Outcome | None until every call ended (None: a once listener this emit did not run).
        outcomes = [None] * len(subs)
    elif not subs:
        return []
    elif outcomes is None:
        outcomes = [None] * len(subs)
    spawn: list[tuple[int, Listener]] = []
    skipped = False
    failures_before = sink.count
    # One hop for the whole emit: the listeners' tasks copy the context it sets.
    hopping = nesting.enter_hop(emission)
    try:
        start = _perf()
        for i, sub in enumerate(subs):
            if sub.times is not None:
                if not sub.claim():  # a nested emit took its last call: not this emit's
                    skipped = True
                    continue
                if not sub.left:
                    runtime.table.spend(sub)
            if sub.is_async:
                if concurrent:
                    spawn.append((i, sub))
                    continue
                await _run(outcomes, i, sub, emission, runtime)  # sequential: awaited now
                start = _perf()
                continue
            if sub.retries:
                await _run(outcomes, i, sub, emission, runtime)  # backs off between attempts
                start = _perf()
                continue
            # The commonest case, inline: no coroutine per call; each call's end is the next
            # one's start.
            try:
                value = sub.call(event)
                if value is not None and _isawaitable(value):
                    value = await value
            except BaseException as exc:
                outcomes[i] = _failed(exc, sub, emission, sink, start)
                start = _perf()
            else:
                end = _perf()
                outcomes[i] = new_outcome(sub.name, value, None, end - start, None)
                start = end
        if spawn:
            if len(spawn) == 1:
                i, sub = spawn[0]
                await _run(outcomes, i, sub, emission, runtime)  # in this task, after the others
            elif on_asyncio():
                await _gather_asyncio(spawn, outcomes, emission, runtime)
            else:
                await _gather_task_group(spawn, outcomes, emission, runtime)
    finally:
        nesting.leave_hop(hopping)
    done: list[Outcome] = [o for o in outcomes if o is not None] if skipped else outcomes
    if sink.count != failures_before:  # something failed: does anything propagate?
        raised: list[Exception] = []
        for sub, out in zip(subs, outcomes, strict=True):
            if out is not None and out.error is not None:
                if (sub.errors or policy) == "propagate":
                    err = out.error
                    if not isinstance(err, Exception):  # a cancellation it raised itself
                        err = ListenerCancelledError(sub.name, err)
                        err.__cause__ = out.error
                    add_note_once(err, sub.name)
                    raised.append(err)
        if raised:
            raise ListenerErrors.for_event(plan.event_type.__event_name__, raised)
    return done


async def _run(
    outcomes: list[Any],
    i: int,
    sub: Listener,
    emission: Emission,
    runtime: Runtime,
    own_task: bool = False,
) -> None:
    """Call *sub* (async, or sync with retries) and store its outcome at *i*.

    :param own_task: this runs in a task of its own, which only a scope may cancel (see
        :func:`~eventbus._core._calls.cancelled_from_outside`)
    """
    start = _perf()
    if sub.is_async and sub.timeout is None and not sub.retries:
        try:  # the plain async listener: no further coroutine in between
            value = await sub.call(emission.event)
        except BaseException as exc:
            outcomes[i] = _failed(exc, sub, emission, runtime.sink, start, own_task)
        else:
            outcomes[i] = new_outcome(sub.name, value, None, _perf() - start, None)
        return
    error, value, rec = await call_async(
        sub, emission, runtime.sink, runtime.queue.backoff, own_task=own_task
    )
    outcomes[i] = new_outcome(sub.name, value, error, _perf() - start, rec)


def _failed(
    exc: BaseException,
    sub: Listener,
    emission: Emission,
    sink: FailureSink,
    start: float,
    own_task: bool = False,
) -> Outcome:
    """The outcome of a call that raised *exc*, recorded; a cancellation from outside propagates."""
    end = _perf()
    if not isinstance(exc, Exception):
        if not isinstance(exc, anyio.get_cancelled_exc_class()) or cancelled_from_outside(
            own_task=own_task
        ):
            raise exc
        if own_task:
            absorb_cancel()
    rec = sink.capture(emission, sub, exc, 1)
    return new_outcome(sub.name, None, exc, end - start, rec)


async def _gather_task_group(
    calls: list[tuple[int, Listener]], outcomes: list[Any], emission: Emission, runtime: Runtime
) -> None:
    """Run *calls* in an anyio task group (trio), each in a task of its own.

    A ``BaseException`` that is not a cancellation (``KeyboardInterrupt``) is raised as
    itself, as on asyncio, not inside the group trio's nursery wraps it in.
    """
    try:
        async with anyio.create_task_group() as tg:
            for i, sub in calls:
                tg.start_soon(_run, outcomes, i, sub, emission, runtime, True)
    except BaseExceptionGroup as group:
        first = _first_not_cancelled(group)
        if first is None:
            raise
        raise first from None


def _first_not_cancelled(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    cancelled = anyio.get_cancelled_exc_class()
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            found = _first_not_cancelled(exc)
            if found is not None:
                return found
        elif not isinstance(exc, cancelled):
            return exc
    return None


async def _await_value(value: Any) -> Any:
    """A coroutine awaiting what a listener returned (an awaitable that is not a coroutine)."""
    return await value


async def _gather_asyncio(
    calls: list[tuple[int, Listener]], outcomes: list[Any], emission: Emission, runtime: Runtime
) -> None:
    """Run *calls* as asyncio tasks and wait for all of them, under a task group's rules.

    Each task runs in a copy of this task's context; a listener's exception becomes its
    outcome; a ``BaseException`` that is not a cancellation cancels the other calls and is
    raised once all ended; a cancelled publisher cancels them all, waits, and propagates.
    Cheaper than ``asyncio.TaskGroup`` around a wrapper coroutine per call: a plain async
    listener's coroutine is the task itself, and one done callback makes its outcome.
    """
    import asyncio

    loop = asyncio.get_running_loop()
    sink = runtime.sink
    event = emission.event
    tasks: list[asyncio.Task[Any]] = []
    left = 0  # tasks started and not ended
    aborting = False
    base_error: BaseException | None = None
    waiter = loop.create_future()

    def abort() -> None:
        nonlocal aborting
        aborting = True
        for task in tasks:
            ABORTED.add(task)  # not the listener's cancellation: see cancelled_from_outside()
            task.cancel()

    def ended(i: int, sub: Listener, wrapped: bool, start: float, task: asyncio.Task[Any]) -> None:
        # wrapped: a call run by _run, which stores its own outcome (when it gets to).
        nonlocal left, base_error
        end = _perf()
        left -= 1
        if task.cancelled():
            # Not by us: cancelled by itself, or by someone holding its task (task.cancel()).
            if not aborting and outcomes[i] is None:
                try:
                    task.result()
                except asyncio.CancelledError as exc:
                    rec = sink.capture(emission, sub, exc, 1)
                    outcomes[i] = new_outcome(sub.name, None, exc, end - start, rec)
        elif (error := task.exception()) is None:
            if not wrapped:
                outcomes[i] = new_outcome(sub.name, task.result(), None, end - start, None)
        elif isinstance(error, Exception) and not wrapped:
            rec = sink.capture(emission, sub, error, 1)
            outcomes[i] = new_outcome(sub.name, None, error, end - start, rec)
        elif base_error is None:  # not a listener's failure: take the others down, raise it
            base_error = error
            abort()
        if not left and not waiter.done():
            waiter.set_result(None)

    for i, sub in calls:
        start = _perf()
        wrapped = sub.timeout is not None or sub.retries > 0
        if wrapped:
            coro = _run(outcomes, i, sub, emission, runtime, True)
        else:
            try:  # what a sync decorator around the coroutine function raises is its failure
                coro = sub.call(event)
            except BaseException as exc:
                try:
                    outcomes[i] = _failed(exc, sub, emission, sink, start)
                except BaseException as not_a_failure:  # the calls started are cancelled
                    base_error = not_a_failure
                    abort()
                    break
                continue
            if type(coro) is not CoroutineType:  # another awaitable (or none: a TypeError)
                coro = _await_value(coro)
        task = loop.create_task(coro)
        left += 1
        task.add_done_callback(functools.partial(ended, i, sub, wrapped, start))
        tasks.append(task)
    cancelled: BaseException | None = None
    while left:
        try:
            await waiter
        except asyncio.CancelledError as exc:  # the publisher: cancel the calls, wait for them
            cancelled = cancelled or exc
            abort()
            waiter = loop.create_future()
    if cancelled is not None:
        raise cancelled
    if base_error is not None:
        raise base_error
