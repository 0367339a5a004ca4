"""Catch-up after downtime (issue 15, item 2): the plan as a pure function, then the loop on
virtual time across a restart that shares the run table."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest

from scheduler import CronExpression, LocalLock, MemoryRunStore, RunContext, Scheduler, VirtualClock
from scheduler._core._catch_up import COUNT_CAP, latest_between, needs_catch_up, plan_catch_up
from scheduler._jobs import Job
from scheduler._triggers import AtTrigger, CronTrigger, IntervalTrigger, TimeoutTrigger
from scheduler.abc import RunStore

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


async def noop(run: RunContext) -> None:
    pass


def job(trigger: Any, **options: Any) -> Job:
    return Job(name="j", fn=noop, trigger=trigger, **options)


EVERY_MINUTE = CronTrigger(CronExpression("0 * * * * *"))


# -- the plan ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("catch_up", "last", "run"),
    [
        pytest.param("skip", at(2), [], id="skip"),
        pytest.param("latest", at(2), [at(7)], id="latest"),
        pytest.param("all", at(2), [at(3), at(4), at(5), at(6), at(7)], id="all"),
        pytest.param("all", at(7), [], id="nothing-missed"),
        pytest.param("all", None, [], id="never-ran-before"),
        pytest.param("latest", None, [], id="never-ran-before-latest"),
    ],
)
def test_plan_for_a_periodic_job(catch_up: str, last: datetime | None, run: list[datetime]) -> None:
    plan = plan_catch_up(job(EVERY_MINUTE, catch_up=catch_up), last, at(7.5))
    assert (plan.run, plan.skip_at) == (run, None)


def test_plan_all_runs_the_first_max_catch_up_and_records_the_rest_at_the_newest() -> None:
    plan = plan_catch_up(job(EVERY_MINUTE, catch_up="all", max_catch_up=3), at(0), at(60))
    assert plan.run == [at(1), at(2), at(3)]
    assert plan.skip_at == at(60)
    assert plan.detail == (
        f"57 more fires from {at(4).isoformat()} to {at(60).isoformat()} were missed while no "
        "replica was up, beyond max_catch_up=3 (the 3 before them ran)"
    )


def test_plan_counts_at_most_count_cap_missed_fires() -> None:
    every_second = CronTrigger(CronExpression("* * * * * *"))
    plan = plan_catch_up(job(every_second, catch_up="all"), at(0), at(60 * 24 * 7))
    assert len(plan.run) == 10 and plan.skip_at == at(60 * 24 * 7)
    assert f"at least {COUNT_CAP:,} more fires" in plan.detail


def test_plan_for_an_interval_stays_on_its_grid() -> None:
    every_90s = IntervalTrigger(90)
    plan = plan_catch_up(job(every_90s, catch_up="all"), at(0), at(6))
    assert plan.run == [at(1.5), at(3), at(4.5), at(6)]
    assert plan_catch_up(job(every_90s, catch_up="latest"), at(0), at(5.9)).run == [at(4.5)]


def test_latest_between_is_cheap_over_a_long_gap() -> None:
    yearly = job(CronTrigger(CronExpression("0 0 0 1 1 *")))
    newest = latest_between(yearly, T0, T0 + timedelta(days=3 * 365))
    assert newest == datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("catch_up", "last", "run", "skip_at"),
    [
        pytest.param("skip", None, [], at(5), id="skip-records-it-missed"),
        pytest.param("latest", None, [at(5)], None, id="latest-runs-it"),
        pytest.param("all", None, [at(5)], None, id="all-runs-it"),
        pytest.param("all", at(5), [], None, id="already-recorded"),
    ],
)
def test_plan_for_a_one_shot_whose_instant_passed(
    catch_up: str, last: datetime | None, run: list[datetime], skip_at: datetime | None
) -> None:
    plan = plan_catch_up(job(AtTrigger(at(5)), catch_up=catch_up), last, at(10))
    assert (plan.run, plan.skip_at) == (run, skip_at)


def test_which_jobs_read_the_run_table_at_start() -> None:
    assert not needs_catch_up(job(EVERY_MINUTE), at(10))  # skip: nothing to read
    assert needs_catch_up(job(EVERY_MINUTE, catch_up="latest"), at(10))
    assert not needs_catch_up(job(TimeoutTrigger(5), catch_up="all"), at(10))  # from start
    assert needs_catch_up(job(AtTrigger(at(5))), at(10))  # past: at most once, by the table
    assert not needs_catch_up(job(AtTrigger(at(15))), at(10))  # the loop fires it


# -- the loop, across a restart ---------------------------------------------------------------


async def run_for(
    runs: RunStore, start: datetime, minutes: float, ran: list[datetime], **options: Any
) -> Scheduler:
    """One 'process': a scheduler on its own clock from ``start``, for ``minutes``."""
    clock = VirtualClock(start)
    sched = Scheduler(clock=clock, runs=runs)

    @sched.cron("0 * * * * *", name="report", **options)
    async def report(run: RunContext) -> None:
        assert run.scheduled_at is not None
        ran.append(run.scheduled_at)

    with anyio.fail_after(10):
        async with sched:
            await sched.wait_idle()
            await clock.advance(minutes * 60)
            await sched.wait_idle()
    return sched


@pytest.mark.parametrize(
    ("catch_up", "caught_up"),
    [
        pytest.param("skip", [], id="skip"),
        pytest.param("latest", [at(12)], id="latest"),
        pytest.param("all", [at(m) for m in range(4, 13)], id="all"),
    ],
)
async def test_a_restart_after_downtime_catches_up_by_policy(
    catch_up: str, caught_up: list[datetime]
) -> None:
    runs = MemoryRunStore()
    ran: list[datetime] = []
    await run_for(runs, T0, 3.5, ran)  # up until 00:03:30, then down until 00:12:30
    assert ran == [at(1), at(2), at(3)]
    ran.clear()
    await run_for(runs, at(12.5), 1, ran, catch_up=catch_up)
    assert ran == [*caught_up, at(13)]
    records = await runs.query(task_name="report", limit=None)
    assert {r.trigger for r in records} == {"cron"}


async def test_more_missed_fires_than_max_catch_up_are_skipped_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runs = MemoryRunStore()
    ran: list[datetime] = []
    await run_for(runs, T0, 1.5, ran)
    ran.clear()
    with caplog.at_level(logging.WARNING, logger="scheduler"):
        await run_for(runs, at(30.5), 0, ran, catch_up="all", max_catch_up=3)
    assert ran == [at(2), at(3), at(4)]
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "26 more fires" in warning.getMessage() and "max_catch_up=3" in warning.getMessage()
    [skip] = await runs.query(status="skipped", limit=None)
    assert skip.scheduled_at == at(30) and (skip.error or "").startswith("missed: 26 more fires")
    # the next restart starts after the recorded skip: nothing is caught up twice
    ran.clear()
    await run_for(runs, at(30.75), 0, ran, catch_up="all", max_catch_up=3)
    assert ran == []


async def test_a_paused_job_records_its_missed_fires_as_paused() -> None:
    runs = MemoryRunStore()
    ran: list[datetime] = []
    await run_for(runs, T0, 1.5, ran)
    clock = VirtualClock(at(3.5))
    sched = Scheduler(clock=clock, runs=runs)
    sched.add_cron("report", "0 * * * * *", noop, catch_up="all")
    await sched.pause("report")
    with anyio.fail_after(5):
        async with sched:
            await sched.wait_idle()
    paused = [(r.scheduled_at, r.status) for r in await runs.query(task_name="report")]
    assert sorted(paused, key=lambda p: p[0] or T0)[-2:] == [
        (at(2), "skipped"),
        (at(3), "skipped"),
    ]


async def test_a_one_shot_missed_while_down_runs_once_across_restarts() -> None:
    runs = MemoryRunStore()
    ran: list[datetime | None] = []

    async def remind(run: RunContext) -> None:
        ran.append(run.scheduled_at)

    for _ in range(2):  # two starts after the instant: it runs at the first only
        sched = Scheduler(clock=VirtualClock(at(10)), runs=runs)
        sched.add_at("reminder:1", at(5), remind, catch_up="latest")
        with anyio.fail_after(5):
            async with sched:
                await sched.wait_idle()
    assert ran == [at(5)]
    [rec] = await runs.query()
    assert (rec.trigger, rec.status, rec.scheduled_at) == ("at", "succeeded", at(5))


async def test_a_one_shot_added_while_running_for_an_instant_just_past_is_not_lost() -> None:
    clock = VirtualClock(at(10))
    runs = MemoryRunStore()
    sched = Scheduler(clock=clock, runs=runs)
    with anyio.fail_after(5):
        async with sched:
            sched.add_at("late", at(9.9), noop)  # default catch_up='skip': recorded, WARNING
            sched.add_at("later", at(9.9), noop, catch_up="latest")  # run now
            await sched.wait_idle()
    got = {r.task_name: (r.status, (r.error or "").split(":")[0]) for r in await runs.query()}
    assert got == {"late": ("skipped", "missed"), "later": ("succeeded", "")}


async def test_replicas_starting_together_catch_up_each_missed_fire_once() -> None:
    runs = MemoryRunStore()
    ran: list[datetime] = []
    await run_for(runs, T0, 1.5, ran)
    ran.clear()
    clock = VirtualClock(at(6.5))
    lock = LocalLock(clock.now)
    replicas = [
        Scheduler(clock=clock, runs=runs, lock=lock, replica=name) for name in ("a", "b", "c")
    ]
    for sched in replicas:

        @sched.cron("0 * * * * *", name="report", catch_up="all", lock_ttl=30)
        async def report(run: RunContext) -> None:
            assert run.scheduled_at is not None
            ran.append(run.scheduled_at)
            await clock.sleep(1)  # runs take time: others must not skip fires as 'locked'

    with anyio.fail_after(10):
        async with replicas[0], replicas[1], replicas[2]:
            await clock.advance(10)  # memory and a local lock: nothing the clock cannot see
    assert ran == [at(2), at(3), at(4), at(5), at(6)]
    reasons = {(r.error or "").split(":")[0] for r in await runs.query(status="skipped")}
    assert reasons <= {"claimed"}  # never 'locked': a missed fire waits for the lock


async def test_replicas_catching_up_runs_longer_than_the_claims_run_each_fire_once() -> None:
    """Regression test (review finding 2): ten missed fires, each run taking 100 s, with the
    default lock_ttl (300 s). The backlog outlasted the per-fire claims; a replica that kept
    waiting for the lock then took an older fire whose claim had expired, and ran it again."""
    runs = MemoryRunStore()
    ran: list[datetime] = []
    await run_for(runs, T0, 1.5, ran)  # the job last fired at 00:01
    ran.clear()
    clock = VirtualClock(at(11.5))  # down until 00:11:30: 00:02 to 00:11 missed
    lock = LocalLock(clock.now)
    who: list[tuple[datetime, str]] = []
    replicas = [  # no grace at exit: the run in progress then is cancelled, not waited for
        Scheduler(clock=clock, runs=runs, lock=lock, replica=name, shutdown_grace=0)
        for name in ("a", "b", "c")
    ]
    for sched in replicas:

        async def report(run: RunContext, replica: str = sched.replica) -> None:
            assert run.scheduled_at is not None
            who.append((run.scheduled_at, replica))
            await clock.sleep(100)

        sched.add_cron("report", "0 * * * * *", report, catch_up="all")
    with anyio.fail_after(20):
        async with replicas[0], replicas[1], replicas[2]:
            await clock.advance(1500)
    caught_up = [fire for fire, _ in who if fire <= at(11.5)]
    assert caught_up == [at(m) for m in range(2, 12)], who  # each once, in order
