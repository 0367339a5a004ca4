"""The scheduler on a real Redis: competing replicas, TTL alarms, renewal, lost locks.

Redis expiry is real time, so the TTL tests use short TTLs and wait for conditions (never a
fixed sleep standing in for an assertion); the competition test runs on a virtual clock.
"""

from __future__ import annotations

import functools
import logging
from datetime import UTC, datetime

import anyio
import pytest
from redis.asyncio import Redis
from redis.exceptions import TimeoutError as RedisTimeoutError

from eventbus import EventBus, EventRegistry
from eventbus.backends.redis import make_redis_client
from scheduler import LockLost, MemoryRunStore, RunContext, Scheduler, VirtualClock
from scheduler.backends.redis import RedisLock
from tests.redis_server import RedisServer

T0 = datetime(2024, 1, 1, tzinfo=UTC)


async def wait_until_gone(client: Redis, key: str) -> None:
    """Wait for Redis to expire ``key`` (real time: expiry is the server's)."""
    for _ in range(150):
        if not await client.exists(key):
            return
        await anyio.sleep(0.02)
    raise AssertionError(f"{key!r} did not expire within 3 s")


async def test_two_schedulers_compete_for_100_fires_and_each_runs_exactly_once(
    client: Redis,
) -> None:
    clock = VirtualClock(T0)
    ran: list[tuple[str, datetime | None]] = []
    replicas = []
    for replica in ("a", "b"):
        sched = Scheduler(
            clock=clock, lock=RedisLock(client), runs=MemoryRunStore(), replica=replica
        )

        @sched.cron("* * * * * *", name="tick", lock_ttl=30)
        async def tick(run: RunContext, replica: str = replica) -> None:
            ran.append((replica, run.scheduled_at))

        replicas.append(sched)
    a, b = replicas
    with anyio.fail_after(30):
        async with a, b:
            for _ in range(100):
                await clock.advance(1)
                await a.wait_idle()  # Redis I/O is invisible to the virtual clock
                await b.wait_idle()
    fires = [t for _, t in ran]
    assert len(fires) == 100 and len(set(fires)) == 100
    for sched in replicas:
        records = await sched.runs.query(limit=None)
        reasons = {(r.error or "").split(":")[0] for r in records if r.status == "skipped"}
        assert reasons <= {"claimed"}
    total = sum(s.statistics().succeeded for s in replicas)
    skipped = sum(s.statistics().skipped for s in replicas)
    assert (total, skipped) == (100, 100)


async def test_a_run_that_outlives_its_ttl_raises_the_alarm_and_spares_the_new_holder(
    client: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    reg = EventRegistry()
    bus = EventBus(registry=reg)
    lock = RedisLock(client)
    sched = Scheduler(lock=lock, bus=bus)  # declares its events in the bus's registry
    alarms: list[LockLost] = []
    bus.on(LockLost)(alarms.append)
    key = lock.key("slow")
    took_over: list[int] = []

    @sched.interval(seconds=3600, name="slow", lock_ttl=0.2)
    async def slow(run: RunContext) -> None:
        await wait_until_gone(client, key)  # the TTL ran out mid-run
        other = await RedisLock(client).acquire("slow", ttl=30)
        assert other is not None
        took_over.append(other.fence)

    with anyio.fail_after(5), caplog.at_level(logging.ERROR, logger="scheduler"):
        rec = await sched.trigger("slow")
    assert rec.fence is not None
    assert (rec.status, rec.lock_lost, took_over) == ("succeeded", True, [rec.fence + 1])
    assert await client.exists(key) == 1  # the other holder's lock was not deleted
    assert [a.run_id for a in alarms] == [rec.id]
    [log] = [r for r in caplog.records if "lost its lock" in r.getMessage()]
    assert log.levelno == logging.ERROR and rec.trace_id in log.getMessage()
    stored = await sched.runs.get(rec.id)
    assert stored is not None and stored.lock_lost


async def test_renewal_keeps_a_long_runs_lock(client: Redis) -> None:
    lock = RedisLock(client)
    sched = Scheduler(lock=lock)
    held: list[bool] = []

    @sched.interval(seconds=3600, name="long", lock_ttl=0.3, renew=True)
    async def long(run: RunContext) -> None:
        for _ in range(10):  # 1 s of work, more than three TTLs
            await anyio.sleep(0.1)
            held.append(bool(await client.exists(lock.key("long"))))

    with anyio.fail_after(5):
        rec = await sched.trigger("long")
    assert (rec.status, rec.lock_lost) == ("succeeded", False)
    assert all(held) and len(held) == 10
    assert await client.exists(lock.key("long")) == 0  # released at the end


async def test_losing_the_lock_cancels_the_run(client: Redis) -> None:
    lock = RedisLock(client)
    sched = Scheduler(lock=lock)
    started = anyio.Event()
    finished = False

    @sched.interval(seconds=3600, name="victim", lock_ttl=0.3, renew=True)
    async def victim(run: RunContext) -> None:
        nonlocal finished
        started.set()
        await anyio.sleep_forever()
        finished = True

    result = []
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:

            async def trigger() -> None:
                result.append(await sched.trigger("victim"))

            tg.start_soon(trigger)
            await started.wait()
            await client.set(lock.key("victim"), b"intruder")  # someone else holds it now
    [rec] = result
    assert (rec.status, rec.lock_lost, finished) == ("failed", True, False)
    assert rec.error is not None and rec.error.startswith("LockLostError: lock 'victim' was lost")
    assert await client.get(lock.key("victim")) == b"intruder"


async def test_a_redis_restart_mid_run_is_detected(
    client: Redis, redis_server: RedisServer
) -> None:
    lock = RedisLock(client)
    sched = Scheduler(lock=lock)
    started, proceed = anyio.Event(), anyio.Event()

    @sched.interval(seconds=3600, name="job", lock_ttl=30)
    async def job(run: RunContext) -> None:
        started.set()
        await proceed.wait()

    result = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def trigger() -> None:
                result.append(await sched.trigger("job"))

            tg.start_soon(trigger)
            await started.wait()
            await anyio.to_thread.run_sync(redis_server.restart)  # the lock key is gone
            proceed.set()
    [rec] = result
    assert (rec.status, rec.lock_lost) == ("succeeded", True)
    assert sched.statistics().lock_lost == 1


async def test_a_half_second_interval_runs_every_fire_through_the_redis_lock(
    client: Redis,
) -> None:
    """Regression test: every other fire of a 0.5 s interval was skipped as 'claimed'."""
    clock = VirtualClock(T0)
    runs = MemoryRunStore()
    sched = Scheduler(clock=clock, runs=runs, lock=RedisLock(client))

    @sched.interval(seconds=0.5, name="fast", lock_ttl=5)
    async def fast(run: RunContext) -> None:
        pass

    with anyio.fail_after(10):
        async with sched:
            for _ in range(6):
                await clock.advance(0.5)
                await sched.wait_idle()
    statuses = [r.status for r in await runs.query(limit=None)]
    assert statuses == ["succeeded"] * 6


async def test_fencing_tokens_keep_growing_across_a_redis_restart_without_persistence(
    redis_server: RedisServer, redis_url: str
) -> None:
    """Regression test: the fence counter restarted at 1 after Redis lost its keys."""
    before = []
    client = make_redis_client(redis_url, socket_timeout=2)
    try:
        lock = RedisLock(client)
        with anyio.fail_after(10):
            for _ in range(3):
                lease = await lock.acquire("job", ttl=5)
                assert lease is not None
                before.append(lease.fence)
                await lease.release()
            await anyio.to_thread.run_sync(redis_server.restart)
            assert not await _exists_after_reconnect(client, "scheduler:fence:job")
            lease = await lock.acquire("job", ttl=5)
    finally:
        await client.aclose()
    assert before == [before[0], before[0] + 1, before[0] + 2]
    assert lease is not None and lease.fence > before[-1]


# -- the server check at first use -----------------------------------------------------------


async def test_the_lock_warns_once_at_first_use_when_redis_would_lose_locks(
    client: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """The session's server keeps nothing on disk: one WARNING, however many tasks take a
    lock at once and however often."""
    lock = RedisLock(client)
    with caplog.at_level(logging.WARNING, logger="scheduler"), anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for n in range(5):
                tg.start_soon(functools.partial(lock.acquire, f"job{n}", ttl=5))
        assert await lock.claim_fire("job0", T0, ttl=5)
        assert await lock.holder("job1") is not None
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.name == "scheduler"
    assert "can lose locks: no persistence" in warning.getMessage()
    assert "another replica start the same job" in warning.getMessage()


async def test_a_lock_told_not_to_check_says_nothing(
    client: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """The domain's app checks the server once for its counters and its lock together."""
    lock = RedisLock(client, check_server=False)
    with caplog.at_level(logging.WARNING), anyio.fail_after(10):
        assert await lock.acquire("job", ttl=5) is not None
    assert caplog.records == []


async def test_a_check_that_cannot_reach_redis_is_the_calls_error_and_runs_again(
    redis_server: RedisServer, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = make_redis_client(redis_url, socket_timeout=0.3)
    lock = RedisLock(client)
    try:
        with anyio.fail_after(10), caplog.at_level(logging.WARNING, logger="scheduler"):
            redis_server.pause()
            try:
                with pytest.raises(RedisTimeoutError):
                    await lock.acquire("job", ttl=5)
            finally:
                redis_server.resume()
            assert lock.unsettled == 0  # nothing was sent but the check
            assert caplog.records == []
            lease = await lock.acquire("job", ttl=5)
    finally:
        await client.aclose()
    assert lease is not None
    assert ["can lose locks" in r.getMessage() for r in caplog.records] == [True]


async def _exists_after_reconnect(client: Redis, key: str) -> bool:
    """EXISTS, once more if the pooled connection died with the old server (no retries)."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    try:
        return bool(await client.exists(key))
    except RedisConnectionError:
        return bool(await client.exists(key))
