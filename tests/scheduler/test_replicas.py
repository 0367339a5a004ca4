"""Three scheduler processes, one Redis, one SQLite file: each fire runs exactly once.

The one end-to-end test on real time (about 6 s once the replicas are up): replicas are
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

from scheduler.backends.sql import SqlRunStore

ROOT = Path(__file__).resolve().parents[2]
SECONDS = 5


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_three_replica_processes_run_each_fire_exactly_once(
    redis_url: str, tmp_path: Path
) -> None:
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'runs.db'}"
    store = SqlRunStore.from_url(db_url)
    await store.query(limit=1)  # creates the tables before the replicas start
    procs: list[Process] = []
    try:
        for i in range(3):
            command = [sys.executable, "-m", "tests.scheduler.replica_app"]
            procs.append(
                await anyio.open_process(command + [redis_url, db_url, f"replica-{i}"], cwd=ROOT)
            )
        with anyio.fail_after(30):
            for proc in procs:
                assert proc.stdout is not None
                assert await proc.stdout.receive() == b"ready\n"
        ready = time.time()
        await anyio.sleep(SECONDS)  # real time: the one end-to-end test
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
