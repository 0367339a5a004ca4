"""The paused state of a job written in code, kept by SqlRunStore (review finding 3): three
replicas, each with its own store on one SQLite file or PostgreSQL database (as processes
would have), see a pause made on one of them, and a restart still sees it."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from scheduler import LocalLock, RunContext, Scheduler, VirtualClock
from scheduler.backends.sql import SqlRunStore

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'runs.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


class Replica:
    """One 'process': its own store on the shared database, its own scheduler."""

    def __init__(self, db_url: str, clock: VirtualClock, lock: LocalLock, name: str) -> None:
        self.runs = SqlRunStore.from_url(db_url)
        self.sched = Scheduler(clock=clock, lock=lock, runs=self.runs, replica=name)
        self.ran: list[datetime] = []
        self.sched.add_cron("flush", "0 * * * * *", self.flush)

    async def flush(self, run: RunContext) -> None:
        assert run.scheduled_at is not None
        self.ran.append(run.scheduled_at)


async def step(clock: VirtualClock, reps: list[Replica], minutes: int) -> None:
    for _ in range(minutes):
        await clock.advance(60)
        for r in reps:
            await r.sched.wait_idle()


async def test_a_pause_on_one_replica_holds_on_every_replica_and_after_a_restart(
    db_url: str,
) -> None:
    clock = VirtualClock(T0)
    lock = LocalLock(clock.now)
    reps = [Replica(db_url, clock, lock, name) for name in "abc"]
    try:
        assert reps[0].sched.pause_scope("flush") == "run table"
        with anyio.fail_after(30):
            async with reps[0].sched, reps[1].sched, reps[2].sched:
                await reps[1].sched.pause("flush")
                await step(clock, reps, 2)
        assert [r.ran for r in reps] == [[], [], []]
    finally:
        for r in reps:
            await r.runs.aclose()

    restarted = Replica(db_url, VirtualClock(at(2.5)), LocalLock(), "d")
    try:
        assert await restarted.sched.is_paused(restarted.sched.get("flush"))
        with anyio.fail_after(30):
            async with restarted.sched:
                clock = restarted.sched.clock  # type: ignore[assignment]
                await step(clock, [restarted], 1)
                await restarted.sched.resume("flush")
                await step(clock, [restarted], 1)
        assert restarted.ran == [at(4)]
        records = await restarted.runs.query(task_name="flush", limit=None)
    finally:
        await restarted.runs.aclose()
    reasons = Counter(
        (r.scheduled_at, (r.error or r.status).split(":")[0]) for r in records if r.scheduled_at
    )
    assert reasons == Counter(
        {
            (at(1), "paused"): 1,
            (at(1), "claimed"): 2,
            (at(2), "paused"): 1,
            (at(2), "claimed"): 2,
            (at(3), "paused"): 1,
            (at(4), "succeeded"): 1,
        }
    )


async def test_pausing_twice_and_resuming_a_job_not_paused_are_harmless(db_url: str) -> None:
    async with SqlRunStore.from_url(db_url) as runs:
        assert await runs.job_paused("flush") is False
        await runs.set_job_paused("flush", True)
        await runs.set_job_paused("flush", True)
        assert await runs.job_paused("flush") is True
        assert await runs.job_paused("other") is False
        await runs.set_job_paused("flush", False)
        await runs.set_job_paused("flush", False)
        assert await runs.job_paused("flush") is False
