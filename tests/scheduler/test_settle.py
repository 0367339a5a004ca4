"""The scheduler settles a lock after a lock call whose outcome is unknown, in the background,
until the lock reports nothing left (virtual clock; the real-Redis case is in
test_locks_redis_stall.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import anyio

from scheduler import LocalLock, MemoryRunStore, RunContext, Scheduler, VirtualClock
from tests.scheduler.helpers import T0, at


class UnansweredOnce(LocalLock):
    """Its first acquire gets no answer; settling then takes three calls (the backend comes
    back on the third)."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(clock.now)
        self.clock = clock
        self.unanswered = True
        self.left = 0
        self.settles: list[datetime] = []

    async def acquire(self, name: str, *, ttl: float) -> Any:
        if self.unanswered:
            self.unanswered, self.left = False, 3
            raise TimeoutError("Timeout reading from redis")
        return await super().acquire(name, ttl=ttl)

    async def settle(self) -> int:
        self.settles.append(self.clock.now())
        self.left -= 1
        return self.left


async def test_a_lock_error_is_settled_in_the_background_until_nothing_is_left() -> None:
    clock = VirtualClock(T0)
    lock = UnansweredOnce(clock)
    runs = MemoryRunStore()
    sched = Scheduler(clock=clock, lock=lock, runs=runs)

    @sched.interval(seconds=10, name="tick")
    async def tick(run: RunContext) -> None:
        pass

    with anyio.fail_after(5):
        async with sched:
            await clock.advance(5)
            assert lock.settles == []  # nothing unsure, nothing to settle
            await clock.advance(15)
    assert lock.settles == [at(10), at(10.1), at(10.2)]  # every 0.1 s until it reports 0
    got = sorted(
        (r.scheduled_at, r.status, (r.error or "").split(":")[0]) for r in await runs.query()
    )
    assert got == [(at(10), "skipped", "lock-error"), (at(20), "succeeded", "")]
