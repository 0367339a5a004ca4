"""The Redis lock when Redis stalls or a reply is lost: nothing is left that no run holds.

A stalled server (SIGSTOP) still receives what clients send; it runs those commands when it
resumes (SIGCONT), after the client gave up on them. A command whose reply timed out may
therefore take effect later, and a read sent afterwards on another connection may be served
before it. Every test here uses a client timeout shorter than the stall, on the real
throwaway redis-server of the session.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import anyio
import pytest
from anyio.abc import SocketStream
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from eventbus.backends.redis import make_redis_client
from scheduler import MemoryRunStore, RunContext, Scheduler
from scheduler.backends.redis import RedisLock
from tests.redis_server import RedisServer

T0 = datetime(2024, 1, 1, tzinfo=UTC)
UNSURE = (RedisConnectionError, RedisTimeoutError)


@pytest.fixture
async def impatient(redis_url: str) -> AsyncIterator[Redis]:
    """A client that gives up on a reply after 0.3 s: shorter than every stall below."""
    client = make_redis_client(redis_url, socket_timeout=0.3)
    yield client
    await client.aclose()


async def warm_up(lock: RedisLock) -> None:
    """Load the lock's scripts, so that a stalled command is the command itself."""
    lease = await lock.acquire("warm-up", ttl=5)
    assert lease is not None
    await lease.release()
    assert await lock.claim_fire("warm-up", T0, ttl=5)


async def test_an_acquire_cut_off_by_a_stall_leaves_no_lock_once_redis_answers(
    redis_server: RedisServer, impatient: Redis, client: Redis
) -> None:
    """Regression test: the SET sent into the stall ran on resume; its token held the lock
    for the whole TTL and every later acquire found it 'locked'."""
    lock = RedisLock(impatient, owner="replica-a")
    await warm_up(lock)
    redis_server.pause()
    try:
        with anyio.fail_after(10), pytest.raises(UNSURE):
            await lock.acquire("job", ttl=30)
    finally:
        redis_server.resume()
    with anyio.fail_after(10):
        lease = await lock.acquire("job", ttl=30)  # first answer: the lost SET is voided
        assert lease is not None
        assert await client.get(lock.key("job")) == lease.token
        assert await lease.release()
        assert await client.exists(lock.key("job")) == 0


async def test_another_replica_gets_the_lock_once_the_stalled_one_settles(
    redis_server: RedisServer, impatient: Redis, client: Redis
) -> None:
    lock = RedisLock(impatient, owner="replica-a")
    other = RedisLock(client, owner="replica-b")
    await warm_up(lock)
    redis_server.pause()
    try:
        with anyio.fail_after(10), pytest.raises(UNSURE):
            await lock.acquire("job", ttl=30)
        with anyio.fail_after(10):
            assert await lock.settle() == 1  # Redis does not answer: still unresolved
    finally:
        redis_server.resume()
    with anyio.fail_after(10):
        assert await lock.settle() == 0
        assert await client.exists(lock.key("job")) == 0
        lease = await other.acquire("job", ttl=30)
    assert lease is not None


async def test_a_release_cut_off_by_a_stall_is_settled(
    redis_server: RedisServer, impatient: Redis, client: Redis
) -> None:
    lock = RedisLock(impatient)
    lease = await lock.acquire("job", ttl=30)
    assert lease is not None
    redis_server.pause()
    try:
        with anyio.fail_after(10), pytest.raises(UNSURE):
            await lease.release()
    finally:
        redis_server.resume()
    with anyio.fail_after(10):
        assert await lock.settle() == 0
        assert await client.exists(lock.key("job")) == 0


async def test_a_claim_cut_off_by_a_stall_does_not_keep_the_fire_from_others(
    redis_server: RedisServer, impatient: Redis, client: Redis
) -> None:
    """A claim that ran after its caller gave up must not leave the fire claimed by nobody
    (catch-up after downtime claims past fires again)."""
    lock = RedisLock(impatient, owner="replica-a")
    other = RedisLock(client, owner="replica-b")
    await warm_up(lock)
    fire = T0 + timedelta(minutes=1)
    redis_server.pause()
    try:
        with anyio.fail_after(10), pytest.raises(UNSURE):
            await lock.claim_fire("job", fire, ttl=60)
    finally:
        redis_server.resume()
    with anyio.fail_after(10):
        assert await lock.claim_fire("job", fire + timedelta(minutes=1), ttl=60)  # settles first
        assert await other.claim_fire("job", fire, ttl=60)


async def test_a_voided_token_replayed_late_takes_nothing(client: Redis) -> None:
    """The stale command of an ambiguous attempt may run after its token was voided (it sat
    in a socket buffer): it must not take the lock then."""
    lock = RedisLock(client, owner="replica-a")
    token = lock._new_token()
    assert await lock._void(lock.key("job"), token, 30_000) is False  # nothing to delete
    assert not (await lock._take(lock.key("job"), token, ttl=30)).ours  # the late replay
    assert await client.exists(lock.key("job")) == 0
    assert await lock.acquire("job", ttl=30) is not None


class Proxy:
    """A TCP proxy to the Redis on *port*, listening on a free loopback port; each subclass
    decides what happens to the commands that mention *marker*."""

    def __init__(self, port: int, marker: bytes) -> None:
        self.port = port
        self.marker = marker

    async def serve(self, *, task_status: anyio.abc.TaskStatus[int]) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        async with listener:
            task_status.started(listener.extra(anyio.abc.SocketAttribute.local_port))
            await listener.serve(self._handle)

    async def _handle(self, downstream: SocketStream) -> None:
        raise NotImplementedError


@asynccontextmanager
async def through(proxy: Proxy, *, socket_timeout: float) -> AsyncIterator[Redis]:
    """A client whose connections go through *proxy*, served while the block runs."""
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve)
        proxied = make_redis_client(f"redis://127.0.0.1:{port}/0", socket_timeout=socket_timeout)
        try:
            yield proxied
        finally:
            await proxied.aclose()
        tg.cancel_scope.cancel()


class HoldingProxy(Proxy):
    """Holds back the first command mentioning ``marker`` and sends it to the server only
    after the reply to the *next* such command (on any connection) has reached the client:
    a read-back served before the command it reads back."""

    def __init__(self, port: int, marker: bytes) -> None:
        super().__init__(port, marker)
        self.held: bytes | None = None
        self.released = anyio.Event()
        self._trigger: object | None = None
        self._answered = anyio.Event()

    async def _handle(self, downstream: SocketStream) -> None:
        upstream = await anyio.connect_tcp("127.0.0.1", self.port)
        conn = object()
        async with downstream, upstream, anyio.create_task_group() as tg:
            tg.start_soon(self._relay_replies, upstream, downstream, conn, tg.cancel_scope)
            try:
                async for data in downstream:
                    if self.marker in data and self.held is None:
                        self.held = data  # never forwarded on this connection
                        continue
                    if self.marker in data and self._trigger is None:
                        self._trigger = conn
                        await upstream.send(data)
                        await self._answered.wait()
                        await self._send_held()
                        continue
                    await upstream.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass
            tg.cancel_scope.cancel()

    async def _relay_replies(
        self, src: SocketStream, dst: SocketStream, conn: object, scope: anyio.CancelScope
    ) -> None:
        try:
            async for data in src:
                await dst.send(data)
                if conn is self._trigger:
                    self._answered.set()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        scope.cancel()

    async def _send_held(self) -> None:
        assert self.held is not None
        async with await anyio.connect_tcp("127.0.0.1", self.port) as late:
            await late.send(self.held)
            await late.receive()  # it ran; nobody hears the reply
        self.released.set()


async def test_a_read_back_served_before_the_delayed_set_does_not_lose_our_lock(
    redis_server: RedisServer, client: Redis
) -> None:
    """Regression test: the GET was served before the delayed SET NX; the resend's NX then
    failed on our own key, and the lock was reported held by someone else (held for its TTL
    by a token no run knew)."""
    proxy = HoldingProxy(redis_server.port, b"scheduler:lock:job")
    with anyio.fail_after(15):
        async with through(proxy, socket_timeout=0.5) as proxied:
            lock = RedisLock(proxied, owner="replica-a")
            await warm_up(lock)
            lease = await lock.acquire("job", ttl=30)
            await proxy.released.wait()
    assert proxy.held is not None
    assert lease is not None
    assert await client.get(lock.key("job")) == lease.token  # ours, not a stranger's


async def test_a_read_back_served_before_the_delayed_claim_does_not_lose_the_fire(
    redis_server: RedisServer, client: Redis
) -> None:
    """Regression test: the same race on a fire claim made it 'claimed' by nobody."""
    proxy = HoldingProxy(redis_server.port, b"scheduler:fire:job:")
    with anyio.fail_after(15):
        async with through(proxy, socket_timeout=0.5) as proxied:
            lock = RedisLock(proxied, owner="replica-a")
            await warm_up(lock)
            won = await lock.claim_fire("job", T0, ttl=60)
            await proxy.released.wait()
    assert proxy.held is not None
    assert won is True


async def test_a_locked_skip_names_the_holder(client: Redis) -> None:
    holder = await RedisLock(client, owner="replica-a").acquire("job", ttl=30)
    assert holder is not None
    sched = Scheduler(lock=RedisLock(client, owner="replica-b"), replica="replica-b")

    @sched.interval(seconds=3600, name="job")
    async def job(run: RunContext) -> None:
        raise AssertionError("must not run while replica-a holds the lock")

    with anyio.fail_after(5):
        rec = await sched.trigger("job")
    assert rec.status == "skipped"
    assert rec.error is not None and rec.error.startswith("locked:")
    assert "'replica-a'" in rec.error


class StallAfterFirstClaim(RedisLock):
    """Stops Redis right after this replica wins its first fire claim: its lock's SET NX is
    sent into the stall (the issue's scenario: 18 fires lost on 3 replicas)."""

    def __init__(self, client: Redis, server: RedisServer, owner: str) -> None:
        super().__init__(client, owner=owner)
        self.server = server
        self.stalled = anyio.Event()

    async def claim_fire(self, name: str, fire: datetime, *, ttl: float) -> bool:
        won = await super().claim_fire(name, fire, ttl=ttl)
        if won and not self.stalled.is_set():
            self.server.pause()
            self.stalled.set()
        return won


@pytest.mark.slow
async def test_replicas_run_the_first_fires_after_a_stall_that_cut_off_an_acquire(
    redis_server: RedisServer, redis_url: str, impatient: Redis
) -> None:
    """Regression test: after a stall between a won claim and the lock, every fire was
    skipped as 'locked' for the whole lock_ttl, on every replica, with no alarm."""
    other_client = make_redis_client(redis_url, socket_timeout=0.3)
    stalling = StallAfterFirstClaim(impatient, redis_server, owner="replica-a")
    plain = RedisLock(other_client, owner="replica-b")
    replicas = [
        Scheduler(lock=lock, runs=MemoryRunStore(), replica=lock.owner, shutdown_grace=2)
        for lock in (stalling, plain)
    ]
    for sched in replicas:

        @sched.cron("* * * * * *", name="tick", lock_ttl=30)
        async def tick(run: RunContext) -> None:
            pass

    try:
        with anyio.fail_after(20):
            async with replicas[0], replicas[1]:
                await stalling.stalled.wait()
                await anyio.sleep(1.5)  # longer than the client's 0.3 s timeout
                redis_server.resume()
                resumed = time.time()
                await anyio.sleep(3.2)
    finally:
        redis_server.resume()
        await other_client.aclose()
    records = [r for s in replicas for r in await s.runs.query(limit=None)]
    after = datetime.fromtimestamp(resumed + 1, UTC)
    ran = sorted(r.scheduled_at for r in records if r.status == "succeeded" if r.scheduled_at)
    due = sorted({r.scheduled_at for r in records if r.scheduled_at and r.scheduled_at >= after})
    assert len(due) >= 2
    assert [t for t in ran if t >= after] == due  # each fire from a second after resume ran
    reasons = [(r.error or "").split(":")[0] for r in records if r.status == "skipped"]
    assert "lock-error" in reasons  # the stalled fire itself is reported, not lost silently
    late = [r for r in records if r.scheduled_at and r.scheduled_at >= after]
    assert not [r for r in late if (r.error or "").startswith("locked")]
    async with make_redis_client(redis_url) as check:
        assert await check.exists(stalling.key("tick")) == 0


# -- a reply lost on its way back, and a client that never resends on its own -------------


class ReplyDropper(Proxy):
    """Relays the first command containing ``marker`` to the server but closes the client's
    connection instead of relaying its reply: the server ran it, and the client cannot know."""

    def __init__(self, port: int, marker: bytes) -> None:
        super().__init__(port, marker)
        self.dropped: list[bytes] = []

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
        async with through(dropper, socket_timeout=2) as proxied:
            lock = RedisLock(proxied)
            warm = await lock.acquire("warm-up", ttl=5)  # loads the scripts
            assert warm is not None and await warm.release()
            lease = await lock.acquire("job", ttl=30)
    assert len(dropper.dropped) == 1
    assert lease is not None
    fence = int(await client.get("scheduler:fence:job") or 0)
    assert lease.fence == fence
    assert await client.get("scheduler:lock:job") == lease.token  # ours
