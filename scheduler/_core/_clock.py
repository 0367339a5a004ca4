"""Time, injectable: the real clock for production and a virtual clock for tests.

The loop never reads time any other way, so a test can drive hours of schedule in
microseconds: ``await clock.advance(3600)`` wakes each sleeper in deadline order and lets
the work it starts settle (``anyio.wait_all_tasks_blocked()``) before moving on.
"""

from __future__ import annotations

import heapq
import itertools
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

import anyio

if TYPE_CHECKING:
    from ..abc import Clock

__all__ = ["SystemClock", "VirtualClock", "call_before"]

T = TypeVar("T")


class SystemClock:
    """Real time: UTC wall time for fire times, anyio's monotonic clock for sleeping.

    A deadline is mapped to monotonic time when the sleep starts and checked against the wall
    clock on waking, so a wall-clock step backwards (NTP) never fires a job early. The loop
    measures how late it woke on :meth:`monotonic`, so a step *forwards* while it slept does
    not make an on-time fire look late (missed).
    """

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        """Seconds on a clock that never steps (optional in the ``Clock`` protocol)."""
        return anyio.current_time()

    async def sleep_until(self, deadline: datetime) -> None:
        while True:
            remaining = (deadline - self.now()).total_seconds()
            if remaining <= 0:
                await anyio.lowlevel.checkpoint()
                return
            await anyio.sleep_until(anyio.current_time() + remaining)

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


class VirtualClock:
    """A clock that moves only when told to, for deterministic tests of timing.

    :param start: the initial time (aware); default 2024-01-01T00:00:00Z
    """

    def __init__(self, start: datetime | None = None) -> None:
        start = start or datetime(2024, 1, 1, tzinfo=UTC)
        if start.tzinfo is None:
            raise ValueError(f"start={start!r} is naive; pass an aware datetime")
        self._now = start.astimezone(UTC)
        self._sleepers: list[tuple[datetime, int, anyio.Event]] = []
        self._seq = itertools.count()
        #: how many times anything started sleeping (tests prove the loop does not poll)
        self.sleep_calls = 0

    def __repr__(self) -> str:
        return f"VirtualClock(now={self._now.isoformat()!r}, sleepers={self.sleepers})"

    def now(self) -> datetime:
        return self._now

    @property
    def sleepers(self) -> int:
        """How many callers are parked in :meth:`sleep_until` right now."""
        return sum(1 for _, _, ev in self._sleepers if not ev.is_set())

    async def sleep_until(self, deadline: datetime) -> None:
        self.sleep_calls += 1
        if deadline <= self._now:
            await anyio.lowlevel.checkpoint()
            return
        event = anyio.Event()
        entry = (deadline, next(self._seq), event)
        heapq.heappush(self._sleepers, entry)
        try:
            await event.wait()
        finally:
            if not event.is_set():  # cancelled: forget the entry so it is not counted
                event.set()

    async def sleep(self, seconds: float) -> None:
        await self.sleep_until(self._now + timedelta(seconds=seconds))

    async def advance(self, seconds: float) -> None:
        """Move time forward step by step, waking each sleeper at its own deadline.

        After each wake-up every task is allowed to run until it blocks again, so work the
        sleeper starts (and the sleeps it schedules inside the window) happens in order.
        """
        await self.advance_to(self._now + timedelta(seconds=seconds))

    async def advance_to(self, target: datetime) -> None:
        """:meth:`advance` to an absolute time; moving backwards is an error."""
        if target < self._now:
            raise ValueError(f"cannot move a clock back from {self._now} to {target}")
        await _settle()
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, event = heapq.heappop(self._sleepers)
            if event.is_set():
                continue
            self._now = max(self._now, deadline)
            event.set()
            await _settle()
        self._now = target
        await _settle()

    async def jump(self, seconds: float) -> None:
        """Move time forward at once, as a stalled or suspended process sees it.

        Every sleeper due by then wakes at the new time, late: this is how tests produce
        missed fires.
        """
        self._now += timedelta(seconds=seconds)
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, event = heapq.heappop(self._sleepers)
            event.set()
        await _settle()


async def call_before(
    clock: Clock, deadline: datetime, fn: Callable[[], Awaitable[T]]
) -> tuple[bool, T | None]:
    """Await ``fn()`` but give up at ``deadline`` by ``clock`` (anyio's own timeouts read the
    event loop's time, which a virtual clock does not move).

    :return: ``(True, result)``, or ``(False, None)`` if the deadline came first; exceptions
        from ``fn`` propagate unwrapped
    """
    done = False
    result: T | None = None
    error: Exception | None = None
    async with anyio.create_task_group() as tg:

        async def guard() -> None:
            await clock.sleep_until(deadline)
            tg.cancel_scope.cancel()

        tg.start_soon(guard)
        try:
            result = await fn()
            done = True
        except Exception as exc:  # re-raised below, outside the task group (no group)
            error = exc
        finally:
            tg.cancel_scope.cancel()
    if error is not None:
        raise error
    return done, result


async def _settle() -> None:
    """Return once every other task is blocked: the work a wake-up started has settled.

    anyio's asyncio ``wait_all_tasks_blocked`` sleeps 0.1 s whenever a task is runnable, which
    would make each virtual second cost a tenth of a real one; this checks the same condition
    between zero-length sleeps instead. Other backends use anyio's (trio's is exact and fast).
    """
    if not _on_asyncio():
        await anyio.wait_all_tasks_blocked()
        return
    import asyncio

    this = asyncio.current_task()
    loop = asyncio.get_running_loop()
    for _ in range(100_000):
        await asyncio.sleep(0)
        if loop._ready:  # type: ignore[attr-defined]
            continue  # callbacks about to run: a wake-up, or a cancellation being delivered
        for task in asyncio.all_tasks():
            if task is this:
                continue
            waiter = task._fut_waiter  # type: ignore[attr-defined]
            if waiter is None or waiter.done():
                break
        else:
            return
    await anyio.wait_all_tasks_blocked()


def _on_asyncio() -> bool:
    """Whether asyncio runs this task (sniffio's own test; sniffio is not a dependency)."""
    aio = sys.modules.get("asyncio")  # never imported: not asyncio
    return aio is not None and aio._get_running_loop() is not None
