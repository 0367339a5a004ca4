"""Pause and resume (issue 15, item 1): a paused job keeps its schedule, its fires are
recorded as skipped (``paused``), and resuming does not replay them. Jobs from the job table
keep the state in the table, so every replica and a restart see it."""

from __future__ import annotations

from datetime import datetime

import anyio
import pytest

from eventbus import EventBus, EventRegistry
from scheduler import (
    JobLookupError,
    MemoryRunStore,
    RunContext,
    RunSkipped,
    Scheduler,
    VirtualClock,
)
from tests.scheduler.helpers import T0, at


async def history(runs: MemoryRunStore, name: str) -> list[tuple[datetime | None, str, str]]:
    records = await runs.query(task_name=name, limit=None)
    rows = [(r.scheduled_at, r.status, (r.error or "").split(":")[0]) for r in records]
    return sorted(rows, key=lambda row: row[0] or T0)


async def test_a_paused_job_skips_its_fires_and_resuming_does_not_replay_them() -> None:
    reg = EventRegistry()
    bus = EventBus(registry=reg)
    clock = VirtualClock(T0)
    runs = MemoryRunStore()
    sched = Scheduler(clock=clock, runs=runs, bus=bus)
    skipped: list[RunSkipped] = []
    bus.on(RunSkipped)(skipped.append)
    ran: list[datetime | None] = []

    @sched.interval(seconds=10, name="tick")
    async def tick(run: RunContext) -> None:
        ran.append(run.scheduled_at)

    with anyio.fail_after(5):
        async with sched:
            await clock.advance(10)
            await sched.pause("tick")
            assert sched.get("tick").paused
            assert sched.next_fire_times("tick", 2) == [at(20), at(30)]  # keeps its schedule
            await clock.advance(20)
            await sched.resume("tick")
            await clock.advance(10)
    assert ran == [at(10), at(40)]
    assert await history(runs, "tick") == [
        (at(10), "succeeded", ""),
        (at(20), "skipped", "paused"),
        (at(30), "skipped", "paused"),
        (at(40), "succeeded", ""),
    ]
    assert [e.reason for e in skipped] == ["paused", "paused"]
    assert sched.statistics().skipped == 2


async def test_a_paused_job_still_runs_when_triggered_by_hand() -> None:
    sched = Scheduler(clock=VirtualClock(T0))

    @sched.interval(seconds=10, name="tick")
    async def tick(run: RunContext) -> None:
        pass

    await sched.pause("tick")
    rec = await sched.trigger("tick")
    assert (rec.trigger, rec.status) == ("manual", "succeeded")


async def test_pause_and_resume_of_an_unknown_job_raise_lookup_error() -> None:
    sched = Scheduler(clock=VirtualClock(T0))
    with pytest.raises(JobLookupError, match="no job named 'ghost'"):
        await sched.pause("ghost")
    with pytest.raises(JobLookupError, match="no job named 'ghost'"):
        await sched.resume("ghost")
