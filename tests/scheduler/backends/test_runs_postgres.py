"""SqlRunStore on a real PostgreSQL: replicas racing on one run table.

The RunStore and JobStore conformance suites run on PostgreSQL too (test_runs.py,
test_job_stores.py); this module adds what needs several replicas, each with its own engine.
"""

from __future__ import annotations

from datetime import timedelta

import anyio

from scheduler.backends.sql import SqlRunStore
from tests.scheduler.backends.test_runs import T0, record


async def test_replicas_racing_to_abandon_stale_runs_count_each_run_once(
    postgres_url: str,
) -> None:
    """Three replicas, each with its own engine, sweep the same 20 dead runs at once."""
    first = SqlRunStore.from_url(postgres_url)
    replicas = [first, SqlRunStore.from_url(postgres_url), SqlRunStore.from_url(postgres_url)]
    counts: list[int] = []

    async def sweep(replica: SqlRunStore) -> None:
        counts.append(await replica.abandon_stale("job", T0 + timedelta(hours=1)))

    try:
        with anyio.fail_after(10):
            for n in range(20):
                await first.add(record(n))
            await first.add(record(99, expires_at=T0 + timedelta(hours=2)))  # still alive
            for replica in replicas[1:]:
                await replica.get("warm-up")  # tables exist: no concurrent create
            async with anyio.create_task_group() as tg:
                for replica in replicas:
                    tg.start_soon(sweep, replica)
            runs = await first.query(limit=None)
    finally:
        for replica in replicas:
            await replica.aclose()
    assert sum(counts) == 20
    statuses = {r.id: r.status for r in runs}
    assert statuses.pop("run99") == "running"
    assert set(statuses.values()) == {"abandoned"}


async def test_concurrent_first_use_creates_the_tables_once(postgres_url: str) -> None:
    """Replicas starting together on an empty database all get a working run table."""
    replicas = [SqlRunStore.from_url(postgres_url) for _ in range(4)]

    async def add(i: int, replica: SqlRunStore) -> None:
        await replica.add(record(i))

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                for i, replica in enumerate(replicas):
                    tg.start_soon(add, i, replica)
            runs = await replicas[0].query(limit=None)
    finally:
        for replica in replicas:
            await replica.aclose()
    assert sorted(r.id for r in runs) == ["run0", "run1", "run2", "run3"]
