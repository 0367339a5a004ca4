"""Calling one listener: retries and backoff, timeouts, and the cancellation rules.

These are plain functions of a listener, an :class:`Emission` and the :class:`FailureSink`
that records what failed; the emit paths, the workers and retries from the table share them.
"""

from __future__ import annotations

import contextvars
import inspect
import math
import sys
import time
import weakref
from collections.abc import Awaitable
from typing import Any

import anyio
import anyio.lowlevel

from .._events import Event
from .._exceptions import ListenerTimeoutError
from .._failures import FailureRecord
from ._emission import Emission
from ._listeners import Listener, Outcome
from ._sink import FailureSink, awaitable_error

__all__ = [
    "ABORTED",
    "QueuedCall",
    "absorb_cancel",
    "add_note_once",
    "attempt",
    "backoff_delay",
    "call_async",
    "call_once",
    "call_sync",
    "cancelled_from_outside",
    "checkpoint",
    "on_asyncio",
]

MAX_BACKOFF = 30.0

#: asyncio tasks of the bus's own that the bus itself cancelled (``emit_async()``'s listener
#: tasks, when its publisher was cancelled): a cancellation there is never the listener's
ABORTED: weakref.WeakSet[Any] = weakref.WeakSet()

#: Which attempt of a listener with ``retries=`` is running (1 otherwise), for instrumentation.
attempt: contextvars.ContextVar[int] = contextvars.ContextVar("eventbus_attempt", default=1)


def add_note_once(exc: BaseException, listener: str) -> None:
    """Name the listener on an exception raised to the publisher (once, however often raised)."""
    note = f"listener: {listener}"
    if note not in getattr(exc, "__notes__", ()):
        exc.add_note(note)


def backoff_delay(first: float, attempts: int) -> float:
    """Seconds before the next attempt: *first*, doubling, at most 30 s."""
    return min(first * 2.0 ** (attempts - 1), MAX_BACKOFF)


def cancelled_from_outside(*, own_task: bool = False) -> bool:
    """Whether a cancellation seen now comes from an enclosing scope, not from the listener.

    A listener may raise the cancellation exception itself (asyncio: it awaited a future that
    was cancelled elsewhere); that is its failure. A scope of ours or the publisher's shows as a
    cancelled effective deadline, and a plain ``task.cancel()`` as ``cancelling()``.

    :param own_task: the call runs in a task of the bus's own (a worker, one of
        ``emit_async()``'s), which nobody else may cancel but through a scope or the bus's own
        abort (:data:`ABORTED`): any other ``task.cancel()`` there came from the listener (or
        a library it called), and is its failure too (see :func:`absorb_cancel`)
    """
    deadline = anyio.current_effective_deadline()
    if deadline == -math.inf or deadline <= anyio.current_time():
        return True
    if not on_asyncio():
        return False  # trio: a listener cannot raise Cancelled without a scope
    import asyncio

    task = asyncio.current_task()
    if own_task:
        return task in ABORTED
    return task is not None and task.cancelling() > 0


def absorb_cancel() -> None:
    """Take back the ``task.cancel()`` requests of the current asyncio task (no-op elsewhere).

    For a cancellation :func:`cancelled_from_outside` found to be a listener's own in a task
    of the bus: the call is recorded as failed, and the task goes on (a worker serves the
    queue, and asyncio would otherwise cancel its next await).
    """
    if not on_asyncio():
        return
    import asyncio

    task = asyncio.current_task()
    while task is not None and task.cancelling():
        task.uncancel()


def checkpoint() -> Awaitable[None]:
    """Let other tasks run (and deliver a pending cancellation): on asyncio, ``sleep(0)``.

    anyio's own checkpoint does the same after probing for the event loop (about 2 µs); this
    returns the awaitable to await, so that it adds no coroutine of its own.
    """
    aio = sys.modules.get("asyncio")
    if aio is not None and aio._get_running_loop() is not None:
        sleep: Awaitable[None] = aio.sleep(0)
        return sleep
    return anyio.lowlevel.checkpoint()


def on_asyncio() -> bool:
    """Whether asyncio runs this task: one C call, far cheaper than sniffio's probe (~2 µs)."""
    aio = sys.modules.get("asyncio")  # never imported: not asyncio
    return aio is not None and aio._get_running_loop() is not None


def call_sync(
    sub: Listener, emission: Emission, sink: FailureSink
) -> tuple[Exception | None, Any, FailureRecord | None]:
    """One sync call with immediate retries (``emit()`` never waits, so it never sleeps)."""
    attempts = 0
    while True:
        attempts += 1
        token = attempt.set(attempts) if sub.retries else None
        try:
            value = sub.call(emission.event)
            if value is not None and inspect.isawaitable(value):
                # Retrying cannot help: the listener is declared wrong, not failing.
                attempts = sub.retries + 1
                raise awaitable_error(sub.name, value)
            return None, value, None
        except Exception as exc:
            if attempts <= sub.retries:
                continue
            rec = sink.capture(emission, sub, exc, attempts)
            return exc, None, rec
        finally:
            if token is not None:
                attempt.reset(token)


class QueuedCall:
    """One async listener call waiting for (or run by) a worker.

    Its attempts and last error survive a shutdown that cuts it short, for the record.
    """

    __slots__ = ("attempts", "context", "emission", "last_error", "listener", "scope")

    def __init__(self, listener: Listener, emission: Emission) -> None:
        self.listener = listener
        self.emission = emission
        self.context = contextvars.copy_context()
        self.attempts = 0
        self.last_error: BaseException | None = None
        self.scope: anyio.CancelScope | None = None


async def call_async(
    sub: Listener,
    emission: Emission,
    sink: FailureSink,
    backoff: float,
    job: QueuedCall | None = None,
    *,
    own_task: bool = False,
) -> tuple[BaseException | None, Any, FailureRecord | None]:
    """Call *sub* with retries and backoff; a sync *sub* is run inline (``emit_async()``).

    A cancellation the listener raised itself is its failure; one from an enclosing scope
    propagates. With a *job*, attempts and the last error are kept on it, and a failure
    after shutdown cut the job short is left for shutdown to record.

    :param own_task: this runs in a task of the bus's own (see :func:`cancelled_from_outside`)
    """
    attempts = 0
    while True:
        attempts += 1
        if job is not None:
            job.attempts = attempts
        token = attempt.set(attempts) if sub.retries else None
        try:
            if sub.is_async:  # without a timeout, no _with_timeout coroutine in between
                if sub.timeout is None:
                    value = await sub.call(emission.event)
                else:
                    value = await _with_timeout(sub, emission.event, sub.timeout)
            else:
                value = sub.call(emission.event)
                if value is not None and inspect.isawaitable(value):
                    value = await value
            return None, value, None
        except BaseException as exc:
            if not isinstance(exc, Exception):
                if not isinstance(exc, anyio.get_cancelled_exc_class()) or cancelled_from_outside(
                    own_task=own_task
                ):
                    raise
                if own_task:
                    absorb_cancel()
            if job is not None:
                job.last_error = exc
                if job.scope is not None and job.scope.cancel_called:
                    return exc, None, None  # shutdown records it, with attempts
            if attempts <= sub.retries:
                await anyio.sleep(backoff_delay(backoff, attempts))
                continue
            rec = sink.capture(emission, sub, exc, attempts)
            return exc, None, rec
        finally:
            if token is not None:
                attempt.reset(token)


async def _with_timeout(sub: Listener, event: Event, limit: float) -> Any:
    """Await *sub*, cancelled after *limit* seconds (its ``timeout=``)."""
    with anyio.move_on_after(limit) as scope:
        try:
            value = await sub.call(event)
        except Exception as exc:
            if scope.cancel_called:  # the listener turned our cancellation into an error
                raise ListenerTimeoutError(sub.name, limit) from exc
            raise
    if scope.cancel_called:  # cancelled, whether or not the listener swallowed it
        raise ListenerTimeoutError(sub.name, limit)
    return value


async def call_once(sub: Listener, event: Event) -> Outcome:
    """Call one listener once, honouring its timeout, recording nothing (retries use this)."""
    start = time.perf_counter()
    try:
        if sub.is_async:
            if sub.timeout is None:
                value = await sub.call(event)
            else:
                value = await _with_timeout(sub, event, sub.timeout)
        else:
            await checkpoint()
            value = sub.call(event)
            if value is not None and inspect.isawaitable(value):
                value = await value
    except Exception as exc:
        return Outcome(sub.name, None, exc, time.perf_counter() - start)
    return Outcome(sub.name, value, None, time.perf_counter() - start)
