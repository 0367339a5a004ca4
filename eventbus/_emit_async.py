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
    nesting, sink, backoff = runtime.nesting, runtime.sink, runtime.queue.backoff
    remove = runtime.table.remove
    depth = nesting.depth()
    if depth >= nesting.max_depth:
        raise RecursionLimitError(event.__event_name__, nesting.max_depth)
    emission = Emission(event, depth + 1)
    subs = plan.listeners
    outcomes: list[Outcome | None] = [None] * len(subs)
    spawn: list[tuple[int, Listener]] = []

    async def run(i: int, sub: Listener) -> None:
        start = _perf()
        exc, value, rec = await call_async(sub, emission, sink, backoff)
        outcomes[i] = new_outcome(sub.name, value, exc, _perf() - start, rec)

    # One hop for the whole emit: the listeners' tasks copy the context it sets.
    token = nesting.enter_hop(emission.depth)
    try:
        for i, sub in enumerate(subs):
            if sub.once:
                if sub.fired:  # a nested emit already ran it: not this emit's listener
                    continue
                sub.fired = True
                remove(sub)
            if sub.is_async:
                spawn.append((i, sub))
            elif sub.retries:
                await run(i, sub)  # backs off between attempts
            else:
                # The commonest case, inline: no coroutine per call.
                start = _perf()
                try:
                    value = sub.fn(event)
                    if value is not None and _isawaitable(value):
                        value = await value
                except BaseException as exc:
                    if not isinstance(exc, Exception) and (
                        not isinstance(exc, anyio.get_cancelled_exc_class())
                        or cancelled_from_outside()
                    ):
                        raise
                    rec = sink.capture(event, emission.event_id, sub.name, exc, 1)
                    outcomes[i] = new_outcome(sub.name, None, exc, _perf() - start, rec)
                else:
                    outcomes[i] = new_outcome(sub.name, value, None, _perf() - start, None)
        if len(spawn) == 1:
            await run(*spawn[0])  # no task for one: it runs in this task, after the sync ones
        elif spawn:
            await _concurrently([run(i, sub) for i, sub in spawn])
    finally:
        nesting.leave_hop(token)
    done: list[Outcome] = []
    raised: list[Exception] = []
    for sub, out in zip(subs, outcomes, strict=True):
        if out is None:
            continue
        done.append(out)
        if isinstance(out.error, Exception) and (sub.errors or policy) == "propagate":
            add_note_once(out.error, sub.name)
            raised.append(out.error)
    if raised:
        raise ListenerErrors.for_event(plan.event_type.__event_name__, raised)
    return done


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
