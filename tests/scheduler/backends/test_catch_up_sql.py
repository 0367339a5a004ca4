"""Catch-up across a real restart: each 'process' builds its own SqlRunStore on the same
SQLite file or PostgreSQL database, so the last fire is read back from the table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from scheduler import RunContext, Scheduler, VirtualClock
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


async def process(db_url: str, start: datetime, minutes: int, **options: object) -> list[datetime]:
    """One process's life: its own store and scheduler, from ``start``, for ``minutes``."""
    ran: list[datetime] = []
    runs = SqlRunStore.from_url(db_url)
    clock = VirtualClock(start)
    sched = Scheduler(clock=clock, runs=runs)

    @sched.cron("0 * * * * *", name="report", **options)  # type: ignore[arg-type]
    async def report(run: RunContext) -> dict[str, str]:
        assert run.scheduled_at is not None
        ran.append(run.scheduled_at)
        return {"at": run.scheduled_at.isoformat()}

    try:
        with anyio.fail_after(20):
            async with sched:
                await sched.wait_idle()  # the catch-up reads and writes SQL
                for _ in range(minutes):
                    await clock.advance(60)
                    await sched.wait_idle()
    finally:
        await runs.aclose()
    return ran


async def test_catch_up_all_after_a_restart_runs_each_missed_fire_once_in_order(
    db_url: str,
) -> None:
    assert await process(db_url, at(0.5), 3) == [at(1), at(2), at(3)]
    # down from 00:03:30 to 00:08:30; the new process catches up 00:04 to 00:08
    assert await process(db_url, at(8.5), 1, catch_up="all") == [
        at(4),
        at(5),
        at(6),
        at(7),
        at(8),
        at(9),
    ]
    # a second restart straight after finds nothing missed
    assert await process(db_url, at(9.5), 0, catch_up="all") == []
    store = SqlRunStore.from_url(db_url)
    try:
        records = await store.query(task_name="report", limit=None)
    finally:
        await store.aclose()
    fires = sorted(r.scheduled_at for r in records if r.scheduled_at)
    assert fires == [at(m) for m in range(1, 10)]
    assert {r.status for r in records} == {"succeeded"}
    assert {r.result["at"] for r in records} == {at(m).isoformat() for m in range(1, 10)}


async def test_catch_up_latest_after_a_restart_runs_the_newest_missed_fire_once(
    db_url: str,
) -> None:
    await process(db_url, at(0.5), 1)
    assert await process(db_url, at(30.25), 0, catch_up="latest") == [at(30)]
