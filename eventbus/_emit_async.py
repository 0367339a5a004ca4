"""``emit_async()``: run every listener of a plan and wait for all of them.

Sync listeners run first, inline and in order; async ones then run concurrently, each in its
own task (a copy of the publisher's context), or in the publisher's own task when there is
only one. Every call becomes an :class:`Outcome`, in subscription order.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Coroutine
from typing import Any

import anyio

from ._calls import Emission, add_note_once, call_async, cancelled_from_outside, on_asyncio
from ._compiler import Runtime
from ._events import Event
from ._exceptions import ListenerErrors, RecursionLimitError
from ._listeners import ErrorPolicy, Listener, Outcome, new_outcome
from ._sink import FailureSink
from ._table import Plan

__all__ = ["run_plan"]

_perf = time.perf_counter
_isawaitable = inspect.isawaitable


async def run_plan(
    plan: Plan, event: Event, runtime: Runtime, policy: ErrorPolicy
) -> list[Outcome]:
    """Run *plan*'s listeners for *event*, one hop deeper, and return their outcomes.

    :param policy: the bus's default error policy
    :raises RecursionLimitError: if emits are already nested ``max_depth`` deep
    :raises ListenerErrors: when listeners under the ``propagate`` policy failed, once all ran
    """
    nesting, sink = runtime.nesting, runtime.sink
    depth = nesting.depth()
    if depth >= nesting.max_depth:
        raise RecursionLimitError(event.__event_name__, nesting.max_depth)
    subs = plan.listeners
    if not subs:
        return []
    emission = Emission(event, depth + 1)
    # Outcome | None until every call ended (None: a once listener this emit did not run).
    outcomes: list[Any] = [None] * len(subs)
    spawn: list[tuple[int, Listener]] = []
    skipped = False
    failures_before = sink.count
    # One hop for the whole emit: the listeners' tasks copy the context it sets.
    token = nesting.enter_hop(emission.depth)
    try:
        start = _perf()
        for i, sub in enumerate(subs):
            if sub.once:
                if sub.fired:  # a nested emit already ran it: not this emit's listener
                    skipped = True
                    continue
                sub.fired = True
                runtime.table.remove(sub)
            if sub.is_async:
                spawn.append((i, sub))
                continue
            if sub.retries:
                await _run(outcomes, i, sub, emission, runtime)  # backs off between attempts
                start = _perf()
                continue
            # The commonest case, inline: no coroutine per call; each call's end is the next
            # one's start.
            try:
                value = sub.fn(event)
                if value is not None and _isawaitable(value):
                    value = await value
            except BaseException as exc:
                outcomes[i] = _failed(exc, sub, emission, sink, start)
                start = _perf()
            else:
                end = _perf()
                outcomes[i] = new_outcome(sub.name, value, None, end - start, None)
                start = end
        if len(spawn) == 1:
            i, sub = spawn[0]
            await _run(outcomes, i, sub, emission, runtime)  # in this task, after the sync ones
        elif spawn:
            await _concurrently([_run(outcomes, i, sub, emission, runtime) for i, sub in spawn])
    finally:
        nesting.leave_hop(token)
    done: list[Outcome] = [o for o in outcomes if o is not None] if skipped else outcomes
    if sink.count != failures_before:  # something failed: does anything propagate?
        raised: list[Exception] = []
        for sub, out in zip(subs, outcomes, strict=True):
            if out is not None and isinstance(out.error, Exception):
                if (sub.errors or policy) == "propagate":
                    add_note_once(out.error, sub.name)
                    raised.append(out.error)
        if raised:
            raise ListenerErrors.for_event(plan.event_type.__event_name__, raised)
    return done


async def _run(
    outcomes: list[Any], i: int, sub: Listener, emission: Emission, runtime: Runtime
) -> None:
    """Call *sub* (async, or sync with retries) and store its outcome at *i*."""
    start = _perf()
    if sub.is_async and sub.timeout is None and not sub.retries:
        try:  # the plain async listener: no further coroutine in between
            value = await sub.fn(emission.event)
        except BaseException as exc:
            outcomes[i] = _failed(exc, sub, emission, runtime.sink, start)
        else:
            outcomes[i] = new_outcome(sub.name, value, None, _perf() - start, None)
        return
    error, value, rec = await call_async(sub, emission, runtime.sink, runtime.queue.backoff)
    outcomes[i] = new_outcome(sub.name, value, error, _perf() - start, rec)


def _failed(
    exc: BaseException, sub: Listener, emission: Emission, sink: FailureSink, start: float
) -> Outcome:
    """The outcome of a call that raised *exc*, recorded; a cancellation from outside propagates."""
    end = _perf()
    if not isinstance(exc, Exception) and (
        not isinstance(exc, anyio.get_cancelled_exc_class()) or cancelled_from_outside()
    ):
        raise exc
    rec = sink.capture(emission.event, emission.event_id, sub.name, exc, 1)
    return new_outcome(sub.name, None, exc, end - start, rec)


async def _concurrently(calls: list[Coroutine[Any, Any, None]]) -> None:
    """Await *calls* in a task group, each task in a copy of this task's context."""
    if on_asyncio():
        # asyncio's own task group is far cheaper than anyio's, with the same rules: each task
        # runs in a copy of the context, a BaseException cancels the siblings, and a cancelled
        # publisher cancels them (our cancel scopes work in any asyncio task).
        import asyncio

        async with asyncio.TaskGroup() as atg:
            for call in calls:
                atg.create_task(call)
    else:
        async with anyio.create_task_group() as tg:
            for call in calls:
                tg.start_soon(_awaited, call)


async def _awaited(call: Coroutine[Any, Any, None]) -> None:
    await call
