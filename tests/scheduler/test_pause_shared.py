"""Pause and resume across replicas (review finding 3 and minor a), on the virtual clock.

A job written in code is paused in the run store when it can keep the state (every replica
that shares the store sees it; a SQL one keeps it across a restart, see
backends/test_pause_sql.py); with nothing shared the pause holds in the process, and
``pause_scope`` says so. A paused fire is recorded once across replicas, by the one that
wins its claim.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from scheduler import (
    JobDefinition,
    LocalLock,
    MemoryRunStore,
    RunContext,
    RunRecord,
    Scheduler,
    VirtualClock,
)
from scheduler._jobs import JobFunction
from scheduler.backends.local import MemoryJobStore

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def replicas(
    clock: VirtualClock, runs: MemoryRunStore, ran: list[tuple[str, datetime]]
) -> list[Scheduler]:
    lock = LocalLock(clock.now)
    out = []
    for name in ("a", "b", "c"):
        sched = Scheduler(clock=clock, lock=lock, runs=runs, replica=name)

        async def flush(run: RunContext, replica: str = name) -> None:
            assert run.scheduled_at is not None
            ran.append((replica, run.scheduled_at))

        sched.add_cron("flush", "0 * * * * *", flush)
        out.append(sched)
    return out


def per_fire(records: list[RunRecord]) -> dict[datetime, Counter[str]]:
    """Per scheduled fire, how many records of each status (a skip: of each reason)."""
    fires: dict[datetime, Counter[str]] = {}
    for r in records:
        assert r.scheduled_at is not None
        fires.setdefault(r.scheduled_at, Counter())[(r.error or r.status).split(":")[0]] += 1
    return fires


async def test_pausing_a_code_job_on_one_replica_pauses_it_on_every_replica(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Regression test: the pause (the console's button) flipped a flag in one process; the
    other replicas went on running the job."""
    clock = VirtualClock(T0)
    runs = MemoryRunStore()
    ran: list[tuple[str, datetime]] = []
    reps = replicas(clock, runs, ran)
    with caplog.at_level(logging.INFO, logger="scheduler"), anyio.fail_after(10):
        async with reps[0], reps[1], reps[2]:
            await reps[0].pause("flush")  # the console's request landed on replica a
            assert [await s.is_paused(s.get("flush")) for s in reps] == [True] * 3
            await clock.advance(3 * 60)
            assert ran == []
            await reps[2].resume("flush")  # and the resume on replica c
            await clock.advance(60)
    assert [t for _, t in ran] == [at(4)]  # once, by whichever replica claimed it
    fires = per_fire(await runs.query(limit=None))
    for minute in (1, 2, 3):  # one 'paused' record per fire; the others lost the claim
        assert fires[at(minute)] == Counter({"paused": 1, "claimed": 2})
    paused_lines = [r for r in caplog.records if "skipped a fire (paused" in r.getMessage()]
    assert len(paused_lines) == 3


async def test_a_paused_table_job_is_recorded_once_per_fire_across_replicas() -> None:
    """Regression test (minor a): each replica wrote its own 'paused' skip for every fire
    of a paused job from the job table (three records, three INFO lines per fire)."""
    clock = VirtualClock(T0)
    lock = LocalLock(clock.now)
    runs = MemoryRunStore()
    table = MemoryJobStore([JobDefinition(name="reminder:1", expr="0 * * * * *", paused=True)])
    ran: list[datetime | None] = []

    def factory(definition: JobDefinition) -> JobFunction:
        async def remind(run: RunContext) -> None:
            ran.append(run.scheduled_at)

        return remind

    reps = [
        Scheduler(
            clock=clock,
            lock=lock,
            runs=runs,
            replica=r,
            job_source=table,
            job_factory=factory,
        )
        for r in "abc"
    ]
    with anyio.fail_after(10):
        async with reps[0], reps[1], reps[2]:
            await clock.advance(3 * 60)
    assert ran == []
    fires = per_fire(await runs.query(task_name="reminder:1", limit=None))
    assert sorted(fires) == [at(1), at(2), at(3)]
    assert all(c == Counter({"paused": 1, "claimed": 2}) for c in fires.values()), fires


async def test_without_a_shared_store_the_pause_holds_in_its_process_and_says_so() -> None:
    clock = VirtualClock(T0)
    ran: list[tuple[str, datetime]] = []
    a, b = (
        Scheduler(clock=clock, lock=LocalLock(clock.now), runs=MemoryRunStore(), replica=r)
        for r in "ab"
    )
    for sched in (a, b):

        async def flush(run: RunContext, replica: str = sched.replica) -> None:
            assert run.scheduled_at is not None
            ran.append((replica, run.scheduled_at))

        sched.add_cron("flush", "0 * * * * *", flush)
    assert a.pause_scope("flush") == "process"
    with anyio.fail_after(10):
        async with a, b:
            await a.pause("flush")
            await clock.advance(60)
    assert ran == [("b", at(1))]  # b shares nothing with a: as documented


async def test_where_the_paused_state_is_kept() -> None:
    table = MemoryJobStore([JobDefinition(name="reminder:1", expr="0 * * * * *")])
    sched = Scheduler(runs=MemoryRunStore(), job_source=table, job_factory=lambda d: _noop)
    await sched.load_jobs(table, lambda d: _noop)
    sched.add_cron("flush", "0 * * * * *", _noop)
    assert sched.pause_scope("reminder:1") == "job table"
    assert sched.pause_scope("flush") == "process"  # a MemoryRunStore lives in this process


async def _noop(run: RunContext) -> None:
    pass
