"""What runs beside a job function: the lock's renewal watchdog and the run's timeout.

Both work through the run's :class:`RunControl`: they cancel its scope and say why, and the
runner turns that into the recorded error (``LockLostError``, ``RunTimeoutError``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import anyio

from .._context import RunContext
from ._clock import call_before

if TYPE_CHECKING:
    from ..abc import Clock, Lease

__all__ = ["Renewal", "RunControl", "call_guarded"]

logger = logging.getLogger("scheduler")


class RunControl:
    """How the scheduler reaches into a run in progress: its cancel scope, and why it was
    cancelled (``remove(cancel=True)``, a lost lock, or its timeout)."""

    __slots__ = ("lost", "reason", "renewing", "scope", "timed_out")

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        self.reason: str | None = None
        self.lost: str | None = None
        self.renewing = False
        self.timed_out = False

    def cancel(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self.scope.cancel()


class Renewal:
    """Extend ``lease`` every ttl/3; cancel the run before the lock can expire unrenewed.

    ``deadline`` is when the lock expires at the latest (the TTL counted from before the
    call that set it). Each ``extend()`` is given only until ``deadline - margin``, so a
    backend that stops answering cannot keep the run going past its lock: at that point
    the run is cancelled whatever the backend is doing.
    """

    def __init__(
        self,
        lease: Lease,
        ttl: float,
        deadline: datetime,
        touch: Callable[[datetime], Awaitable[None]],
    ) -> None:
        self.lease = lease
        self.ttl = ttl
        self.deadline = deadline
        self.touch = touch

    async def watch(self, clock: Clock, control: RunControl) -> None:
        ttl, deadline = self.ttl, self.deadline
        margin = timedelta(seconds=min(ttl / 10, 1.0))
        period = timedelta(seconds=ttl / 3)
        due = clock.now() + period
        while True:
            await clock.sleep_until(min(due, deadline - margin))
            before = clock.now()
            if before >= deadline - margin:
                control.lost = "the lock could not be renewed before it expired"
                control.cancel("lock lost")
                return
            try:
                in_time, ok = await call_before(clock, deadline - margin, self.lease.extend)
            except Exception as exc:
                logger.warning("lock renewal failed (%s: %s); retrying", type(exc).__name__, exc)
                due = clock.now() + period
                continue
            if not in_time:
                continue  # the check at the top cancels the run
            if not ok:
                control.lost = "renewal found the lock expired or held by another owner"
                control.cancel("lock lost")
                return
            deadline = before + timedelta(seconds=ttl)
            due = before + period
            try:
                await self.touch(deadline)
            except Exception:
                logger.exception("could not record the renewed lock's expiry in the run table")


async def call_guarded(
    fn: Callable[[RunContext], Awaitable[Any]],
    ctx: RunContext,
    control: RunControl,
    clock: Clock,
    *,
    renewal: Renewal | None,
    limit: float | None,
) -> Any:
    """Await ``fn(ctx)`` in the run's scope, with the renewal watchdog and the time limit
    (seconds, by ``clock``: anyio's own timeouts cannot see a virtual clock) beside it when
    there are any; returns what ``fn`` returned (``None`` if the scope cancelled it).
    """
    with control.scope:
        if renewal is None and limit is None:
            return await fn(ctx)
        control.renewing = renewal is not None
        result: Any = None
        error: Exception | None = None
        async with anyio.create_task_group() as tg:
            if renewal is not None:
                tg.start_soon(renewal.watch, clock, control)
            if limit is not None:
                tg.start_soon(_time_out, clock, clock.now() + timedelta(seconds=limit), control)
            try:
                result = await fn(ctx)
            except Exception as exc:  # re-raised bare below, not as an ExceptionGroup
                error = exc
            finally:
                tg.cancel_scope.cancel()
        if error is not None:
            raise error
        return result
    return None


async def _time_out(clock: Clock, deadline: datetime, control: RunControl) -> None:
    await clock.sleep_until(deadline)
    control.timed_out = True
    control.cancel("timeout")
