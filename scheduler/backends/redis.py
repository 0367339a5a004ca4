"""A lock for replicas on Redis, built on redis-py's asyncio ``Lock`` (asyncio only).

Keys, per job name: ``{prefix}:lock:{name}`` (the lock: ``SET NX PX`` with a random token,
released by a compare-and-delete script), ``{prefix}:fence:{name}`` (``INCR`` once per
acquisition: the fencing token) and ``{prefix}:fire:{name}:{epoch}`` (``SET NX PX``: claims
one scheduled fire, so it runs once even if the first replica's run ended before another
replica woke).

Every acquisition builds a *new* redis-py ``Lock`` object (``thread_local=False``): one
object shared by several tasks shares one token, and a late ``release()`` from one task
would then delete the lock another task (or replica) now holds.
"""

from __future__ import annotations

import contextlib
from datetime import datetime

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.lock import Lock as _RedisPyLock
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import LockError

__all__ = ["RedisLease", "RedisLock", "make_redis_client"]


def make_redis_client(
    url: str,
    *,
    socket_timeout: float = 5.0,
    socket_connect_timeout: float = 2.0,
    max_connections: int = 20,
    pool_timeout: float = 5.0,
    retries: int = 2,
    health_check_interval: float = 30.0,
) -> Redis:
    """A Redis client configured for locks: explicit timeouts, a bounded blocking pool, and
    retries only where a retry cannot run a command twice.

    redis-py 8's default retries a command up to 10 times after a *timeout* too. A timed-out
    command may still have run on the server, so a retried ``INCR`` would skip a fencing
    token and a retried release could report a lost lock that was ours. Here only
    ``ConnectionError`` is retried (a dead pooled connection, typically after a server
    restart: the command never reached the new server), with a short backoff; a timeout is
    reported to the caller, and the scheduler records it (a skipped fire, a failed renewal).

    :param url: ``redis://host:port/db``
    :param socket_timeout: seconds to wait for a reply before ``TimeoutError``
    :param socket_connect_timeout: seconds to wait for a connection
    :param max_connections: the pool's size; callers beyond it wait (the pool blocks)
    :param pool_timeout: seconds to wait for a free connection before an error
    :param retries: retries after a ``ConnectionError``
    :param health_check_interval: seconds of idleness after which a connection is pinged
        before use, so a connection broken by a restart is found before a command is sent
    :return: a client that owns its pool; close it with ``await client.aclose()``
    """
    retry = Retry(
        ExponentialBackoff(cap=0.5, base=0.05),
        retries,
        supported_errors=(RedisConnectionError,),
    )
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=pool_timeout,
        socket_timeout=socket_timeout,
        socket_connect_timeout=socket_connect_timeout,
        retry=retry,
        health_check_interval=health_check_interval,
    )
    return Redis.from_pool(pool)


class RedisLock:
    """Mutual exclusion of a job's runs across every replica using the same Redis.

    Ownership: the client is the caller's; this class never closes it.

    :param client: an asyncio Redis client, ideally from :func:`make_redis_client`
    :param prefix: the key prefix (several applications can share one Redis)
    """

    def __init__(self, client: Redis, *, prefix: str = "scheduler") -> None:
        self.client = client
        self.prefix = prefix

    def __repr__(self) -> str:
        return f"RedisLock(prefix={self.prefix!r})"

    def key(self, name: str) -> str:
        """The Redis key of the lock of job ``name``."""
        return f"{self.prefix}:lock:{name}"

    async def acquire(self, name: str, *, ttl: float) -> RedisLease | None:
        lock = _RedisPyLock(
            self.client, self.key(name), timeout=ttl, blocking=False, thread_local=False
        )
        if not await lock.acquire(blocking=False):
            return None
        try:
            fence = int(await self.client.incr(f"{self.prefix}:fence:{name}"))
        except BaseException:
            with contextlib.suppress(Exception):  # else it expires by its TTL
                await lock.release()
            raise
        return RedisLease(lock, name, fence)

    async def claim_fire(self, name: str, fire: datetime, *, ttl: float) -> bool:
        key = f"{self.prefix}:fire:{name}:{int(fire.timestamp())}"
        return bool(await self.client.set(key, b"1", nx=True, px=max(1, int(ttl * 1000))))


class RedisLease:
    """One acquisition of a :class:`RedisLock`: its own redis-py ``Lock`` and token."""

    def __init__(self, lock: _RedisPyLock, name: str, fence: int) -> None:
        self._lock = lock
        self.name = name
        self._fence = fence

    def __repr__(self) -> str:
        return f"RedisLease(name={self.name!r}, fence={self._fence})"

    @property
    def fence(self) -> int:
        return self._fence

    async def extend(self) -> bool:
        """Reset the TTL, atomically checking that the token is still ours."""
        try:
            await self._lock.reacquire()
        except LockError:  # LockNotOwnedError included
            return False
        return True

    async def release(self) -> bool:
        """Compare-and-delete: deletes the key only if it still holds our token."""
        try:
            await self._lock.release()
        except LockError:
            return False
        return True
