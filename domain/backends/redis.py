"""Redis counter store: pending counts shared by every replica, staged by an atomic script.

Key layout for counter ``c`` under prefix ``p`` (default ``cnt``)::

    p:c:seen:{item}:{viewer}      "1", PX = dedupe window     (SET NX PX)
    p:c:pending:{bucket}          hash item -> count          (HINCRBY)
    p:c:staging:{flush_id}:{b}    a pending hash, renamed     (RENAME inside STAGE)
    p:c:staged                    set of staged flush ids     (SADD inside STAGE)

Retries: give this store a client built by :func:`connect` (or configured the same way), with
no automatic retries. ``STAGE`` is idempotent by design (a second run with the same flush id
is a no-op), so a caller may retry it; ``RECORD`` is not (a retried batch of viewer-less hits
would count twice), so a lost reply makes ingestion at-most-once for that batch.

Items and viewer keys must not contain a tab or a newline (ids, short codes and hashed viewer
keys never do): hits are sent, and staged hashes read back, as tab/newline-separated strings.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from ..abc import Hit
from . import bucket_of

__all__ = ["RedisCounterStore", "connect"]

# Counts a batch of hits: dedupe each (item, viewer) with SET NX PX, aggregate per item, then
# one HINCRBY per item. ARGV: key prefix, ttl ms, then the hits packed as one string of
# "item\tviewer\tbucket\n" lines (one argument instead of three per hit: redis-py encodes and
# sends it ~5x faster).
_RECORD = """
local p, ttl = ARGV[1], ARGV[2]
local agg, where, fresh = {}, {}, 0
for item, viewer, b in string.gmatch(ARGV[3], '([^\\t]*)\\t([^\\t]*)\\t(%d+)\\n') do
  if viewer == '' or redis.call('SET', p .. 'seen:' .. item .. ':' .. viewer, '1', 'NX', 'PX', ttl)
  then
    agg[item] = (agg[item] or 0) + 1
    where[item] = b
    fresh = fresh + 1
  end
end
for item, n in pairs(agg) do
  redis.call('HINCRBY', p .. 'pending:' .. where[item], item, n)
end
return fresh
"""

# Moves every pending bucket to staging keys of one flush id and records the id, atomically.
# A second run with the same id returns -1 and changes nothing: safe to retry.
_STAGE = """
local p, fid, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
if redis.call('SISMEMBER', KEYS[1], fid) == 1 then return -1 end
local staged = 0
for b = 0, n - 1 do
  local src = p .. 'pending:' .. b
  if redis.call('EXISTS', src) == 1 then
    redis.call('RENAME', src, p .. 'staging:' .. fid .. ':' .. b)
    staged = staged + 1
  end
end
if staged > 0 then redis.call('SADD', KEYS[1], fid) end
return staged
"""

# One bulk string per staged bucket ("item\ncount\n..."): redis-py parses one reply instead of
# one per field, which makes reading 100k pending ids ~20x faster without hiredis.
_READ = """
local out = {}
for i, key in ipairs(KEYS) do out[i] = table.concat(redis.call('HGETALL', key), '\\n') end
return out
"""

_DROP = """
local p, fid, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
for b = 0, n - 1 do redis.call('DEL', p .. 'staging:' .. fid .. ':' .. b) end
return redis.call('SREM', KEYS[1], fid)
"""


def connect(
    url: str,
    *,
    socket_timeout: float = 5.0,
    max_connections: int = 20,
    pool_timeout: float = 5.0,
) -> Redis:
    """A client configured for counters: explicit timeouts, a bounded blocking pool and **no
    automatic retries**.

    redis-py 8 retries a command up to 10 times after a timeout by default, which would run a
    non-idempotent script (``RECORD``) again after a lost reply. The pool is bounded like the
    scheduler's (:func:`scheduler.backends.redis.make_redis_client`): a burst of requests waits
    for one of *max_connections* connections instead of opening one each, and fails after
    *pool_timeout* seconds. The caller owns the client (``await client.aclose()``).

    :param socket_timeout: seconds to wait for a connection or a reply
    :param max_connections: the pool's size; callers beyond it wait
    :param pool_timeout: seconds to wait for a free connection before a ``ConnectionError``
    """
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=pool_timeout,
        socket_timeout=socket_timeout,
        socket_connect_timeout=socket_timeout,
        retry=Retry(NoBackoff(), 0),
        retry_on_error=[],
        decode_responses=True,
    )
    return Redis.from_pool(pool)


class RedisCounterStore:
    """Counts in Redis, shared by every replica; one primary (the scripts touch several keys).

    :param redis: a client with ``decode_responses=True`` (see :func:`connect`); never closed
        by this store
    :param buckets: pending shards per counter, keeping each hash small for HGETALL/RENAME
    :param prefix: key prefix
    """

    def __init__(self, redis: Redis, *, buckets: int = 16, prefix: str = "cnt") -> None:
        if buckets < 1:
            raise ValueError(f"buckets={buckets!r} must be >= 1")
        self.redis = redis
        self.buckets = buckets
        self.prefix = prefix
        self._record = redis.register_script(_RECORD)
        self._stage = redis.register_script(_STAGE)
        self._drop = redis.register_script(_DROP)
        self._read = redis.register_script(_READ)

    def __repr__(self) -> str:
        return f"RedisCounterStore(buckets={self.buckets}, prefix={self.prefix!r})"

    def _p(self, counter: str) -> str:
        return f"{self.prefix}:{counter}:"

    async def record(self, counter: str, hits: Sequence[Hit], *, dedupe_ttl: float) -> int:
        if not hits:
            return 0
        n = self.buckets
        packed = "".join(
            [f"{item}\t{viewer or ''}\t{bucket_of(item, n)}\n" for item, viewer in hits]
        )
        ttl = max(1, int(dedupe_ttl * 1000))
        return int(await self._record(args=[self._p(counter), ttl, packed]))

    async def stage(self, counter: str, flush_id: str) -> int:
        p = self._p(counter)
        staged = int(await self._stage(keys=[p + "staged"], args=[p, flush_id, self.buckets]))
        return max(staged, 0)

    async def staged(self, counter: str) -> list[str]:
        members = await self.redis.smembers(self._p(counter) + "staged")
        return sorted(m if isinstance(m, str) else m.decode() for m in members)

    async def read_staged(self, counter: str, flush_id: str) -> dict[str, int]:
        p = self._p(counter)
        keys = [f"{p}staging:{flush_id}:{b}" for b in range(self.buckets)]
        return _parse(await self._read(keys=keys))

    async def drop_staged(self, counter: str, flush_id: str) -> None:
        p = self._p(counter)
        await self._drop(keys=[p + "staged"], args=[p, flush_id, self.buckets])

    async def pending(self, counter: str) -> dict[str, int]:
        p = self._p(counter)
        return _parse(await self._read(keys=[f"{p}pending:{b}" for b in range(self.buckets)]))


def _parse(shards: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for shard in shards:
        if shard:
            parts = shard.split("\n")
            out.update(zip(parts[::2], map(int, parts[1::2]), strict=True))
    return out
