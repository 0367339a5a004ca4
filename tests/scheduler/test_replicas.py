"""Three scheduler processes, one Redis, one SQLite file: each fire runs exactly once.

The one end-to-end test on real time (about 8 s): replicas are separate processes, so a
virtual clock cannot be shared.
"""

from __future__ import annotations

import math
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from scheduler.backends.sql import SqlRunStore

ROOT = Path(__file__).resolve().parents[2]
FIRES = 5


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_three_replica_processes_run_each_fire_exactly_once(
    redis_url: str, tmp_path: Path
) -> None:
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'runs.db'}"
    store = SqlRunStore.from_url(db_url)
    await store.query(limit=1)  # creates the tables before the replicas start
    start = math.floor(time.time()) + 2.5  # half-way between seconds: no boundary ambiguity
    stop = start + FIRES
    results: dict[int, subprocess.CompletedProcess[bytes]] = {}

    async def replica(i: int) -> None:
        command = [sys.executable, "-m", "tests.scheduler.replica_app"]
        args = [redis_url, db_url, f"replica-{i}", str(start), str(stop)]
        results[i] = await anyio.run_process(command + args, cwd=ROOT, check=False)

    with anyio.fail_after(stop - time.time() + 10):  # a hung replica is killed on cancel
        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(replica, i)
    for result in results.values():
        assert result.returncode == 0, result.stderr.decode()
    records = await store.query(limit=None)
    await store.aclose()
    expected = [datetime.fromtimestamp(math.ceil(start) + i, UTC) for i in range(FIRES)]
    succeeded = Counter(r.scheduled_at for r in records if r.status == "succeeded")
    assert sorted(succeeded) == expected
    assert set(succeeded.values()) == {1}
    assert all(r.status in ("succeeded", "skipped") for r in records)
    skips = {(r.error or "").split(":")[0] for r in records if r.status == "skipped"}
    assert skips <= {"claimed", "locked"}
    assert len({r.replica for r in records}) == 3  # every replica took part
    fences = sorted(r.fence for r in records if r.fence is not None)
    assert fences == list(range(1, FIRES + 1))
