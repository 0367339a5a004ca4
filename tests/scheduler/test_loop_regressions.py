"""Regression tests for defects found in review of the loop and the runner (virtual time)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest

from eventbus import Event, EventBus, EventRegistry
from scheduler import LocalLock, MemoryRunStore, RunContext, Scheduler, VirtualClock
from scheduler.abc import Lease

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def make(**options: Any) -> tuple[Scheduler, VirtualClock, MemoryRunStore]:
    clock = VirtualClock(T0)
    runs = MemoryRunStore()
    return Scheduler(clock=clock, runs=runs, **options), clock, runs


# -- 1. a removed or replaced job never runs after remove() returns ---------------------------


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


# -- 3. a renewing run stops before its lock can expire --------------------------------------


class HangingLease:
    """A lease on a lock backend that stopped answering."""

    fence = 1

    def __init__(self, extend: Callable[[], Awaitable[bool]]) -> None:
        self.extend = extend

    async def release(self) -> bool:
        return False


class OneLeaseLock:
    def __init__(self, lease: Any) -> None:
        self.lease = lease

    async def acquire(self, name: str, *, ttl: float) -> Any:
        return self.lease

    async def claim_fire(self, name: str, fire: datetime, *, ttl: float) -> bool:
        return True


@pytest.mark.parametrize(
    "hang",
    [
        pytest.param("timeout", id="each-extend-times-out-after-5s"),
        pytest.param("forever", id="extend-never-returns"),
    ],
)
async def test_a_renewed_run_is_cancelled_before_its_lock_expires_when_redis_hangs(
    hang: str,
) -> None:
    """Regression test: with renewal failing slowly the run went on to +16 s on a 9 s lock."""
    clock = VirtualClock(T0)

    async def extend() -> bool:
        if hang == "forever":
            await anyio.sleep_forever()
        await clock.sleep(5)
        raise TimeoutError("socket timeout")

    sched = Scheduler(clock=clock, lock=OneLeaseLock(HangingLease(extend)))
    stopped: list[datetime] = []

    @sched.interval(seconds=3600, name="j", lock_ttl=9, renew=True)
    async def j(run: RunContext) -> None:
        try:
            await clock.sleep(100)
        finally:
            stopped.append(clock.now())

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(sched.trigger, "j")
            await clock.advance(60)
    assert len(stopped) == 1 and stopped[0] < at(9)
    [rec] = await sched.runs.query()
    assert rec.status == "failed" and rec.error is not None and "LockLostError" in rec.error


async def test_a_renewed_run_keeps_its_lock_while_extends_answer_slowly_but_in_time() -> None:
    """Regression test: bounding each extend must not cancel a run whose renewals succeed."""
    clock = VirtualClock(T0)

    async def extend() -> bool:
        await clock.sleep(1)
        return True

    sched = Scheduler(clock=clock, lock=OneLeaseLock(HangingLease(extend)))

    @sched.interval(seconds=3600, name="j", lock_ttl=9, renew=True)
    async def j(run: RunContext) -> None:
        await clock.sleep(40)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(sched.trigger, "j")
            await clock.advance(60)
    [rec] = await sched.runs.query()
    assert rec.status == "succeeded"


# -- 4. a job's exception is recorded as itself with renew=True -------------------------------


async def test_a_renewing_jobs_exception_is_recorded_as_itself_not_as_a_group() -> None:
    """Regression test: with renew=True the record said 'ExceptionGroup: ...'."""
    sched, clock, _ = make()
    sched.lock = sched._runner.lock = LocalLock(clock.now)

    @sched.interval(seconds=60, name="j", renew=True, lock_ttl=30)
    async def j(run: RunContext) -> None:
        raise ValueError("boom")

    with anyio.fail_after(5):
        rec = await sched.trigger("j")
    assert (rec.status, rec.error) == ("failed", "ValueError: boom")


# -- 8. shutdown: the grace period on the injected clock; cancelled runs are failures ---------


async def test_shutdown_grace_runs_on_the_injected_clock_and_cancelled_runs_count() -> None:
    """Regression test: the grace period ignored the virtual clock, and runs cancelled at
    shutdown were neither counted as failed nor announced as scheduler.run.failed."""
    bus = EventBus(registry=EventRegistry())
    seen: list[str] = []

    @bus.on("scheduler.run.*")
    def collect(e: Event) -> None:
        seen.append(e.event_name)

    sched, clock, runs = make(bus=bus, shutdown_grace=30)

    @sched.interval(seconds=10, name="j")
    async def j(run: RunContext) -> None:
        await clock.sleep(100)

    entered, leave, exited = anyio.Event(), anyio.Event(), anyio.Event()

    async def body() -> None:
        async with sched:
            entered.set()
            await leave.wait()
        exited.set()

    with anyio.fail_after(5):  # 30 real seconds if the grace read real time
        async with anyio.create_task_group() as tg:
            tg.start_soon(body)
            await entered.wait()
            await clock.advance(10)
            leave.set()
            await clock.advance(29)
            assert not exited.is_set()
            await clock.advance(1)
            await exited.wait()
    [rec] = await runs.query()
    assert (rec.status, rec.error) == ("failed", "cancelled: the scheduler shut down")
    assert sched.statistics().failed == 1
    assert seen == ["scheduler.run.started", "scheduler.run.failed"]


async def test_a_run_cancelled_with_its_trigger_caller_says_so() -> None:
    """Regression test: a cancelled trigger() was recorded as 'the scheduler shut down'."""
    sched, clock, runs = make()

    @sched.interval(seconds=3600, name="j")
    async def j(run: RunContext) -> None:
        await clock.sleep(100)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(sched.trigger, "j")
            await clock.advance(1)
            tg.cancel_scope.cancel()
    [rec] = await runs.query()
    assert rec.error == "cancelled: the caller of trigger() was cancelled"
    assert sched.statistics().failed == 1


# -- 9. a forward wall-clock step is not lateness ---------------------------------------------


class SteppingClock(VirtualClock):
    """A virtual wall clock with a monotonic clock beside it that steps do not move."""

    def __init__(self) -> None:
        super().__init__(T0)
        self.stepped = 0.0

    def monotonic(self) -> float:
        return (self.now() - T0).total_seconds() - self.stepped

    def step(self, seconds: float) -> None:
        """NTP moves the wall clock; nobody sleeping is woken by it."""
        self._now += timedelta(seconds=seconds)
        self.stepped += seconds


async def test_a_forward_wall_clock_step_does_not_turn_an_on_time_fire_into_a_missed_one() -> None:
    """Regression test: a 2 s NTP step while the loop slept recorded the fire as missed."""
    clock = SteppingClock()
    runs = MemoryRunStore()
    sched = Scheduler(clock=clock, runs=runs)

    @sched.interval(seconds=1, name="j")
    async def j(run: RunContext) -> None:
        pass

    with anyio.fail_after(5):
        async with sched:
            await clock.advance(0.5)
            clock.step(2)
            await clock.advance(0.5)
    records = sorted(await runs.query(), key=lambda r: r.scheduled_at or T0)
    assert [(r.scheduled_at, r.status) for r in records] == [
        (at(1), "succeeded"),
        (at(2), "succeeded"),
        (at(3), "succeeded"),
    ]


async def test_a_stall_is_still_missed_on_a_clock_with_a_monotonic_reading() -> None:
    """Regression test: the step correction must not excuse real lateness."""
    clock = SteppingClock()
    runs = MemoryRunStore()
    sched = Scheduler(clock=clock, runs=runs)

    @sched.interval(seconds=10, name="j")
    async def j(run: RunContext) -> None:
        pass

    with anyio.fail_after(5):
        async with sched:
            await clock.jump(15)
    [rec] = await runs.query()
    assert (rec.scheduled_at, rec.status) == (at(10), "skipped")


# -- 10. plain functions are rejected at registration ----------------------------------------


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


# -- the lock-lost alarm's advice -------------------------------------------------------------


class ReleasedLateLease:
    fence = 1

    async def extend(self) -> bool:
        return True

    async def release(self) -> bool:
        return False


async def test_the_lock_lost_alarm_does_not_advise_renewal_when_renewal_is_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Regression test: the alarm said 'use renew=True' to a job that renews."""
    clock = VirtualClock(T0)
    sched = Scheduler(clock=clock, lock=OneLeaseLock(ReleasedLateLease()))

    @sched.interval(seconds=3600, name="j", lock_ttl=9, renew=True)
    async def j(run: RunContext) -> None:
        pass

    with anyio.fail_after(5), caplog.at_level(logging.ERROR, logger="scheduler"):
        rec = await sched.trigger("j")
    assert rec.lock_lost
    [alarm] = [r.getMessage() for r in caplog.records if "lost its lock" in r.getMessage()]
    assert "renew=True" not in alarm


def test_lease_fakes_fit_the_protocol() -> None:
    assert isinstance(ReleasedLateLease(), Lease)


# -- a job's own misfire_grace bounds how long its fire claims live -----------------------------


class _ClaimRecordingLock(LocalLock):
    def __init__(self, now: Callable[[], datetime]) -> None:
        super().__init__(now=now)
        self.claim_ttls: list[float] = []

    async def claim_fire(self, name: str, fire: datetime, *, ttl: float) -> bool:
        self.claim_ttls.append(ttl)
        return await super().claim_fire(name, fire, ttl=ttl)


async def test_a_fire_claim_outlives_the_jobs_own_misfire_grace() -> None:
    """Regression test: the claim TTL used only the scheduler's grace, so a replica reaching a
    fire later than lock_ttl but within the job's own misfire_grace could run it again."""
    clock = VirtualClock(T0)
    lock = _ClaimRecordingLock(clock.now)
    sched = Scheduler(clock=clock, runs=MemoryRunStore(), lock=lock)

    @sched.interval(seconds=10, name="slow-to-claim", lock_ttl=300, misfire_grace=600)
    async def job(run: RunContext) -> None:
        pass

    with anyio.fail_after(5):
        async with sched:
            await clock.advance(10)
            await sched.wait_idle()
    assert lock.claim_ttls and min(lock.claim_ttls) >= 2 * 600
