"""The background settler outlives a lock whose settle() raises (virtual clock): the error is
logged and the settle tried again, and the scheduler keeps firing (review finding 1)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import anyio
import pytest

from scheduler import LocalLock, MemoryRunStore, RunContext, Scheduler, VirtualClock
from tests.scheduler.helpers import T0, at


class SettleRaisesOnce(LocalLock):
    """Its first acquire gets no answer; its first settle() then raises (a bug in a lock,
    or one of a third party's), the next ones report nothing left."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(clock.now)
        self.clock = clock
        self.unanswered = True
        self.settles: list[datetime] = []

    async def acquire(self, name: str, *, ttl: float) -> Any:
        if self.unanswered:
            self.unanswered = False
            raise TimeoutError("Timeout reading from redis")
        return await super().acquire(name, ttl=ttl)

    async def settle(self) -> int:
        self.settles.append(self.clock.now())
        if len(self.settles) == 1:
            raise KeyError(("scheduler:lock:tick", b"a#1"))
        return 0


async def test_a_settle_that_raises_is_logged_and_tried_again_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = VirtualClock(T0)
    lock = SettleRaisesOnce(clock)
    runs = MemoryRunStore()
    sched = Scheduler(clock=clock, lock=lock, runs=runs)

    @sched.interval(seconds=10, name="tick")
    async def tick(run: RunContext) -> None:
        pass

    with caplog.at_level(logging.ERROR, logger="scheduler"), anyio.fail_after(5):
        async with sched:
            await clock.advance(35)
    assert lock.settles == [at(10), at(10.1)]
    got = sorted((r.scheduled_at, r.status) for r in await runs.query())
    assert got == [
        (at(10), "skipped"),
        (at(20), "succeeded"),
        (at(30), "succeeded"),
    ]
    assert any("could not settle" in r.getMessage() for r in caplog.records)
