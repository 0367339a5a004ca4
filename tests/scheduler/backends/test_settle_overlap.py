"""Settles that overlap (the scheduler's background settler and a fire's own settle before
its acquire) on the real throwaway redis-server: neither raises, each unsettled token is
voided once, and a scheduler with several jobs survives a stall (review finding 1)."""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import anyio
import pytest
from redis.asyncio import Redis

from eventbus.backends.redis import make_redis_client
from scheduler import MemoryRunStore, RunContext, Scheduler
from scheduler.backends.redis import RedisLock
from tests.redis_server import RedisServer


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Redis]:
    client = make_redis_client(redis_url, socket_timeout=2)
    yield client
    await client.aclose()


async def test_two_settles_at_once_neither_raises_and_each_token_is_voided_once(
    client: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression test: the second settle deleted an entry the first had removed: KeyError."""
    lock = RedisLock(client, owner="replica-a")
    tokens = [lock._new_token() for _ in range(3)]
    for i, token in enumerate(tokens):
        assert (await lock._take(f"scheduler:lock:job{i}", token, ttl=30)).ours
        lock._remember(f"scheduler:lock:job{i}", token, 30_000)
    left: list[int] = []

    async def settle() -> None:
        left.append(await lock.settle())

    with caplog.at_level(logging.INFO, logger="scheduler"), anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(settle)
    assert left == [0, 0, 0, 0]
    assert lock.unsettled == 0
    for i in range(3):
        assert await client.exists(f"scheduler:lock:job{i}") == 0
    voided = [r for r in caplog.records if r.getMessage().startswith("voided")]
    assert len(voided) == 3  # once per token, however many settles ran


@pytest.mark.slow
async def test_a_scheduler_with_several_jobs_survives_a_stall_and_runs_the_next_fires(
    redis_server: RedisServer, redis_url: str
) -> None:
    """Regression test: with six jobs firing every second, the settles started by the fires
    and by the background settler overlapped after the stall; a KeyError ended the scheduler
    (its task group) or turned fires after the resume into lock-error skips."""
    impatient = make_redis_client(redis_url, socket_timeout=0.3, socket_connect_timeout=0.3)
    lock = RedisLock(impatient, owner="a")
    runs = MemoryRunStore()
    sched = Scheduler(lock=lock, runs=runs, min_interval=0, replica="a", shutdown_grace=2)

    async def job(run: RunContext) -> None:
        await anyio.sleep(0.01)

    names = [f"job{i}" for i in range(6)]
    for name in names:
        sched.add_cron(name, "* * * * * *", job)
    try:
        with anyio.fail_after(30):
            async with sched:
                await anyio.sleep(1.2)
                redis_server.pause()
                await anyio.sleep(1.5)  # longer than the client's 0.3 s timeout
                redis_server.resume()
                resumed = time.time()
                await anyio.sleep(3.2)
    finally:
        redis_server.resume()
        await impatient.aclose()
    records = await runs.query(limit=None)
    assert not [r for r in records if "KeyError" in (r.error or "")]
    after = datetime.fromtimestamp(resumed + 1, UTC)
    late = [r for r in records if r.scheduled_at is not None and r.scheduled_at >= after]
    outcomes = collections.Counter((r.task_name, r.status) for r in late)
    fires = {r.scheduled_at for r in late}
    assert len(fires) >= 2
    for name in names:  # every fire from a second after the resume ran, for every job
        assert outcomes[(name, "succeeded")] == len(fires), (name, outcomes)
    assert lock.unsettled == 0
