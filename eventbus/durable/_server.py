"""The Redis the transport runs on, one server or a Redis Cluster: a client built from a URL,
and the start-up checks of every master's policy and version."""

from __future__ import annotations

from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from ..backends.redis import RedisServerInfo, check_redis_server, make_redis_client
from ._runtime import AnyRedis

__all__ = ["CLUSTER_SCHEMES", "check_servers", "client_from_url"]

PURPOSE = "durable events"

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


async def check_servers(client: AnyRedis) -> list[RedisServerInfo]:
    """:func:`~eventbus.backends.redis.check_redis_server` on the server, or on each master
    of a cluster (any of them evicting keys would lose the streams it holds).

    :raises UnsafeRedisError: naming the server (or master) and what to change
    """
    if not isinstance(client, RedisCluster):
        return [await check_redis_server(client, purpose=PURPOSE)]
    await client.initialize()
    found = []
    for node in client.get_primaries():
        pool = ConnectionPool(
            connection_class=node.connection_class, max_connections=1, **node.connection_kwargs
        )
        one = Redis.from_pool(pool)  # one master, as check_redis_server reads one server
        try:
            found.append(await check_redis_server(one, purpose=PURPOSE))
        finally:
            await one.aclose()
    return found
