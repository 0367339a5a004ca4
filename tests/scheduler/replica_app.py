"""One scheduler replica, for the multi-process test (``test_replicas.py``).

``python -m tests.scheduler.replica_app REDIS_URL DB_URL NAME START STOP``: waits until the
UTC epoch START, runs a scheduler with a one-second cron job until STOP, then exits. Every
replica shares one Redis (the lock) and one SQLite file (the run table).
"""

from __future__ import annotations

import sys
import time

import anyio

from scheduler import RunContext, Scheduler
from scheduler.backends.redis import RedisLock, make_redis_client
from scheduler.backends.sql import SqlRunStore


async def main(redis_url: str, db_url: str, name: str, start: float, stop: float) -> None:
    client = make_redis_client(redis_url)
    runs = SqlRunStore.from_url(db_url, create=False)
    sched = Scheduler(lock=RedisLock(client), runs=runs, replica=name, shutdown_grace=2)

    @sched.cron("* * * * * *", name="tick", lock_ttl=10)
    async def tick(run: RunContext) -> None:
        await anyio.sleep(0.05)  # a little work, so runs overlap other replicas' wake-ups

    await anyio.sleep(max(0.0, start - time.time()))
    try:
        async with sched:
            await anyio.sleep(max(0.0, stop - time.time()))
    finally:
        await runs.aclose()
        await client.aclose()


if __name__ == "__main__":
    redis_url, db_url, name, start, stop = sys.argv[1:]
    anyio.run(main, redis_url, db_url, name, float(start), float(stop), backend="asyncio")
