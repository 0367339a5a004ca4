"""Jobs kept as rows (user reminders): loaded at start, and again after a restart."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from scheduler import JobDefinition, LocalLock, RunContext, Scheduler, VirtualClock
from scheduler.backends.sql import SqlJobStore, SqlRunStore, create_tables, make_engine

T0 = datetime(2024, 1, 1, tzinfo=UTC)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'app.db'}")
    await create_tables(engine)
    yield engine
    await engine.dispose()


async def test_reminders_load_at_start_and_again_after_a_restart(engine: AsyncEngine) -> None:
    table = SqlJobStore(engine)
    await table.put(JobDefinition(name="reminder:1", expr="0 */5 * * * *", payload='{"u": 1}'))
    await table.put(JobDefinition(name="reminder:2", expr="0 0 9 * * *", tz="Asia/Shanghai"))
    await table.put(JobDefinition(name="reminder:3", expr="0 * * * * *", enabled=False))
    await table.put(JobDefinition(name="reminder:4", expr="* * * * * *"))  # too frequent
    fired: list[tuple[str, str | None]] = []

    def factory(definition: JobDefinition) -> Callable[[RunContext], Awaitable[None]]:
        async def remind(run: RunContext) -> None:
            fired.append((run.name, definition.payload))

        return remind

    clock = VirtualClock(T0)
    runs = SqlRunStore(engine)

    def build() -> Scheduler:
        return Scheduler(clock=clock, runs=runs, job_source=table, job_factory=factory)

    first = build()
    with anyio.fail_after(10):
        async with first:
            assert [j.name for j in first.jobs()] == ["reminder:1", "reminder:2"]
            await clock.advance(300)
            await first.wait_idle()
    assert fired == [("reminder:1", '{"u": 1}')]
    # The process restarts: a fresh scheduler re-registers the same jobs from the table.
    await table.put(JobDefinition(name="reminder:1", expr="0 */10 * * * *", payload='{"u": 1}'))
    second = build()
    with anyio.fail_after(10):
        async with second:
            assert [j.name for j in second.jobs()] == ["reminder:1", "reminder:2"]
            await clock.advance(600)  # now at 00:15; the edited job fires at 00:10 only
            await second.wait_idle()
    assert fired == [("reminder:1", '{"u": 1}')] * 2
    names = [r.task_name for r in await runs.query()]
    assert names == ["reminder:1", "reminder:1"]


async def test_job_table_put_replaces_and_delete_removes(engine: AsyncEngine) -> None:
    table = SqlJobStore(engine)
    await table.put(JobDefinition(name="a", expr="0 0 * * * *"))
    await table.put(JobDefinition(name="a", expr="0 30 * * * *", enabled=False))
    assert await table.load() == [JobDefinition(name="a", expr="0 30 * * * *", enabled=False)]
    assert await table.delete("a") is True
    assert await table.delete("a") is False
    assert await table.load() == []


async def test_loaded_job_fires_in_its_time_zone(engine: AsyncEngine) -> None:
    table = SqlJobStore(engine)
    await table.put(JobDefinition(name="r", expr="0 0 9 * * *", tz="Asia/Shanghai"))
    sched = Scheduler(clock=VirtualClock(T0), runs=SqlRunStore(engine))

    async def remind(run: RunContext) -> None:
        pass

    assert await sched.load_jobs(table, lambda d: remind) == ["r"]
    job = sched.get("r")
    assert job.trigger.first(T0) == T0 + timedelta(hours=1)  # 09:00 +08:00 is 01:00 UTC


async def test_a_paused_table_job_is_skipped_by_every_replica_and_after_a_restart(
    engine: AsyncEngine,
) -> None:
    table = SqlJobStore(engine)
    await table.put(JobDefinition(name="reminder:1", expr="0 * * * * *"))
    clock = VirtualClock(T0)
    lock = LocalLock(clock.now)
    runs = SqlRunStore(engine)
    ran: list[datetime | None] = []

    def factory(definition: JobDefinition) -> Callable[[RunContext], Awaitable[None]]:
        async def remind(run: RunContext) -> None:
            ran.append(run.scheduled_at)

        return remind

    def replica(name: str) -> Scheduler:
        source = SqlJobStore(engine)  # each replica reads the table on its own
        return Scheduler(
            clock=clock, runs=runs, lock=lock, replica=name, job_source=source, job_factory=factory
        )

    async def step(replicas: list[Scheduler]) -> None:
        await clock.advance(60)
        for sched in replicas:
            await sched.wait_idle()

    a, b, c = replicas = [replica("a"), replica("b"), replica("c")]
    with anyio.fail_after(20):
        async with a, b, c:
            await step(replicas)  # 00:01 runs once
            await a.pause("reminder:1")  # written to the table
            await step(replicas)  # 00:02 skipped by all three
            assert all(s.get("reminder:1").paused for s in replicas)
            await table.set_paused("reminder:1", False)  # as the CLI does, in the table only
            await step(replicas)  # 00:03 runs once
            await table.set_paused("reminder:1", True)
        restarted = replica("d")
        async with restarted:
            assert restarted.get("reminder:1").paused
            await step([restarted])  # 00:04 skipped
    assert ran == [T0 + timedelta(minutes=1), T0 + timedelta(minutes=3)]
    paused = sorted(
        (r.scheduled_at, r.replica)
        for r in await runs.query(limit=None)
        if (r.error or "").startswith("paused:")
    )
    two, four = T0 + timedelta(minutes=2), T0 + timedelta(minutes=4)
    assert paused == [(two, "a"), (two, "b"), (two, "c"), (four, "d")]
