"""Jobs kept as data (user reminders): one conformance suite for the JobStore Protocol, over
MemoryJobStore and SqlJobStore (SQLite and PostgreSQL), and the scheduler loading them at start
and again after a restart."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from scheduler import (
    JobDefinition,
    LocalLock,
    MemoryJobStore,
    MemoryRunStore,
    RunContext,
    Scheduler,
    VirtualClock,
)
from scheduler.abc import JobStore, RunStore
from scheduler.backends.sql import SqlJobStore, SqlRunStore, create_tables, make_engine

T0 = datetime(2024, 1, 1, tzinfo=UTC)


class Stores:
    """One database's job table and run table, and more job stores on it (a replica each)."""

    def __init__(self, table: JobStore, runs: RunStore, more: Callable[[], JobStore]) -> None:
        self.table = table
        self.runs = runs
        self.more = more


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stores]:
    """Every JobStore: the memory one (shared by the replicas of one process, as a table is),
    and the SQL one on a SQLite file and on the session's PostgreSQL (emptied for each test)."""
    if request.param == "memory":
        table = MemoryJobStore()
        yield Stores(table, MemoryRunStore(), lambda: table)
        return
    url = (
        tmp_path / "app.db"
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    engine = make_engine(url)
    await create_tables(engine)
    yield Stores(SqlJobStore(engine), SqlRunStore(engine), lambda: SqlJobStore(engine))
    await engine.dispose()


async def test_stores_fit_the_protocol(stores: Stores) -> None:
    _: JobStore = stores.table
    assert isinstance(stores.table, JobStore)


async def test_reminders_load_at_start_and_again_after_a_restart(stores: Stores) -> None:
    table = stores.table
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
    runs = stores.runs

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


async def test_job_table_put_replaces_and_delete_removes(stores: Stores) -> None:
    table = stores.table
    await table.put(JobDefinition(name="a", expr="0 0 * * * *"))
    await table.put(JobDefinition(name="a", expr="0 30 * * * *", enabled=False))
    assert await table.load() == [JobDefinition(name="a", expr="0 30 * * * *", enabled=False)]
    assert await table.delete("a") is True
    assert await table.delete("a") is False
    assert await table.load() == []


async def test_loaded_job_fires_in_its_time_zone(stores: Stores) -> None:
    table = stores.table
    await table.put(JobDefinition(name="r", expr="0 0 9 * * *", tz="Asia/Shanghai"))
    sched = Scheduler(clock=VirtualClock(T0), runs=stores.runs)

    async def remind(run: RunContext) -> None:
        pass

    assert await sched.load_jobs(table, lambda d: remind) == ["r"]
    job = sched.get("r")
    assert job.trigger.first(T0) == T0 + timedelta(hours=1)  # 09:00 +08:00 is 01:00 UTC


async def test_a_paused_table_job_is_skipped_by_every_replica_and_after_a_restart(
    stores: Stores,
) -> None:
    table = stores.table
    await table.put(JobDefinition(name="reminder:1", expr="0 * * * * *"))
    clock = VirtualClock(T0)
    lock = LocalLock(clock.now)
    runs = stores.runs
    ran: list[datetime | None] = []

    def factory(definition: JobDefinition) -> Callable[[RunContext], Awaitable[None]]:
        async def remind(run: RunContext) -> None:
            ran.append(run.scheduled_at)

        return remind

    def replica(name: str) -> Scheduler:
        source = stores.more()  # each replica reads the table on its own
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
    # one record per fire: the replica that claims it (the others record a 'claimed' skip)
    assert [fire for fire, _ in paused] == [two, four]
    assert paused[1] == (four, "d")


async def test_load_lists_every_definition_by_name_enabled_or_not(stores: Stores) -> None:
    table = stores.table
    assert await table.load() == []
    b = JobDefinition(name="b", expr="0 0 * * * *", tz="Europe/Paris", payload='{"x": 1}')
    a = JobDefinition(name="a", expr="0 30 * * * *", enabled=False, paused=True)
    await table.put(b)
    await table.put(a)
    assert await table.load() == [a, b]
    assert await stores.more().load() == [a, b]  # another reader of the same table


async def test_the_paused_state_is_kept_with_the_definition(stores: Stores) -> None:
    table = stores.table
    assert await table.is_paused("r") is None
    assert await table.set_paused("r", True) is False  # no such definition: nothing stored
    await table.put(JobDefinition(name="r", expr="0 * * * * *"))
    assert await table.is_paused("r") is False
    assert await table.set_paused("r", True) is True
    assert await stores.more().is_paused("r") is True
    [loaded] = await table.load()
    assert loaded.paused
    await table.put(JobDefinition(name="r", expr="0 */2 * * * *"))  # replaced, paused=False
    assert await table.is_paused("r") is False
