"""Regression tests for defects found in review of the Redis lock (real ``redis-server``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import anyio
import pytest
from anyio.abc import SocketStream
from redis.asyncio import Redis

from scheduler import MemoryRunStore, RunContext, Scheduler, VirtualClock
from scheduler.backends.redis import RedisLock, make_redis_client
from tests.redis_server import RedisServer

T0 = datetime(2024, 1, 1, tzinfo=UTC)


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Redis]:
    client = make_redis_client(redis_url, socket_timeout=2)
    yield client
    await client.aclose()


class ReplyDropper:
    """A TCP proxy to Redis that relays the first command containing ``marker`` to the server
    but closes the client's connection instead of relaying its reply: the server ran it,
    and the client cannot know."""

    def __init__(self, port: int, marker: bytes) -> None:
        self.port = port
        self.marker = marker
        self.dropped: list[bytes] = []

    async def serve(self, *, task_status: anyio.abc.TaskStatus[int]) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        async with listener:
            task_status.started(listener.extra(anyio.abc.SocketAttribute.local_port))
            await listener.serve(self._handle)

    async def _handle(self, downstream: SocketStream) -> None:
        upstream = await anyio.connect_tcp("127.0.0.1", self.port)
        async with downstream, upstream, anyio.create_task_group() as tg:
            tg.start_soon(self._relay, upstream, downstream, tg.cancel_scope)
            async for data in downstream:
                await upstream.send(data)
                if not self.dropped and self.marker in data:
                    self.dropped.append(data)
                    tg.cancel_scope.cancel()  # the reply is never relayed
                    return
            tg.cancel_scope.cancel()

    @staticmethod
    async def _relay(src: SocketStream, dst: SocketStream, scope: anyio.CancelScope) -> None:
        try:
            async for data in src:
                await dst.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        scope.cancel()


async def test_a_lost_set_nx_reply_is_resolved_by_resending_it(
    redis_server: RedisServer, client: Redis
) -> None:
    """Regression test: the client retried the SET NX whose reply was lost, found its own
    lock and reported it held by someone else (and the lock stayed held for its TTL)."""
    dropper = ReplyDropper(redis_server.port, b"scheduler:lock:job")
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            port = await tg.start(dropper.serve)
            proxied = make_redis_client(f"redis://127.0.0.1:{port}/0", socket_timeout=2)
            try:
                lock = RedisLock(proxied)
                warm = await lock.acquire("warm-up", ttl=5)  # loads the scripts
                assert warm is not None and await warm.release()
                lease = await lock.acquire("job", ttl=30)
            finally:
                await proxied.aclose()
            tg.cancel_scope.cancel()
    assert len(dropper.dropped) == 1
    assert lease is not None
    fence = int(await client.get("scheduler:fence:job") or 0)
    assert lease.fence == fence
    assert await client.get("scheduler:lock:job") == lease.token  # ours


def test_the_lock_client_does_not_retry_commands() -> None:
    """Regression test: make_redis_client retried after a ConnectionError, which can run a
    command whose reply was lost a second time."""
    client = make_redis_client("redis://127.0.0.1:1/0")
    retry = client.connection_pool.connection_kwargs["retry"]
    assert retry.get_retries() == 0


async def test_claims_of_sub_second_fires_do_not_collide(client: Redis) -> None:
    """Regression test: claims were keyed on whole seconds, so the fires at 1.0 s and 1.5 s
    shared one key and the second was skipped as 'claimed' on every replica."""
    lock = RedisLock(client)
    assert await lock.claim_fire("fast", T0 + timedelta(seconds=1.0), ttl=60)
    assert await lock.claim_fire("fast", T0 + timedelta(seconds=1.5), ttl=60)
    assert not await lock.claim_fire("fast", T0 + timedelta(seconds=1.5), ttl=60)


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


async def _exists_after_reconnect(client: Redis, key: str) -> bool:
    """EXISTS, once more if the pooled connection died with the old server (no retries)."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    try:
        return bool(await client.exists(key))
    except RedisConnectionError:
        return bool(await client.exists(key))
