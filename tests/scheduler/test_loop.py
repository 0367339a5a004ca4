"""The loop on virtual time: when jobs fire, skips, missed fires, errors, events, scale."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import anyio
import pytest

from eventbus import Event, EventBus, EventRegistry
from scheduler import (
    LocalLock,
    MemoryRunStore,
    RunContext,
    RunRecord,
    Scheduler,
    SystemClock,
    TraceIdFilter,
    VirtualClock,
    current_trace_id,
)
from scheduler.abc import Clock, Lease
from tests.scheduler.helpers import T0, at, make


async def history(runs: MemoryRunStore, name: str) -> list[tuple[datetime | None, str]]:
    """(scheduled_at, status) in scheduled order (trio starts tasks in random order)."""
    records = await runs.query(task_name=name)
    return sorted(((r.scheduled_at, r.status) for r in records), key=lambda p: p[0] or T0)


async def test_interval_fires_one_interval_after_start_then_every_interval() -> None:
    sched, clock, _ = make()
    seen: list[datetime] = []

    @sched.interval(seconds=10, name="tick")
    async def tick(run: RunContext) -> None:
        seen.append(clock.now())

    with anyio.fail_after(5):
        async with sched:
            await clock.advance(35)
    assert seen == [at(10), at(20), at(30)]


async def test_cron_fires_at_its_wall_clock_times_with_the_scheduled_time_recorded() -> None:
    sched, clock, runs = make()

    @sched.cron("*/15 * * * * *", name="quarter")
    async def quarter(run: RunContext) -> None:
        assert run.trigger == "cron" and run.scheduled_at == clock.now()

    with anyio.fail_after(5):
        async with sched:
            await clock.advance(60)
    assert await history(runs, "quarter") == [
        (at(15), "succeeded"),
        (at(30), "succeeded"),
        (at(45), "succeeded"),
        (at(60), "succeeded"),
    ]


async def test_timeout_fires_once() -> None:
    sched, clock, runs = make()

    @sched.timeout(seconds=5, name="warmup")
    async def warmup(run: RunContext) -> None:
        pass

    with anyio.fail_after(5):
        async with sched:
            await clock.advance(100)
    assert await history(runs, "warmup") == [(at(5), "succeeded")]


async def test_next_fire_comes_from_the_scheduled_time_so_slow_runs_do_not_drift() -> None:
    sched, clock, _ = make()
    starts: list[datetime] = []

    @sched.interval(seconds=10, name="slow")
    async def slow(run: RunContext) -> None:
        starts.append(clock.now())
        await clock.sleep(7)  # most of the interval

    with anyio.fail_after(5):
        async with sched:
            await clock.advance(107)
    assert starts == [at(s) for s in range(10, 101, 10)]


async def test_a_fire_while_the_previous_run_is_going_is_skipped_not_queued() -> None:
    sched, clock, runs = make()
    release = anyio.Event()
    calls = 0

    @sched.interval(seconds=10, name="long")
    async def long(run: RunContext) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            await release.wait()

    with anyio.fail_after(5):
        async with sched:
            await clock.advance(25)  # run 1 starts at 10 and blocks; the fire at 20 is skipped
            release.set()
            await clock.advance(10)  # fire at 30 runs
    assert calls == 2
    assert await history(runs, "long") == [
        (at(10), "succeeded"),
        (at(20), "skipped"),
        (at(30), "succeeded"),
    ]
    [skip] = await runs.query(task_name="long", status="skipped")
    assert skip.error is not None and skip.error.startswith("running:")
    assert sched.statistics().skipped == 1


async def test_wait_for_completion_false_lets_runs_overlap() -> None:
    sched, clock, _ = make()
    release = anyio.Event()
    running = 0
    peak = 0

    @sched.interval(seconds=10, name="overlap", wait_for_completion=False)
    async def overlap(run: RunContext) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1

    with anyio.fail_after(5):
        async with sched:
            await clock.advance(30)
            release.set()
    assert peak == 3


async def test_missed_fires_are_not_made_up_by_default() -> None:
    sched, clock, runs = make()
    seen: list[datetime] = []

    @sched.interval(seconds=10, name="tick")
    async def tick(run: RunContext) -> None:
        seen.append(run.scheduled_at or T0)

    with anyio.fail_after(5):
        async with sched:
            await clock.jump(35)  # the process stalled over the fires at 10, 20 and 30
            await clock.advance(10)  # back on the original grid: 40
    assert seen == [at(40)]
    assert await history(runs, "tick") == [(at(10), "skipped"), (at(40), "succeeded")]
    [skip] = await runs.query(status="skipped")
    assert skip.error is not None and skip.error.startswith("missed:")


async def test_misfire_grace_runs_the_latest_missed_fire_once_late() -> None:
    sched, clock, runs = make()
    seen: list[tuple[datetime | None, datetime]] = []

    @sched.interval(seconds=10, name="tick", misfire_grace=8)
    async def tick(run: RunContext) -> None:
        seen.append((run.scheduled_at, clock.now()))

    with anyio.fail_after(5):
        async with sched:
            await clock.jump(35)
            await clock.advance(5)
    assert seen == [(at(30), at(35)), (at(40), at(40))]
    statuses = [s for _, s in await history(runs, "tick")]
    assert statuses == ["skipped", "succeeded", "succeeded"]


async def test_an_exception_is_recorded_logged_with_trace_id_and_stops_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sched, clock, runs = make()
    healthy: list[datetime] = []
    traces: list[str | None] = []
    caplog.handler.addFilter(TraceIdFilter())

    @sched.interval(seconds=10, name="broken")
    async def broken(run: RunContext) -> None:
        traces.append(current_trace_id())
        raise ValueError("boom")

    @sched.interval(seconds=10, name="healthy")
    async def ok(run: RunContext) -> None:
        healthy.append(clock.now())

    with anyio.fail_after(5), caplog.at_level(logging.ERROR, logger="scheduler"):
        async with sched:
            await clock.advance(20)
    assert healthy == [at(10), at(20)]
    failed = await runs.query(task_name="broken")
    assert [(r.status, r.error) for r in failed] == [("failed", "ValueError: boom")] * 2
    assert [r.trace_id for r in reversed(failed)] == traces
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [getattr(r, "trace_id", None) for r in errors] == traces
    assert all("'broken' failed" in r.getMessage() for r in errors)
    assert sched.statistics().failed == 2


async def test_lifecycle_events_are_emitted_on_the_bus_in_its_own_registry() -> None:
    reg = EventRegistry()
    bus = EventBus(registry=reg)
    seen: list[str] = []

    @bus.on("scheduler.**")
    def collect(e: Event) -> None:
        seen.append(e.event_name)

    sched, clock, _ = make(bus=bus)
    calls = 0

    @sched.interval(seconds=10, name="job", wait_for_completion=True)
    async def job(run: RunContext) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("second run fails")

    with anyio.fail_after(5):
        async with sched:
            await clock.advance(20)
    assert seen == [
        "scheduler.run.started",
        "scheduler.run.succeeded",
        "scheduler.run.started",
        "scheduler.run.failed",
    ]


async def test_ten_thousand_jobs_are_heap_entries_not_sleeping_tasks() -> None:
    sched, clock, _ = make()

    async def noop(run: RunContext) -> None:
        pass

    for i in range(10_000):
        sched.interval(seconds=3600 + i, name=f"job-{i}")(noop)
    with anyio.fail_after(10):
        async with sched:
            await clock.advance(1)
            assert clock.sleepers == 1  # the loop, and nothing else
            assert clock.sleep_calls == 1  # it slept once: no polling
            sched.remove("job-0")  # wakes it to look again, once
            await clock.advance(1)
            assert clock.sleepers == 1 and clock.sleep_calls == 2


async def test_manual_trigger_runs_now_with_trigger_manual_without_the_loop() -> None:
    sched, _, runs = make()
    seen: list[RunContext] = []

    @sched.cron("0 0 4 * * *", name="report")
    async def report(run: RunContext) -> None:
        seen.append(run)

    with anyio.fail_after(5):
        record = await sched.trigger("report")
    assert isinstance(record, RunRecord)
    assert (record.status, record.trigger, record.scheduled_at) == ("succeeded", "manual", None)
    assert [r.trigger for r in seen] == ["manual"]
    assert await runs.get(record.id) == record


@pytest.mark.parametrize(
    ("renew", "lock_lost", "held_throughout"),
    [
        pytest.param(True, False, True, id="renewed"),
        pytest.param(False, True, False, id="expired"),
    ],
)
async def test_a_run_longer_than_its_lock_ttl_keeps_it_only_with_renew(
    renew: bool, lock_lost: bool, held_throughout: bool
) -> None:
    clock = VirtualClock(T0)
    lock = LocalLock(clock.now)
    sched = Scheduler(clock=clock, lock=lock)
    held: list[bool] = []

    @sched.interval(seconds=3600, name="long", lock_ttl=30, renew=renew)
    async def long(run: RunContext) -> None:
        for _ in range(10):  # 100 s of virtual work, more than three TTLs
            await clock.sleep(10)
            held.append(await lock.holder("long") is not None)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            result: list[RunRecord] = []

            async def trigger() -> None:
                result.append(await sched.trigger("long"))

            tg.start_soon(trigger)
            await clock.advance(100)
    [rec] = result
    assert (rec.status, rec.lock_lost, all(held)) == ("succeeded", lock_lost, held_throughout)
    assert sched.statistics().lock_lost == int(lock_lost)


def test_clocks_fit_the_protocol() -> None:
    _: Clock = VirtualClock()
    _ = SystemClock()


# -- locks: renewal, a lost lock's alarm, fire claims -------------------------------------


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


# -- shutdown: the grace period on the injected clock; cancelled runs are failures ---------


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


# -- a forward wall-clock step is not lateness ---------------------------------------------


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
