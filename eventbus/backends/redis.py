"""Redis plumbing shared by every package: one client factory, and the server check that
refuses a Redis which would silently drop data the caller relies on.

Written once here, in the lowest package that needs it (durable events); the scheduler's lock
and the domain's counters can use the same factory.
"""

from __future__ import annotations

import dataclasses
import logging

from ..extras import missing_extra

if _missing := missing_extra(__name__, "redis"):
    raise _missing

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import ResponseError

from .._exceptions import EventBusError

__all__ = [
    "MIN_VERSION",
    "RedisServerInfo",
    "UnsafeRedisError",
    "check_redis_server",
    "make_redis_client",
    "read_server_info",
]

logger = logging.getLogger("eventbus.redis")

#: The oldest server this library's Redis code is written and tested against.
MIN_VERSION = (7, 0)


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
    """A Redis client with explicit timeouts, a bounded blocking pool, and no automatic retry
    of commands.

    redis-py retries a failed command (after a ``ConnectionError`` or a timeout) up to 10
    times by default. Neither error proves the command did not run: the server may have
    executed it and the reply been lost. A retried ``XADD`` then appends the entry twice, a
    retried ``SET NX`` finds the key it just set and reports it taken, a retried ``INCR``
    counts twice. So nothing is retried by default: the error goes to the caller, which knows
    whether its command is safe to repeat (durable events make every write idempotent or
    resolve the doubt themselves). After a server restart, a command sent on a pooled
    connection that died with the old server fails this way once; that connection is then
    replaced.

    :param url: ``redis://host:port/db`` (``rediss://`` for TLS)
    :param socket_timeout: seconds to wait for a reply before ``TimeoutError``; must exceed
        the ``BLOCK`` time of any blocking read sent on this client
    :param socket_connect_timeout: seconds to wait for a connection
    :param max_connections: the pool's size; callers beyond it wait (the pool blocks)
    :param pool_timeout: seconds to wait for a free connection before an error
    :param retries: retries after a ``ConnectionError`` or timeout, with a short backoff;
        keep 0 unless every command sent is safe to run twice
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


class UnsafeRedisError(EventBusError, RuntimeError):
    """The Redis server is configured so that it may drop data that must be kept (an evicting
    ``maxmemory-policy``), or is too old for the commands used."""

    def __init__(self, where: str, problem: str, fix: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"Redis at {where} {problem}; {fix}")


@dataclasses.dataclass(frozen=True, slots=True)
class RedisServerInfo:
    """What ``INFO`` says about the data's safety (``INFO`` works where ``CONFIG`` is blocked,
    as on most managed Redis services)."""

    version: tuple[int, ...]
    maxmemory: int  #: bytes; 0 means no limit
    maxmemory_policy: str
    aof_enabled: bool
    #: RDB snapshots configured (``CONFIG GET save``); ``None`` when CONFIG is not allowed
    rdb_enabled: bool | None
    run_id: str

    @property
    def evicts_any_key(self) -> bool:
        """``allkeys-*``: under memory pressure any key may go, streams and groups included."""
        return self.maxmemory_policy.startswith("allkeys-")

    @property
    def evicts_expiring_keys(self) -> bool:
        """``volatile-*``: only keys with a TTL may go (streams have none)."""
        return self.maxmemory_policy.startswith("volatile-")

    @property
    def persistent(self) -> bool:
        """AOF is on: an acknowledged write survives a restart (within ``appendfsync``)."""
        return self.aof_enabled


async def read_server_info(client: Redis) -> RedisServerInfo:
    """Read :class:`RedisServerInfo` from ``INFO server``, ``memory`` and ``persistence``."""
    info: dict[str, object] = {}
    for section in ("server", "memory", "persistence"):
        info.update(await client.info(section))
    raw_version = str(info.get("redis_version", "0"))
    version = tuple(int(p) for p in raw_version.split(".") if p.isdigit())
    rdb: bool | None
    try:
        saved = await client.config_get("save")
        rdb = bool(str(saved.get("save", "") or "").strip())
    except ResponseError:  # CONFIG renamed or forbidden (managed Redis)
        rdb = None
    return RedisServerInfo(
        version=version,
        maxmemory=int(str(info.get("maxmemory", 0))),
        maxmemory_policy=str(info.get("maxmemory_policy", "noeviction")),
        aof_enabled=str(info.get("aof_enabled", "0")) == "1",
        rdb_enabled=rdb,
        run_id=str(info.get("run_id", "")),
    )


async def check_redis_server(
    client: Redis, *, purpose: str = "durable events", min_version: tuple[int, int] = MIN_VERSION
) -> RedisServerInfo:
    """Refuse a server that may evict keys or is too old; warn when it keeps nothing on disk.

    :param purpose: what the data is for, named in the messages
    :raises UnsafeRedisError: for ``maxmemory-policy allkeys-*`` (streams and consumer groups
        would vanish under memory pressure), or a server older than *min_version*
    :return: what was read, for the caller's own checks
    """
    info = await read_server_info(client)
    where = _describe(client)
    if info.version < min_version:
        shown = ".".join(map(str, info.version))
        raise UnsafeRedisError(
            where,
            f"runs version {shown}, older than {'.'.join(map(str, min_version))}",
            f"{purpose} need Redis {'.'.join(map(str, min_version))} or later",
        )
    if info.evicts_any_key:
        raise UnsafeRedisError(
            where,
            f"has maxmemory-policy {info.maxmemory_policy!r}, which may evict any key "
            f"(the streams and consumer groups of {purpose} would vanish)",
            "set it to 'noeviction' (CONFIG SET maxmemory-policy noeviction, or redis.conf)",
        )
    if info.evicts_expiring_keys:
        logger.warning(
            "Redis at %s has maxmemory-policy %r: under memory pressure it may evict keys that "
            "have a TTL (the publish keys that keep a retried relay from adding an event "
            "twice); 'noeviction' is safer for %s",
            where,
            info.maxmemory_policy,
            purpose,
        )
    if not info.aof_enabled:
        snapshots = {
            True: "only RDB snapshots are on: writes since the last snapshot",
            False: "neither AOF nor RDB snapshots are on: everything",
            None: "AOF is off (snapshots unknown: CONFIG is not allowed): possibly everything",
        }[info.rdb_enabled]
        logger.warning(
            "Redis at %s keeps no append-only file; %s is lost on a restart, and %s published "
            "in that window must be restored with republish(since=...). Turn on "
            "'appendonly yes' (appendfsync everysec loses at most about a second)",
            where,
            snapshots,
            purpose,
        )
    return info


def _describe(client: Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    host = kwargs.get("host", "?")
    port = kwargs.get("port", "?")
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{host}:{port}/{kwargs.get('db', 0)}"
