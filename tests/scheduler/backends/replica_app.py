"""One scheduler replica, for the multi-process test (``test_replicas.py``).

``python -m tests.scheduler.backends.replica_app REDIS_URL DB_URL NAME [CATCH_UP]``: starts a
scheduler with a one-second cron job (with ``catch_up=CATCH_UP``, default ``skip``), writes
``ready`` to stdout, and runs until stdin is closed. Every replica shares one Redis (the
lock) and one SQLite file (the run table).
"""

from __future__ import annotations

import sys
from typing import cast

import anyio

from eventbus.backends.redis import make_redis_client
from scheduler import RunContext, Scheduler
from scheduler._jobs import CatchUp
from scheduler.backends.redis import RedisLock
from scheduler.backends.sql import SqlRunStore


async def main(redis_url: str, db_url: str, name: str, catch_up: CatchUp) -> None:
    client = make_redis_client(redis_url)
    runs = SqlRunStore.from_url(db_url, create=False)
    sched = Scheduler(lock=RedisLock(client), runs=runs, replica=name, shutdown_grace=2)

    @sched.cron("* * * * * *", name="tick", lock_ttl=10, catch_up=catch_up, max_catch_up=60)
    async def tick(run: RunContext) -> None:
        await anyio.sleep(0.05)  # a little work, so runs overlap other replicas' wake-ups

    try:
        async with sched:
            sys.stdout.write("ready\n")
            sys.stdout.flush()
            await anyio.to_thread.run_sync(sys.stdin.read)  # until the parent closes stdin
    finally:
        await runs.aclose()
        await client.aclose()


if __name__ == "__main__":
    redis_url, db_url, name = sys.argv[1:4]
    catch_up = cast(CatchUp, sys.argv[4] if len(sys.argv) > 4 else "skip")
    anyio.run(main, redis_url, db_url, name, catch_up, backend="asyncio")
