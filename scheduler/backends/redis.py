"""A lock for replicas on Redis, built on redis-py's asyncio ``Lock`` (asyncio only).

Keys, per job name: ``{prefix}:lock:{name}`` (the lock: ``SET NX PX`` with a random token,
released by a compare-and-delete script), ``{prefix}:fence:{name}`` (incremented once per
acquisition: the fencing token) and ``{prefix}:fire:{name}:{epoch_ms}`` (``SET NX PX``:
claims one scheduled fire, so it runs once even if the first replica's run ended before
another replica woke; keyed to the millisecond, so sub-second interval fires stay apart).

Fencing tokens: within one Redis lifetime each acquisition gets the previous token plus one.
When the counter key is missing (first use, or a restart of a Redis without persistence), a
script seeds it from the server's clock in milliseconds since the epoch before incrementing,
so tokens keep growing across such a restart as long as the server's clock did not go back
and the job averaged under one acquisition per millisecond since the key was last seeded.
A clock set back, or a restore from an old snapshot taken while keys were seeded in the
future, can still hand out a smaller token: fencing is only as monotonic as that clock.

Every acquisition builds a *new* redis-py ``Lock`` object (``thread_local=False``): one
object shared by several tasks shares one token, and a late ``release()`` from one task
would then delete the lock another task (or replica) now holds.
"""

from __future__ import annotations

import contextlib
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.lock import Lock as _RedisPyLock
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import LockError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["RedisLease", "RedisLock", "make_redis_client"]

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript


def make_redis_client(
    url: str,
    *,
    socket_timeout: float = 5.0,
    socket_connect_timeout: float = 2.0,
    max_connections: int = 20,
    pool_timeout: float = 5.0,
    retries: int = 0,
    health_check_interval: float = 30.0,
) -> Redis:
    """A Redis client configured for locks: explicit timeouts, a bounded blocking pool, and
    no automatic retry of commands.

    redis-py 8 retries a failed command (after a ``ConnectionError`` or a timeout) up to 10
    times by default. Neither error proves the command did not run: the server may have
    executed it and the reply been lost (a connection dropped or timed out while the reply
    was on its way). A retried ``SET NX`` then finds the lock it just took and reports it
    held by someone else, a retried ``INCR`` skips a fencing token, and a retried release
    reports a lock that was ours as lost. So nothing is retried by default: the error goes
    to the caller, and the scheduler records it (a ``lock-error`` skip, a renewal retried on
    its own schedule, an alarm). :class:`RedisLock` resolves a lost ``SET NX`` reply itself
    by reading the key back, and retries only the fencing ``INCR`` (a repeat skips a token,
    which fencing tolerates). After a server restart, a command sent on a pooled connection
    that died with the old server fails this way once; that connection is then replaced.

    :param url: ``redis://host:port/db``
    :param socket_timeout: seconds to wait for a reply before ``TimeoutError``
    :param socket_connect_timeout: seconds to wait for a connection
    :param max_connections: the pool's size; callers beyond it wait (the pool blocks)
    :param pool_timeout: seconds to wait for a free connection before an error
    :param retries: retries after a ``ConnectionError`` or timeout, with a short backoff;
        keep 0 for a client used by :class:`RedisLock` (see above)
    :param health_check_interval: seconds of idleness after which a connection is pinged
        before use, so a connection broken by a restart is found before a command is sent
    :return: a client that owns its pool; close it with ``await client.aclose()``
    """
    retry = (
        Retry(NoBackoff(), 0)
        if retries == 0
        else Retry(ExponentialBackoff(cap=0.5, base=0.05), retries)
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
        self._fence_script: AsyncScript | None = None

    def __repr__(self) -> str:
        return f"RedisLock(prefix={self.prefix!r})"

    def key(self, name: str) -> str:
        """The Redis key of the lock of job ``name``."""
        return f"{self.prefix}:lock:{name}"

    async def acquire(self, name: str, *, ttl: float) -> RedisLease | None:
        """Take the lock with a fresh token, then the next fencing token.

        :raises redis.exceptions.ConnectionError: (or ``TimeoutError``) if Redis cannot be
            reached, or it cannot be told whether the lock was taken
        """
        token = uuid.uuid4().hex.encode()
        if not await self._set_nx(self.key(name), token, ttl):
            return None
        lock = _RedisPyLock(
            self.client, self.key(name), timeout=ttl, blocking=False, thread_local=False
        )
        lock.local.token = token
        fence_key = f"{self.prefix}:fence:{name}"
        try:
            try:
                fence = int(await self._next_fence(keys=[fence_key]))
            except _UNSURE:  # it may have run: a retry at worst skips a token, never reuses one
                fence = int(await self._next_fence(keys=[fence_key]))
        except BaseException:
            with contextlib.suppress(Exception):  # else it expires by its TTL
                await lock.release()
            raise
        return RedisLease(lock, name, fence)

    async def claim_fire(self, name: str, fire: datetime, *, ttl: float) -> bool:
        epoch_ms = (fire - _EPOCH) // timedelta(milliseconds=1)
        key = f"{self.prefix}:fire:{name}:{epoch_ms}"
        return await self._set_nx(key, uuid.uuid4().hex.encode(), ttl)

    async def _set_nx(self, key: str, token: bytes, ttl: float) -> bool:
        """``SET key token NX PX ttl``, resolving a lost reply by reading the key back.

        The client does not retry (see :func:`make_redis_client`): after a connection error
        or timeout the ``SET`` may or may not have run. The key then holds our token (it
        ran: ours), another token (someone else's), or nothing (it did not run, so sending
        it again is safe). Each read or resend goes over a fresh connection.
        """
        px = max(1, int(ttl * 1000))
        unsure = False  # a SET was sent and its outcome is unknown
        last: Exception = RedisConnectionError(f"SET {key!r} was not attempted")
        for _ in range(_ATTEMPTS):
            try:
                if not unsure:
                    return bool(await self.client.set(key, token, nx=True, px=px))
                holder = await self.client.get(key)
            except _UNSURE as exc:
                unsure, last = True, exc
                continue
            if holder is not None:
                return bool(holder == token)
            unsure = False  # it did not run: send it again
        raise last

    @property
    def _next_fence(self) -> AsyncScript:
        if self._fence_script is None:
            self._fence_script = self.client.register_script(_NEXT_FENCE)
        return self._fence_script


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# INCR, seeding a missing counter from the server's clock (ms since the epoch) first.
_NEXT_FENCE = """
if redis.call('EXISTS', KEYS[1]) == 0 then
    local t = redis.call('TIME')
    local ms = string.format('%03d', math.floor(tonumber(t[2]) / 1000))
    redis.call('SET', KEYS[1], t[1] .. ms)
end
return redis.call('INCR', KEYS[1])
"""

#: errors after which a command may or may not have run on the server
_UNSURE = (RedisConnectionError, RedisTimeoutError)
_ATTEMPTS = 3


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
        """Compare-and-delete: deletes the key only if it still holds our token.

        If the reply is lost (the client does not retry), the key is read back: still our
        token, and the delete is sent again; anything else is reported as lost. That includes
        the one case a read cannot tell apart, a delete that ran before its reply was lost: a
        false alarm is preferred to missing a lock that a Redis restart took away.
        """
        token = self._lock.local.token
        for _ in range(_ATTEMPTS):
            try:
                await self._lock.release()
            except LockError:
                return False
            except _UNSURE:
                self._lock.local.token = token  # release() forgets it before sending
                try:
                    holder = await self._lock.redis.get(self._lock.name)
                except _UNSURE:
                    continue
                if holder != token:
                    return False
                continue
            return True
        raise RedisConnectionError(f"could not release {self._lock.name!r}; it expires by TTL")
