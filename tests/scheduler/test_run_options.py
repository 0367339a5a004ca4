"""Per-job run options on the virtual clock: timeout=, max_running=, jitter=, and results
stored in run records (issue 15, items 3 to 5)."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from decimal import Decimal

import anyio
import pytest

from eventbus import EventBus, EventRegistry
from scheduler import (
    LocalLock,
    MemoryRunStore,
    RunContext,
    RunFailed,
    RunRecord,
    Scheduler,
    VirtualClock,
)
from tests.scheduler.helpers import T0, at, make


async def records(runs: MemoryRunStore, name: str) -> list[RunRecord]:
    found = await runs.query(task_name=name, limit=None)
    return sorted(found, key=lambda r: (r.scheduled_at or T0, r.started_at, r.status))


# -- timeout= ---------------------------------------------------------------------------------


async def test_a_run_past_its_timeout_is_cancelled_and_recorded_as_failed() -> None:
    reg = EventRegistry()
    bus = EventBus(registry=reg)
    clock = VirtualClock(T0)
    lock = LocalLock(clock.now)
    sched = Scheduler(clock=clock, lock=lock, bus=bus)
    failed: list[RunFailed] = []
    bus.on(RunFailed)(failed.append)
    stopped: list[datetime] = []

    @sched.interval(seconds=60, name="slow", timeout=5, lock_ttl=600)
    async def slow(run: RunContext) -> None:
        try:
            await clock.sleep(30)
        finally:
            stopped.append(clock.now())

    with anyio.fail_after(5):
        async with sched:
            await clock.advance(60)
            assert await lock.holder("slow") is not None  # held while it runs
            await clock.advance(10)
            assert await lock.holder("slow") is None  # released when it was cancelled
    assert stopped == [at(65)]
    [rec] = await sched.runs.query()
    assert (rec.status, rec.finished_at, rec.lock_lost) == ("failed", at(65), False)
    assert rec.error == "RunTimeoutError: run of job 'slow' took longer than timeout=5s; cancelled"
    assert [f.run_id for f in failed] == [rec.id]
    assert sched.statistics().failed == 1


async def test_a_run_within_its_timeout_succeeds() -> None:
    sched, clock, runs = make()

    @sched.interval(seconds=60, name="quick", timeout=5)
    async def quick(run: RunContext) -> None:
        await clock.sleep(4)

    with anyio.fail_after(5):
        async with sched:
            await clock.advance(70)
    assert [r.status for r in await records(runs, "quick")] == ["succeeded"]


async def test_timeout_and_renewal_together_keep_their_own_reasons() -> None:
    clock = VirtualClock(T0)
    sched = Scheduler(clock=clock, lock=LocalLock(clock.now))

    @sched.interval(seconds=3600, name="long", timeout=50, lock_ttl=9, renew=True)
    async def long(run: RunContext) -> None:
        await clock.sleep(100)  # renewed past three TTLs, then stopped by the timeout

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(sched.trigger, "long")
            await clock.advance(120)
    [rec] = await sched.runs.query()
    assert (rec.status, rec.finished_at, rec.lock_lost) == ("failed", at(50), False)
    assert rec.error is not None and rec.error.startswith("RunTimeoutError")


# -- max_running= -----------------------------------------------------------------------------


async def test_max_running_allows_that_many_overlapping_runs_then_skips() -> None:
    sched, clock, runs = make()

    @sched.interval(seconds=10, name="batch", max_running=2)
    async def batch(run: RunContext) -> None:
        await clock.sleep(25)  # each run spans two more fires

    with anyio.fail_after(5):
        async with sched:
            await clock.advance(40)
            assert sched.statistics().running == 2  # the runs of 20 s and 40 s
            await clock.advance(20)
            sched.remove("batch")  # its runs in progress finish
            await clock.advance(20)
    got = [(r.scheduled_at, r.status, r.error) for r in await records(runs, "batch")]
    assert got == [
        (at(10), "succeeded", None),
        (at(20), "succeeded", None),
        (at(30), "skipped", "running: max_running=2 runs are still going"),
        (at(40), "succeeded", None),
        (at(50), "succeeded", None),
        (at(60), "skipped", "running: max_running=2 runs are still going"),
    ]


async def test_max_running_across_replicas_uses_that_many_lock_slots() -> None:
    clock = VirtualClock(T0)
    lock = LocalLock(clock.now)
    replicas = [
        Scheduler(clock=clock, lock=lock, runs=MemoryRunStore(), replica=name)
        for name in ("a", "b", "c")
    ]
    started = []
    for sched in replicas:

        @sched.interval(seconds=3600, name="batch", max_running=2, lock_ttl=600)
        async def batch(run: RunContext, replica: str = sched.replica) -> None:
            started.append(replica)
            await clock.sleep(60)

    results: list[RunRecord] = []

    async def trigger(sched: Scheduler) -> None:
        results.append(await sched.trigger("batch"))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for sched in replicas:
                tg.start_soon(trigger, sched)
            await clock.advance(1)
            assert len(started) == 2
            await clock.advance(60)
    statuses = sorted(r.status for r in results)
    assert statuses == ["skipped", "succeeded", "succeeded"]
    [skip] = [r for r in results if r.status == "skipped"]
    assert skip.error is not None
    assert skip.error.startswith("locked: 2 runs hold its 2 locks (held by ")
    assert await lock.holder("batch") is None and await lock.holder("batch#2") is None


# -- jitter= ----------------------------------------------------------------------------------


async def test_jitter_delays_each_fire_within_its_bound_and_keeps_the_scheduled_time() -> None:
    sched, clock, runs = make()
    delays: list[float] = []

    @sched.cron("0 * * * * *", name="spread", jitter=20)
    async def spread(run: RunContext) -> None:
        assert run.scheduled_at is not None
        delays.append((clock.now() - run.scheduled_at).total_seconds())

    with anyio.fail_after(10):
        async with sched:
            await clock.advance(30 * 60 + 30)
    assert len(delays) == 30
    assert all(0 <= d <= 20 for d in delays)
    assert len(set(delays)) > 1  # random, not a fixed delay
    assert [r.scheduled_at for r in await records(runs, "spread")] == [
        at(60 * k) for k in range(1, 31)
    ]


async def test_replicas_with_jitter_still_run_each_fire_once() -> None:
    clock = VirtualClock(T0)
    lock = LocalLock(clock.now)
    ran: list[datetime] = []
    replicas = [
        Scheduler(clock=clock, lock=lock, runs=MemoryRunStore(), replica=name)
        for name in ("a", "b", "c")
    ]
    for sched in replicas:

        @sched.cron("0 * * * * *", name="tick", jitter=30, lock_ttl=5)
        async def tick(run: RunContext) -> None:
            assert run.scheduled_at is not None
            ran.append(run.scheduled_at)

    with anyio.fail_after(10):
        async with replicas[0], replicas[1], replicas[2]:
            await clock.advance(20 * 60 + 40)
    assert sorted(ran) == [at(60 * k) for k in range(1, 21)]  # once each, keyed unjittered


async def test_a_fire_waiting_out_its_jitter_at_shutdown_is_recorded_not_run() -> None:
    sched, clock, runs = make()
    ran = []

    @sched.interval(seconds=60, name="late", jitter=3600)
    async def late(run: RunContext) -> None:
        ran.append(run)

    with anyio.fail_after(5):  # the exit does not wait out the jitter, nor the grace
        async with sched:
            await clock.advance(60)  # the fire is due; its delay is up to an hour
    assert ran == []
    [rec] = await runs.query()
    assert (rec.status, rec.scheduled_at) == ("skipped", at(60))
    assert rec.error == "stopped: the scheduler stopped while this fire waited out its jitter"


# -- results ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Report:
    rows: int
    total: Decimal


class Opaque:
    def __repr__(self) -> str:
        return "<Opaque 7>"


async def returns_report(run: RunContext) -> Report:
    return Report(rows=3, total=Decimal("9.90"))


async def returns_decimal(run: RunContext) -> Decimal:
    return Decimal("9.90")


async def returns_json(run: RunContext) -> dict[str, list[int]]:
    return {"ids": [1, 2]}


async def returns_untyped(run: RunContext):  # type: ignore[no-untyped-def]
    return [1, "a", None]


async def returns_opaque(run: RunContext) -> object:
    return Opaque()


async def returns_nothing(run: RunContext) -> None:
    pass


@pytest.mark.parametrize(
    ("fn", "result", "result_repr"),
    [
        pytest.param(returns_report, {"rows": 3, "total": "9.90"}, False, id="dataclass"),
        pytest.param(returns_decimal, "9.90", False, id="decimal-by-annotation"),
        pytest.param(returns_json, {"ids": [1, 2]}, False, id="json"),
        pytest.param(returns_untyped, [1, "a", None], False, id="no-annotation"),
        pytest.param(returns_opaque, "<Opaque 7>", True, id="unencodable"),
        pytest.param(returns_nothing, None, False, id="none"),
    ],
)
async def test_a_jobs_return_value_is_stored_in_its_run_record(
    fn: object, result: object, result_repr: bool
) -> None:
    sched, _, runs = make()
    sched.add_timeout("job", 1, fn)  # type: ignore[arg-type]
    rec = await sched.trigger("job")
    assert (rec.status, rec.result, rec.result_repr) == ("succeeded", result, result_repr)
    stored = await runs.get(rec.id)
    assert stored is not None and (stored.result, stored.result_repr) == (result, result_repr)


async def test_a_failed_run_stores_no_result() -> None:
    sched, _, _ = make()

    @sched.timeout(seconds=1, name="boom")
    async def boom(run: RunContext) -> int:
        raise ValueError("boom")

    rec = await sched.trigger("boom")
    assert (rec.status, rec.result, rec.result_repr) == ("failed", None, False)
