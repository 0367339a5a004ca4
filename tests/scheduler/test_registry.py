"""The runtime registry: add_cron validates and replaces, remove stops for good, get/jobs."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

import anyio
import pytest

from scheduler import (
    CronSyntaxError,
    IntervalTooShortError,
    JobLookupError,
    LocalLock,
    MemoryRunStore,
    RunContext,
    Scheduler,
    VirtualClock,
)
from tests.scheduler.helpers import T0, at, make


async def noop(run: RunContext) -> None:
    pass


@pytest.mark.parametrize(
    ("expr", "tz", "error"),
    [
        pytest.param("0 61 * * * *", "UTC", CronSyntaxError, id="bad-field"),
        pytest.param("0 0 * * * ? 2024", "UTC", CronSyntaxError, id="quartz"),
        pytest.param("* * * * * *", "UTC", IntervalTooShortError, id="every-second"),
        pytest.param("*/30 * * * * *", "UTC", IntervalTooShortError, id="every-30s"),
        pytest.param("0 * * * *", "Mars/Olympus", Exception, id="unknown-zone"),
    ],
)
async def test_add_cron_validates_first_and_registers_nothing_on_failure(
    expr: str, tz: str, error: type[Exception]
) -> None:
    sched, _, _ = make()
    with pytest.raises(error):
        sched.add_cron("user:1", expr, noop, tz=tz)
    assert sched.jobs() == []


def test_too_frequent_error_names_the_job_the_expression_and_the_floor() -> None:
    sched, _, _ = make(min_interval=60)
    with pytest.raises(IntervalTooShortError, match=r"'user:1'.*'\* \* \* \* \* \*'.*1s.*60s"):
        sched.add_cron("user:1", "* * * * * *", noop)
    job = sched.add_cron("user:1", "* * * * * *", noop, min_interval=1)
    assert sched.get("user:1") is job


async def test_add_cron_replaces_a_job_of_the_same_name() -> None:
    sched, clock, _ = make()
    calls: list[str] = []

    async def old(run: RunContext) -> None:
        calls.append("old")

    async def new(run: RunContext) -> None:
        calls.append("new")

    sched.add_cron("reminder", "0 * * * * *", old)
    with anyio.fail_after(5):
        async with sched:
            await clock.advance(60)
            sched.add_cron("reminder", "0 * * * * *", new)
            await clock.advance(120)
    assert calls == ["old", "new", "new"]
    assert [j.name for j in sched.jobs()] == ["reminder"]


async def test_a_replaced_job_waits_for_the_old_run_instead_of_running_beside_it() -> None:
    sched, clock, runs = make()
    release = anyio.Event()

    async def old(run: RunContext) -> None:
        await release.wait()

    sched.add_cron("r", "0 * * * * *", old)
    with anyio.fail_after(5):
        async with sched:
            await clock.advance(60)  # old run starts and blocks
            sched.add_cron("r", "0 * * * * *", noop)
            await clock.advance(60)  # new job's fire: skipped, the old run is still going
            release.set()
            await clock.advance(60)
    statuses = sorted((r.scheduled_at or T0, r.status) for r in await runs.query())
    assert [s for _, s in statuses] == ["succeeded", "skipped", "succeeded"]


async def test_a_removed_job_never_fires_again() -> None:
    sched, clock, runs = make()
    sched.interval(seconds=10, name="tick")(noop)
    with anyio.fail_after(5):
        async with sched:
            await clock.advance(10)
            sched.remove("tick")
            await clock.advance(100)
            with pytest.raises(JobLookupError, match="no job named 'tick'"):
                sched.get("tick")
    assert [r.scheduled_at for r in await runs.query()] == [at(10)]


async def test_remove_lets_the_run_in_progress_finish() -> None:
    sched, clock, runs = make()
    release = anyio.Event()

    @sched.interval(seconds=10, name="long")
    async def long(run: RunContext) -> None:
        await release.wait()

    with anyio.fail_after(5):
        async with sched:
            await clock.advance(10)
            sched.remove("long")
            release.set()
            await clock.advance(30)
    [rec] = await runs.query()
    assert rec.status == "succeeded"


async def test_remove_with_cancel_cancels_the_run_and_records_it() -> None:
    sched, clock, runs = make()
    finished = False

    @sched.interval(seconds=10, name="long")
    async def long(run: RunContext) -> None:
        nonlocal finished
        await anyio.sleep_forever()
        finished = True

    with anyio.fail_after(5):
        async with sched:
            await clock.advance(10)
            sched.remove("long", cancel=True)
            await clock.advance(30)
    [rec] = await runs.query()
    assert (rec.status, rec.error) == (
        "failed",
        "RunCancelledError: run of job 'long' was cancelled: job removed",
    )
    assert not finished


async def test_a_job_added_while_running_wakes_the_loop() -> None:
    sched, clock, runs = make()
    with anyio.fail_after(5):
        async with sched:
            await clock.advance(5)
            sched.interval(seconds=10, name="late")(noop)  # loop was sleeping forever
            await clock.advance(10)
    assert [r.scheduled_at for r in await runs.query()] == [at(15)]


def test_remove_of_an_unknown_job_raises_lookup_error() -> None:
    sched, _, _ = make()
    with pytest.raises(LookupError, match="no job named 'ghost'"):
        sched.remove("ghost")


def test_get_and_jobs_list_registered_jobs_by_name() -> None:
    sched, _, _ = make()
    sched.interval(seconds=5, name="b")(noop)
    sched.cron("0 0 * * * *", name="a", tz="Europe/London", lock_ttl=30, renew=True)(noop)
    assert [j.name for j in sched.jobs()] == ["a", "b"]
    job = sched.get("a")
    assert (job.trigger.kind, job.lock_ttl, job.renew) == ("cron", 30, True)


def test_decorator_without_name_uses_module_and_qualname() -> None:
    sched, _, _ = make()
    sched.timeout(seconds=1)(noop)
    assert [j.name for j in sched.jobs()] == ["tests.scheduler.test_registry:noop"]


# -- a removed or replaced job never runs after remove() returns -------------------------


# asyncio starts tasks in spawn order (a before b); trio shuffles them, so b may run first.
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_job_removed_while_its_fire_is_queued_does_not_run() -> None:
    """Regression test: a fire spawned together with the run that removed its job still ran."""
    sched, clock, _ = make()
    ran: list[str] = []

    @sched.interval(seconds=10, name="a")
    async def a(run: RunContext) -> None:
        ran.append("a")
        sched.remove("b")

    @sched.interval(seconds=10, name="b")
    async def b(run: RunContext) -> None:
        ran.append("b")

    with anyio.fail_after(5):
        async with sched:
            await clock.advance(30)
    assert ran == ["a", "a", "a"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # spawn order, as above
async def test_a_job_replaced_while_its_fire_is_queued_runs_only_the_new_function() -> None:
    """Regression test: a replaced job's queued fire ran the old function."""
    sched, clock, _ = make()
    ran: list[tuple[str, datetime]] = []

    async def new_b(run: RunContext) -> None:
        ran.append(("new b", clock.now()))

    @sched.interval(seconds=10, name="a")
    async def a(run: RunContext) -> None:
        if clock.now() == at(10):
            sched.interval(seconds=10, name="b")(new_b)

    @sched.interval(seconds=10, name="b")
    async def old_b(run: RunContext) -> None:
        ran.append(("old b", clock.now()))

    with anyio.fail_after(5):
        async with sched:
            await clock.advance(25)
    assert ran == [("new b", at(20))]


class RemovingLock(LocalLock):
    """A lock whose acquisition coincides with the job's removal (as from another task)."""

    def __init__(self, sched: Scheduler) -> None:
        super().__init__()
        self.sched = sched

    async def acquire(self, name: str, *, ttl: float) -> Any:
        lease = await super().acquire(name, ttl=ttl)
        self.sched.remove(name)
        return lease


async def test_a_job_removed_while_its_lock_was_taken_does_not_run_and_frees_the_lock() -> None:
    """Regression test: the job was not re-checked once its lock was held."""
    clock = VirtualClock(T0)
    runs = MemoryRunStore()
    sched = Scheduler(clock=clock, runs=runs)
    lock = RemovingLock(sched)
    sched.lock = sched._runner.lock = lock
    ran = []

    @sched.interval(seconds=10, name="job")
    async def job(run: RunContext) -> None:
        ran.append(run)

    with anyio.fail_after(5):
        async with sched:
            await clock.advance(10)
    assert ran == []
    [rec] = await runs.query()
    assert (rec.status, (rec.error or "").split(":")[0]) == ("skipped", "removed")
    assert await lock.holder("job") is None


# -- plain functions are rejected at registration ---------------------------------------


async def _async_job(run: RunContext) -> None:
    pass


def _sync_job(run: RunContext) -> None:
    pass


@functools.wraps(_async_job)
async def _wrapped_async(run: RunContext) -> None:
    await _async_job(run)


class _AsyncCallable:
    async def __call__(self, run: RunContext) -> None:
        pass


class _SyncCallable:
    def __call__(self, run: RunContext) -> None:
        pass


class _Holder:
    async def method(self, run: RunContext) -> None:
        pass


@pytest.mark.parametrize(
    "fn",
    [
        pytest.param(_sync_job, id="plain-def"),
        pytest.param(lambda run: None, id="lambda"),
        pytest.param(_SyncCallable(), id="sync-call-instance"),
        pytest.param(functools.partial(_sync_job), id="partial-of-sync"),
    ],
)
def test_a_plain_function_is_rejected_at_registration_naming_the_job(fn: Any) -> None:
    """Regression test: a plain function was accepted and failed at each run instead."""
    sched = Scheduler()
    with pytest.raises(TypeError, match=r"^job 'sync': .* is not an async function"):
        sched.interval(seconds=60, name="sync")(fn)
    with pytest.raises(TypeError, match=r"^job 'sync': "):
        sched.add_cron("sync", "0 * * * *", fn)
    assert sched.jobs() == []


@pytest.mark.parametrize(
    "fn",
    [
        pytest.param(_async_job, id="async-def"),
        pytest.param(_wrapped_async, id="functools-wraps"),
        pytest.param(functools.partial(_async_job), id="partial-of-async"),
        pytest.param(_AsyncCallable(), id="async-call-instance"),
        pytest.param(_Holder().method, id="bound-async-method"),
    ],
)
def test_async_callables_are_accepted_as_jobs(fn: Any) -> None:
    """Regression test: the async check must let every awaitable-returning job shape in."""
    sched = Scheduler()
    sched.interval(seconds=60, name="ok")(fn)
    assert [j.name for j in sched.jobs()] == ["ok"]
