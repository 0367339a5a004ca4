"""Redis plumbing shared by every package: one client factory, and one check of the server
that finds the settings under which Redis would silently drop data the caller relies on.

Written once here, in the lowest package that needs it (durable events); the scheduler's
:class:`~scheduler.backends.redis.RedisLock` and the domain's Redis counters use them too.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Literal

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
    "check_async_redis",
    "check_redis_server",
    "make_redis_client",
    "read_server_info",
]

logger = logging.getLogger("eventbus.redis")

#: The oldest server this library's Redis code is written and tested against.
MIN_VERSION = (7, 0)


def check_async_redis(client: object, owner: str, *, url_ok: bool = True) -> None:
    """Refuse a sync redis-py client at once, rather than at start with "object dict can't
    be used in 'await' expression".

    :raises TypeError: one line naming *owner*, what it needs and what it was given
    """
    import redis as sync_redis
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

    if isinstance(client, Redis | AsyncRedisCluster) or (url_ok and isinstance(client, str)):
        return
    needs = "an asyncio redis client (redis.asyncio.Redis" + (", or a URL)" if url_ok else ")")
    given = f"{type(client).__module__}.{type(client).__qualname__}"
    if isinstance(client, sync_redis.Redis | sync_redis.RedisCluster):
        given = f"the sync {given}; build it with redis.asyncio.from_url(...) instead"
    raise TypeError(f"{owner} needs {needs}, got {given}")


def make_redis_client(
    url: str,
    *,
    socket_timeout: float = 5.0,
    socket_connect_timeout: float = 2.0,
    max_connections: int = 20,
    pool_timeout: float = 5.0,
    retries: int = 0,
    health_check_interval: float = 30.0,
    decode_responses: bool = False,
) -> Redis:
    """A Redis client with explicit timeouts, a bounded blocking pool, and no automatic retry
    of commands: the one factory of durable events, the scheduler's lock and the domain's
    counters.

    redis-py retries a failed command (after a ``ConnectionError`` or a timeout) up to 10
    times by default. Neither error proves the command did not run: the server may have
    executed it and the reply been lost. A retried ``XADD`` then appends the entry twice, a
    retried ``SET NX`` finds the lock it just took and reports it held by someone else, a
    retried ``INCR`` skips a fencing token, a retried counter batch counts twice. So nothing
    is retried by default: the error goes to the caller, which knows whether its command is
    safe to repeat (durable events make every write idempotent or resolve the doubt
    themselves; ``RedisLock`` resends only its own idempotent scripts and voids the rest; the
    counters' staging script may be retried, their recording script is not). After a server
    restart, a command sent on a pooled connection that died with the old server fails this
    way once; that connection is then replaced.

    The pool is bounded for every user: a burst of requests (web requests counting views, a
    consumer per durable listener) waits for one of *max_connections* connections instead
    of opening one each, and fails after *pool_timeout* seconds. Callers size it for their
    work: a blocking stream read holds a connection for its whole ``BLOCK`` time, so durable
    events ask for one per listener plus headroom.

    :param url: ``redis://host:port/db`` (``rediss://`` for TLS, ``unix://`` for a socket)
    :param socket_timeout: seconds to wait for a reply before ``TimeoutError``; must exceed
        the ``BLOCK`` time of any blocking read sent on this client
    :param socket_connect_timeout: seconds to wait for a connection
    :param max_connections: the pool's size; callers beyond it wait (the pool blocks)
    :param pool_timeout: seconds to wait for a free connection before an error
    :param retries: retries after a ``ConnectionError`` or timeout, with a short backoff;
        keep 0 unless every command sent on the client is safe to run twice
    :param health_check_interval: seconds of idleness after which a connection is pinged
        before use, so a connection broken by a restart is found before a command is sent
    :param decode_responses: replies as ``str`` instead of ``bytes`` (the domain's counters
        parse their scripts' replies as text; the lock and durable events compare bytes)
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
        decode_responses=decode_responses,
    )
    return Redis.from_pool(pool)


class UnsafeRedisError(EventBusError, RuntimeError):
    """The Redis server is configured so that it may drop data that must be kept (an evicting
    ``maxmemory-policy`` under a memory limit), or is too old for the commands used."""

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
    maxmemory_human: str  #: the same, as INFO writes it (``1.00G``)
    maxmemory_policy: str
    aof_enabled: bool
    #: RDB snapshots configured (``CONFIG GET save``); ``None`` when CONFIG is not allowed
    rdb_enabled: bool | None
    rdb_saves: int  #: snapshots taken since the server started
    run_id: str

    @property
    def evicts_any_key(self) -> bool:
        """``allkeys-*`` under a memory limit: when memory is full any key may go, streams,
        consumer groups and pending counts included."""
        return self.maxmemory > 0 and self.maxmemory_policy.startswith("allkeys-")

    @property
    def evicts_expiring_keys(self) -> bool:
        """``volatile-*`` under a memory limit: only keys with a TTL may go (locks, dedupe
        keys, publish keys; streams have none)."""
        return self.maxmemory > 0 and self.maxmemory_policy.startswith("volatile-")

    @property
    def persistent(self) -> bool:
        """AOF is on: an acknowledged write survives a restart (within ``appendfsync``)."""
        return self.aof_enabled

    @property
    def snapshots(self) -> bool:
        """RDB snapshots are configured, or, where ``CONFIG`` is refused, one was taken since
        the server started (``rdb_saves``): a restart keeps what the last one holds."""
        return self.rdb_enabled if self.rdb_enabled is not None else self.rdb_saves > 0


async def read_server_info(client: Redis) -> RedisServerInfo:
    """Read :class:`RedisServerInfo` from ``INFO server``, ``memory`` and ``persistence``, and
    ``CONFIG GET save`` where it is allowed.

    :raises redis.exceptions.ResponseError: if ``INFO`` itself is refused (an ACL, a proxy)
    """
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
        maxmemory_human=str(info.get("maxmemory_human", "")),
        maxmemory_policy=str(info.get("maxmemory_policy", "noeviction")),
        aof_enabled=str(info.get("aof_enabled", "0")) == "1",
        rdb_enabled=rdb,
        rdb_saves=int(str(info.get("rdb_saves", 0))),
        run_id=str(info.get("run_id", "")),
    )


async def check_redis_server(
    client: Redis,
    *,
    purpose: str,
    on_unsafe: Literal["refuse", "warn"] = "refuse",
    snapshots_suffice: bool = False,
    after_loss: str = "",
    min_version: tuple[int, int] = MIN_VERSION,
    log: logging.Logger = logger,
) -> list[str]:
    """Check at start that the server keeps what *purpose* needs: refuse (or warn about) an
    evicting policy and a server that is too old, warn when a restart would lose data.

    Read from ``INFO`` (:func:`read_server_info`), which managed Redis allows where it refuses
    ``CONFIG``; only the RDB save schedule is not in ``INFO``, so ``CONFIG GET save`` is tried,
    and where it is refused, a snapshot taken since start (``rdb_saves``) counts as a
    schedule. A ``maxmemory-policy`` other than ``noeviction`` counts only under a
    ``maxmemory`` limit: without one nothing is evicted. Every risk found goes into one
    WARNING on *log*; call it once at start.

    :param purpose: what the data is, named in the messages (``"durable events"``)
    :param on_unsafe: ``"refuse"``: raise for a policy that may evict any key and for a
        server older than *min_version* (data that must not vanish: streams and consumer
        groups); ``"warn"``: warn about them with the rest (data whose loss is detected or
        tolerated: counters, locks)
    :param snapshots_suffice: RDB snapshots without an append-only file are enough (a restart
        may lose the writes since the last snapshot); else only AOF is
    :param after_loss: a sentence appended to the warning: what to do after a loss
    :param log: where the warning goes
    :return: the risks warned about, one sentence each (empty: none)
    :raises UnsafeRedisError: with ``on_unsafe="refuse"``, for ``allkeys-*`` under a memory
        limit, or a server older than *min_version*
    :raises redis.exceptions.ResponseError: with ``on_unsafe="refuse"``, if ``INFO`` is
        refused (with ``"warn"``, that is a risk warned about)
    :raises redis.exceptions.ConnectionError: (or ``TimeoutError``) if Redis cannot be reached
    """
    where = _where(client)
    try:
        info = await read_server_info(client)
    except ResponseError as exc:
        if on_unsafe == "refuse":
            raise
        risk = f"its settings cannot be checked: INFO is refused ({exc})"
        log.warning("Redis at %s may lose %s: %s", where, purpose, risk)
        return [risk]
    risks = _risks(info, purpose, snapshots_suffice=snapshots_suffice, min_version=min_version)
    if on_unsafe == "refuse":
        _refuse_unsafe(info, where, purpose, min_version)
    if risks:
        fixes = []
        if not info.persistent:
            fixes.append("'appendonly yes' (appendfsync everysec loses at most about a second)")
        if info.evicts_any_key or info.evicts_expiring_keys:
            fixes.append("'maxmemory-policy noeviction'")
        fix = f"; set {' and '.join(fixes)}" if fixes else ""
        log.warning(
            "Redis at %s can lose %s: %s%s%s",
            where,
            purpose,
            "; ".join(risks),
            fix,
            f". {after_loss}" if after_loss else "",
        )
    return risks


def _risks(
    info: RedisServerInfo,
    purpose: str,
    *,
    snapshots_suffice: bool,
    min_version: tuple[int, int],
) -> list[str]:
    """One sentence per setting under which the server loses data."""
    risks = []
    if info.version < min_version:
        risks.append(
            f"it runs version {_dotted(info.version)}, older than {_dotted(min_version)} "
            f"({purpose} are tested on {_dotted(min_version)} or later)"
        )
    if not info.persistent:
        if info.rdb_enabled is False:
            risks.append('no persistence (appendonly no, save ""): a restart empties it')
        elif not info.snapshots:
            risks.append(
                "no persistence seen (appendonly no, and no RDB snapshot since it started; "
                "CONFIG GET save is refused, so the save schedule is unknown)"
            )
        elif not snapshots_suffice:
            risks.append(
                "only RDB snapshots (appendonly no): a restart loses the writes since the last "
                "snapshot"
            )
    if info.evicts_any_key or info.evicts_expiring_keys:
        which = "keys" if info.evicts_any_key else "keys with a TTL"
        risks.append(
            f"maxmemory-policy {info.maxmemory_policy} with maxmemory {info.maxmemory_human}: "
            f"{which} are evicted when memory is full"
        )
    return risks


def _refuse_unsafe(
    info: RedisServerInfo, where: str, purpose: str, min_version: tuple[int, int]
) -> None:
    """:raises UnsafeRedisError: for a server too old, or one that may evict any key"""
    if info.version < min_version:
        raise UnsafeRedisError(
            where,
            f"runs version {_dotted(info.version)}, older than {_dotted(min_version)}",
            f"{purpose} need Redis {_dotted(min_version)} or later",
        )
    if info.evicts_any_key:
        raise UnsafeRedisError(
            where,
            f"has maxmemory-policy {info.maxmemory_policy!r} with maxmemory "
            f"{info.maxmemory_human}, which may evict any key ({purpose} would vanish when "
            "memory is full)",
            "set it to 'noeviction' (CONFIG SET maxmemory-policy noeviction, or redis.conf)",
        )


def _where(client: Redis) -> str:
    """``host:port/db`` (or ``unix:path``) of a client, for messages; never its password."""
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    host = kwargs.get("host", "localhost")
    port = kwargs.get("port", 6379)
    return f"{host}:{port}/{kwargs.get('db', 0)}"


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))
