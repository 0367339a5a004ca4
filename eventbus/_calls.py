"""Calling listeners: retries and backoff, timeouts, cancellation rules, failure recording.

Also the async-hop depth: a listener run by a worker or by ``emit_async()`` that emits again
nests one level deeper, counted in a context variable since it crosses awaits.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import math
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
from anyio.lowlevel import checkpoint

from ._dispatch import AWAITABLE_HINT, Emission, Plan, awaitable_error
from ._events import Event
from ._exceptions import ListenerTimeoutError
from ._failures import FailureRecord
from ._listeners import Listener, Outcome

if TYPE_CHECKING:
    from ._workers import Job
    from .abc import FailureStore

__all__ = ["Calls", "async_depth", "cancelled_from_outside", "on_asyncio"]

logger = logging.getLogger("eventbus")

# Async-hop depth (a listener run by a worker or by emit_async that emits again). Sync nesting
# is counted on the bus itself: between two awaits it always returns to zero. The bus counts the
# calls that have set it (``_hops``), so that ``emit()`` reads it only while one is running.
async_depth: contextvars.ContextVar[int] = contextvars.ContextVar("eventbus_depth", default=0)

_HOOK = "on_failure"


def cancelled_from_outside() -> bool:
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


def on_asyncio() -> bool:
    """Whether asyncio runs this task: one C call, far cheaper than sniffio's probe (~2 µs)."""
    aio = sys.modules.get("asyncio")  # never imported: not asyncio
    return aio is not None and aio._get_running_loop() is not None


def _asyncio_cancelled() -> type[BaseException]:
    import asyncio

    return asyncio.CancelledError


class Calls:
    """How the bus calls one listener and records its failure (a mixin of :class:`EventBus`)."""

    if TYPE_CHECKING:
        failures: FailureStore
        retry_backoff: float
        _hops: int
        _fast_limit: int
        _max_depth: int
        _failure_count: int
        _in_hook: bool
        _on_failure: Callable[[FailureRecord], object] | None

        def _remove(self, sub: Listener) -> None: ...

    def _sync_limit(self) -> None:
        # ``emit()`` compares its sync depth with ``_fast_limit`` alone: max_depth while no
        # async call is in progress, else 0, which sends it to the exact check with the hop depth.
        self._fast_limit = 0 if self._hops else self._max_depth

    def _enter_hop(self, depth: int) -> contextvars.Token[int]:
        self._hops += 1
        self._fast_limit = 0
        return async_depth.set(depth)

    def _leave_hop(self, token: contextvars.Token[int]) -> None:
        async_depth.reset(token)
        self._hops -= 1
        if not self._hops:
            self._fast_limit = self._max_depth

    def _call_sync(
        self, sub: Listener, emission: Emission
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
                    raise awaitable_error(sub.name, value)
                return None, value, None
            except Exception as exc:
                if attempts <= sub.retries:
                    continue
                rec = self._record(emission.event, emission.event_id, sub.name, exc, attempts)
                return exc, None, rec

    def _backoff(self, attempts: int) -> float:
        return min(self.retry_backoff * 2.0 ** (attempts - 1), 30.0)

    async def _call_async(
        self, sub: Listener, emission: Emission, job: Job | None = None
    ) -> tuple[BaseException | None, Any, FailureRecord | None]:
        """Call *sub* with retries and backoff; a sync *sub* is run inline (``emit_async()``).

        A cancellation the listener raised itself is its failure; one from an enclosing scope
        propagates. With a *job*, attempts and the last error are kept on it, and a failure
        after shutdown cut the job short is left for shutdown to record. The caller holds a hop
        (``_enter_hop``) around it: one per worker job, one per ``emit_async()``.
        """
        attempts = 0
        while True:
            attempts += 1
            if job is not None:
                job.attempts = attempts
            try:
                if sub.is_async:  # without a timeout, no _invoke coroutine in between
                    if sub.timeout is None:
                        value = await sub.fn(emission.event)
                    else:
                        value = await self._invoke(sub, emission.event)
                else:
                    value = sub.fn(emission.event)
                    if value is not None and inspect.isawaitable(value):
                        value = await value
                return None, value, None
            except BaseException as exc:
                if not isinstance(exc, Exception) and (
                    not isinstance(exc, anyio.get_cancelled_exc_class()) or cancelled_from_outside()
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
                    awaitable_error(_HOOK, result)
                    logger.error("on_failure hook %r %s", hook, AWAITABLE_HINT)
            except Exception:
                logger.exception("on_failure hook %r raised", hook)
            finally:
                self._in_hook = False
        return rec

    async def _run_listeners(
        self,
        plan: Plan,
        run: Callable[[int, Listener], Awaitable[None]],
        spawn: Callable[[int, Listener], object],
    ) -> None:
        """Run the sync listeners of *plan* inline, in order, and hand the async ones to *spawn*.

        Inline sync calls may await: retries sleep, and an awaitable a listener returns is awaited.
        """
        for i, sub in enumerate(plan.listeners):
            if sub.once:
                if sub.fired:  # a nested emit already ran it: not this emit's listener
                    continue
                sub.fired = True
                self._remove(sub)
            if sub.is_async:
                spawn(i, sub)
            else:
                await run(i, sub)
