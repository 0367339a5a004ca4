"""Three scheduler processes, one Redis, one SQLite file: each fire runs exactly once, and
after downtime each missed fire is caught up once.

The end-to-end tests on real time (about 6 s and 3 s once the replicas are up): replicas are
separate processes, so a virtual clock cannot be shared.
"""

from __future__ import annotations

import math
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process

from scheduler import RunRecord
from scheduler.backends.sql import SqlRunStore

ROOT = Path(__file__).resolve().parents[3]
SECONDS = 5


async def run_replicas(
    redis_url: str, db_url: str, seconds: float, *options: str
) -> tuple[float, float]:
    """Start three replica processes, let them run ``seconds`` once all are ready, stop them;
    returns when all were ready and when they were told to stop (epoch seconds)."""
    procs: list[Process] = []
    try:
        for i in range(3):
            command = [sys.executable, "-m", "tests.scheduler.backends.replica_app"]
            args = [redis_url, db_url, f"replica-{i}", *options]
            procs.append(await anyio.open_process(command + args, cwd=ROOT))
        with anyio.fail_after(30):
            for proc in procs:
                assert proc.stdout is not None
                assert await proc.stdout.receive() == b"ready\n"
        ready = time.time()
        await anyio.sleep(seconds)  # real time: replicas are processes
        stopping = time.time()
        with anyio.fail_after(10):
            for proc in procs:
                assert proc.stdin is not None
                await proc.stdin.aclose()
            for proc in procs:
                assert await proc.wait() == 0
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            await proc.aclose()
    return ready, stopping


async def test_three_replica_processes_run_each_fire_exactly_once(
    redis_url: str, tmp_path: Path
) -> None:
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'runs.db'}"
    store = SqlRunStore.from_url(db_url)
    await store.query(limit=1)  # creates the tables before the replicas start
    ready, stopping = await run_replicas(redis_url, db_url, SECONDS)
    records = await store.query(limit=None)
    await store.aclose()
    succeeded = Counter(r.scheduled_at for r in records if r.status == "succeeded")
    assert set(succeeded.values()) == {1}  # no fire ran twice
    # every fire while all three were up ran (once)
    window = range(math.ceil(ready), math.floor(stopping))
    expected = {datetime.fromtimestamp(t, UTC) for t in window}
    assert len(expected) >= SECONDS - 1
    assert expected <= set(succeeded)
    assert all(r.status in ("succeeded", "skipped") for r in records)
    skips = {(r.error or "").split(":")[0] for r in records if r.status == "skipped"}
    assert skips <= {"claimed", "locked"}
    assert len({r.replica for r in records}) == 3  # every replica took part
    fences = sorted(r.fence or 0 for r in records if r.status == "succeeded")
    # one acquisition per fire (the counter is seeded from Redis's clock, then counts by one)
    assert fences == list(range(fences[0], fences[0] + len(succeeded)))


@pytest.mark.slow
async def test_three_replica_processes_after_downtime_catch_up_each_missed_fire_once(
    redis_url: str, tmp_path: Path
) -> None:
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'runs.db'}"
    store = SqlRunStore.from_url(db_url)
    down_since = math.floor(time.time()) - 8  # the last fire before the downtime
    last = datetime.fromtimestamp(down_since, UTC)
    await store.add(
        RunRecord(
            id="before-the-downtime",
            task_name="tick",
            trigger="cron",
            status="succeeded",
            scheduled_at=last,
            started_at=last,
            finished_at=last,
        )
    )
    launched = math.floor(time.time())
    await run_replicas(redis_url, db_url, 2, "all")
    records = await store.query(task_name="tick", limit=None)
    await store.aclose()
    succeeded = Counter(r.scheduled_at for r in records if r.status == "succeeded")
    assert set(succeeded.values()) == {1}  # no fire ran twice
    missed = {datetime.fromtimestamp(t, UTC) for t in range(down_since + 1, launched + 1)}
    assert len(missed) >= 8
    assert missed <= set(succeeded)  # every fire missed before any replica started ran
    runs = [r for r in sorted(records, key=lambda r: r.started_at) if r.status == "succeeded"]
    caught_up = [r.scheduled_at for r in runs if r.scheduled_at in missed]
    assert caught_up == sorted(missed)  # in order, whichever replica ran each
    reasons = {(r.error or "").split(":")[0] for r in records if r.status == "skipped"}
    assert "missed" not in reasons  # within max_catch_up: nothing given up
