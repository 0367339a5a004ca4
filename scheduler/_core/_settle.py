"""Keeping the lock settled: after a lock call whose outcome is unknown (a lost reply), the
lock's optional ``settle()`` is retried in the background until it reports nothing left, so
that a lock taken by an unanswered command is voided as soon as the backend answers again
(not at the lock's next use, nor after its TTL).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

from ..abc import Clock, Lock

__all__ = ["SETTLE_RETRY", "Settler"]

logger = logging.getLogger("scheduler")

#: seconds between attempts to settle a lock whose backend did not answer
SETTLE_RETRY = 0.1


class Settler:
    """Settles ``lock`` (if it has ``settle()``) whenever :meth:`unsure` was called."""

    def __init__(self, lock: Lock | None, clock: Clock) -> None:
        self._settle: Callable[[], Awaitable[int]] | None = getattr(lock, "settle", None)
        self._lock = lock
        self._clock = clock
        self._wanted = anyio.Event()
        self._working = False

    def unsure(self) -> None:
        """A lock call failed: its outcome is unknown, so the lock may need settling."""
        self._wanted.set()

    async def run(self) -> None:
        """Settle on demand until cancelled (a task of the scheduler's task group)."""
        if self._settle is None:
            return
        # asked for before this task started, or left by an earlier run of the scheduler
        wanted = self._wanted.is_set() or bool(getattr(self._lock, "unsettled", 0))
        self._wanted = anyio.Event()
        if wanted:
            self._wanted.set()
        while True:
            await self._wanted.wait()
            self._wanted = anyio.Event()
            self._working = True
            while await self._try_settle():
                await self._clock.sleep(SETTLE_RETRY)
            self._working = False

    async def _try_settle(self) -> int:
        """One settle; an error (a lock's bug) is logged and counted as "something left", so
        that it is tried again: this task must not end the scheduler's task group."""
        assert self._settle is not None
        try:
            return await self._settle()
        except Exception:
            logger.exception("could not settle %r; trying again", self._lock)
            return 1

    async def last_try(self, seconds: float = 1.0) -> None:
        """At exit: one short, shielded attempt if anything is still unsettled (what remains
        after it expires by its TTL)."""
        if self._settle is not None and (self._working or self._wanted.is_set()):
            with anyio.CancelScope(shield=True), anyio.move_on_after(seconds):
                await self._try_settle()
