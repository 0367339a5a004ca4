"""The Redis the transport runs on, one server or a Redis Cluster: a client built from a URL,
and the start-up checks of every master's policy and version."""

from __future__ import annotations

from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from ..backends.redis import check_redis_server, make_redis_client
from ._runtime import AnyRedis

__all__ = ["CLUSTER_SCHEMES", "HEADROOM", "check_pool", "check_servers", "client_from_url"]

PURPOSE = "durable events"
#: What the start-up warning about a Redis server adds (see ``check_redis_server``).
AFTER_LOSS = (
    "Events published in a window a restart lost must be restored with republish(since=...); "
    "an evicted publish key (they have a TTL) lets a retried relay add an event twice"
)

#: connections beyond the blocking reads: the relay, acknowledgements, leases, the janitor
HEADROOM = 8
#: a pool size that passes every check (a cluster client not connected yet)
UNKNOWN = 2**31

#: URL schemes of a Redis Cluster (any node's address; the client finds the others)
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def client_from_url(url: str, *, block: float, connections: int) -> AnyRedis:
    """A client for *url*: ``redis://`` / ``rediss://`` (one server), or ``redis+cluster://``
    / ``rediss+cluster://`` (a cluster). Commands are never retried by the client (see
    :func:`~eventbus.backends.redis.make_redis_client`); replies wait ``block`` plus 5 s.

    :param connections: the pool's size (per master on a cluster)
    """
    scheme, sep, rest = url.partition("://")
    timeout = block + 5.0
    if sep and scheme in CLUSTER_SCHEMES:
        return RedisCluster.from_url(
            f"{CLUSTER_SCHEMES[scheme]}://{rest}",
            retry=Retry(NoBackoff(), 0),
            socket_timeout=timeout,
            max_connections=connections,
        )
    return make_redis_client(url, socket_timeout=timeout, max_connections=connections)


async def check_servers(client: AnyRedis) -> list[str]:
    """:func:`~eventbus.backends.redis.check_redis_server` on the server, or on each master
    of a cluster (any of them evicting keys would lose the streams it holds): refuse an
    evicting or too old one, warn (once per server, naming it) about the rest.

    :return: the risks warned about, each master's in turn (empty: none)
    :raises UnsafeRedisError: naming the server (or master) and what to change
    """
    if not isinstance(client, RedisCluster):
        return await _check(client)
    await client.initialize()
    risks = []
    for node in client.get_primaries():
        pool = ConnectionPool(
            connection_class=node.connection_class, max_connections=1, **node.connection_kwargs
        )
        one = Redis.from_pool(pool)  # one master, as check_redis_server reads one server
        try:
            risks += await _check(one)
        finally:
            await one.aclose()
    return risks


async def _check(server: Redis) -> list[str]:
    return await check_redis_server(server, purpose=PURPOSE, after_loss=AFTER_LOSS)


def check_pool(client: AnyRedis, *, listeners: int, block: float, owned: bool) -> None:
    """Make sure *client* can serve *listeners* durable listeners: each holds a connection
    for its blocking read (``block`` seconds at a time), the rest of the transport shares
    :data:`HEADROOM` more, and a reply may take ``block`` seconds. A pool the transport built
    itself (*owned*, from a URL) is grown to fit instead.

    :raises ValueError: saying what to change
    """
    needed = listeners + HEADROOM
    timeout, size = _timeout_and_size(client)
    if timeout is not None and timeout <= block:
        raise ValueError(
            f"the Redis client's socket_timeout={timeout} s does not exceed the blocking "
            f"reads' block={block} s: every empty read would time out; build the client with "
            f"a socket_timeout above {block} s (make_redis_client(url, socket_timeout=...))"
        )
    if size >= needed:
        return
    if owned and not isinstance(client, RedisCluster):
        client.connection_pool.max_connections = needed
        return
    raise ValueError(
        f"the Redis client's pool has {size} connections, but the durable transport needs "
        f"{needed}: one per durable listener ({listeners}) for its blocking read, plus "
        f"{HEADROOM} for the relay, acknowledgements, leases and the janitor; build the client "
        f"with make_redis_client(url, max_connections={needed}) or more (RedisCluster(..., "
        f"max_connections={needed}) per master), or pass the URL and the transport sizes its "
        "own pool"
    )


def _timeout_and_size(client: AnyRedis) -> tuple[float | None, int]:
    """The reply timeout and the pool size (per master on a cluster: every stream may hash to
    one master)."""
    if isinstance(client, RedisCluster):
        nodes = client.get_nodes()  # known once the client is initialized
        if not nodes:
            return None, UNKNOWN
        timeout = nodes[0].connection_kwargs.get("socket_timeout")
        return timeout, min(n.max_connections for n in nodes)
    pool = client.connection_pool
    return pool.connection_kwargs.get("socket_timeout"), pool.max_connections
