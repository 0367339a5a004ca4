"""Run records: one conformance suite for the RunStore Protocol, over MemoryRunStore and
SqlRunStore (SQLite and PostgreSQL), and the scheduler's use of them (checkpoint and resume,
stale runs, manual trigger)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import anyio
import pytest

from scheduler import (
    LocalLock,
    MemoryRunStore,
    RunContext,
    RunRecord,
    Scheduler,
    VirtualClock,
)
from scheduler.abc import RunStore
from scheduler.backends.sql import SqlRunStore

T0 = datetime(2024, 1, 1, tzinfo=UTC)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunStore]:
    """Every RunStore: the memory one (the verified fake), and the SQL one on a SQLite file
    and on the session's PostgreSQL (emptied for each test)."""
    if request.param == "memory":
        yield MemoryRunStore()
        return
    url = (
        tmp_path / "runs.db"
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    async with SqlRunStore.from_url(url) as sql:
        yield sql


def record(n: int, **changes: object) -> RunRecord:
    base = RunRecord(
        id=f"run{n}",
        task_name="job",
        trigger="cron",
        status="running",
        scheduled_at=T0 + timedelta(minutes=n),
        started_at=T0 + timedelta(minutes=n),
        expires_at=T0 + timedelta(minutes=n, seconds=30),
        trace_id=f"trace{n}",
        replica="host:1",
        fence=n,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


async def test_stores_fit_the_protocol(tmp_path: Path) -> None:
    _: RunStore = MemoryRunStore()
    store = SqlRunStore.from_url("sqlite+aiosqlite://")
    _ = store
    await store.aclose()


async def test_add_update_get_round_trip_every_field(store: RunStore) -> None:
    rec = record(1, cursor={"page": 3})
    await store.add(rec)
    assert await store.get("run1") == rec
    done = replace(rec, status="failed", finished_at=T0 + timedelta(hours=1), error="E: x")
    await store.update(replace(done, lock_lost=True))
    assert await store.get("run1") == replace(done, lock_lost=True)
    assert await store.get("nope") is None


async def test_results_round_trip_with_their_repr_flag(store: RunStore) -> None:
    await store.add(record(1))
    await store.update(record(1, status="succeeded", result={"rows": [1, 2], "ok": True}))
    await store.add(record(2, status="succeeded", result="<Opaque 7>", result_repr=True))
    await store.add(record(3, status="succeeded", result="9.90"))
    got = {r.id: (r.result, r.result_repr) for r in await store.query()}
    assert got == {
        "run1": ({"rows": [1, 2], "ok": True}, False),
        "run2": ("<Opaque 7>", True),
        "run3": ("9.90", False),
    }


async def test_last_scheduled_is_the_latest_fire_of_the_task_whatever_its_status(
    store: RunStore,
) -> None:
    assert await store.last_scheduled("job") is None
    await store.add(record(3, status="skipped"))
    await store.add(record(1, status="succeeded"))  # recorded later, scheduled earlier
    await store.add(record(2, scheduled_at=None, trigger="manual"))
    await store.add(record(9, task_name="other"))
    assert await store.last_scheduled("job") == T0 + timedelta(minutes=3)
    assert await store.last_scheduled("other") == T0 + timedelta(minutes=9)


async def test_query_is_newest_first_and_filters(store: RunStore) -> None:
    await store.add(record(1, status="succeeded"))
    await store.add(record(2, status="skipped"))
    await store.add(record(3, task_name="other", status="succeeded"))
    assert [r.id for r in await store.query()] == ["run3", "run2", "run1"]
    assert [r.id for r in await store.query(task_name="job")] == ["run2", "run1"]
    assert [r.id for r in await store.query(status="succeeded")] == ["run3", "run1"]
    assert [r.id for r in await store.query(limit=1)] == ["run3"]


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        pytest.param([], None, id="no-runs"),
        pytest.param(["failed"], 1, id="after-failure"),
        pytest.param(["abandoned"], 1, id="after-abandoned"),
        pytest.param(["failed", "succeeded"], None, id="after-success"),
        pytest.param(["failed", "skipped"], 1, id="skips-ignored"),
        pytest.param(["succeeded", "failed"], 2, id="latest-failure"),
    ],
)
async def test_resume_cursor_comes_from_a_failed_or_abandoned_last_run(
    store: RunStore, statuses: list[str], expected: int | None
) -> None:
    for i, status in enumerate(statuses, 1):
        await store.add(record(i, status=status, cursor=i))
    assert await store.resume_cursor("job") == expected


async def test_checkpoint_and_touch_update_one_run(store: RunStore) -> None:
    await store.add(record(1))
    await store.checkpoint("run1", [1, "a"])
    await store.touch("run1", T0 + timedelta(hours=2))
    got = await store.get("run1")
    assert got is not None and (got.cursor, got.expires_at) == ([1, "a"], T0 + timedelta(hours=2))


async def test_abandon_stale_marks_only_expired_running_rows(store: RunStore) -> None:
    await store.add(record(1))  # expires at 00:01:30
    await store.add(record(2))  # expires at 00:02:30
    await store.add(record(3, status="succeeded", expires_at=T0))
    assert await store.abandon_stale("job", T0 + timedelta(minutes=2)) == 1
    got = {r.id: r for r in await store.query()}
    assert [got[i].status for i in ("run1", "run2", "run3")] == [
        "abandoned",
        "running",
        "succeeded",
    ]
    assert got["run1"].error is not None and "process died" in got["run1"].error


# -- the scheduler and its run table -------------------------------------------------------------


async def test_a_run_after_a_failure_resumes_from_its_checkpoint(store: RunStore) -> None:
    clock = VirtualClock(T0)
    sched = Scheduler(clock=clock, runs=store)
    seen: list[object] = []

    @sched.interval(seconds=10, name="import")
    async def import_rows(run: RunContext) -> None:
        seen.append(run.cursor)
        for i in range(run.cursor or 0, 10):
            if i == 4 and len(seen) == 1:
                raise RuntimeError("row 4 is bad")
            await run.checkpoint(i + 1)

    with anyio.fail_after(10):
        async with sched:
            for _ in range(3):
                await clock.advance(10)
                await sched.wait_idle()  # SQL runs in a thread the virtual clock cannot see
    # run 1 fails at row 4; run 2 resumes there and succeeds; run 3 starts afresh
    assert seen == [None, 4, None]
    [third, second, first] = await store.query(task_name="import")
    assert (first.status, first.cursor, first.error) == ("failed", 4, "RuntimeError: row 4 is bad")
    assert (second.status, second.cursor, third.status) == ("succeeded", 10, "succeeded")


async def test_a_run_left_running_by_a_dead_process_is_abandoned_and_resumed(
    store: RunStore,
) -> None:
    clock = VirtualClock(T0 + timedelta(hours=1))
    await store.add(record(1, cursor=41, replica="dead:1"))  # expired long ago
    sched = Scheduler(clock=clock, runs=store, lock=LocalLock(clock.now))
    seen: list[object] = []

    @sched.interval(seconds=60, name="job")
    async def job(run: RunContext) -> None:
        seen.append((run.cursor, run.fence))

    with anyio.fail_after(10):
        rec = await sched.trigger("job")
    assert seen == [(41, 1)]
    assert rec.fence == 1 and rec.trigger == "manual" and rec.status == "succeeded"
    dead = await store.get("run1")
    assert dead is not None and dead.status == "abandoned"


async def test_manual_trigger_goes_through_the_same_lock(store: RunStore) -> None:
    clock = VirtualClock(T0)
    lock = LocalLock(clock.now)
    sched = Scheduler(clock=clock, runs=store, lock=lock)
    sched.interval(seconds=60, name="job")(_noop)
    other = await lock.acquire("job", ttl=60)  # another replica holds it
    assert other is not None
    with anyio.fail_after(10):
        rec = await sched.trigger("job")
    assert (rec.status, rec.trigger) == ("skipped", "manual")
    assert rec.error is not None and rec.error.startswith("locked:")
    assert await store.get(rec.id) == rec


async def _noop(run: RunContext) -> None:
    pass


async def test_fire_started_tells_whether_a_run_of_that_fire_began(store: RunStore) -> None:
    """A skip of the fire (claimed, locked...) is not a run; any other status is."""
    assert isinstance(store, MemoryRunStore | SqlRunStore)  # the optional method: both have it
    fire = T0 + timedelta(minutes=5)
    assert await store.fire_started("job", fire) is False
    await store.add(record(5, status="skipped", error="claimed: another replica took it"))
    assert await store.fire_started("job", fire) is False
    await store.add(record(6, id="run6b", scheduled_at=fire))
    assert await store.fire_started("job", fire) is True
    assert await store.fire_started("other", fire) is False
    assert await store.fire_started("job", fire + timedelta(microseconds=1)) is False
    await store.update(record(6, id="run6b", scheduled_at=fire, status="failed"))
    assert await store.fire_started("job", fire.astimezone(timezone(timedelta(hours=2))))
