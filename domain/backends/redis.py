"""Redis counter store: pending counts shared by every replica, staged by an atomic script.

Key layout for counter ``c`` under prefix ``p`` (default ``cnt``)::

    p:c:seen:{item}:{viewer}      "1", PX = dedupe window     (SET NX PX)
    p:c:pending:{bucket}          hash item -> count          (HINCRBY)
    p:c:staging:{flush_id}:{b}    a pending hash, renamed     (RENAME inside STAGE)
    p:c:staged                    set of staged flush ids     (SADD inside STAGE)
    p:c:meta                      hash: the marker (epoch) and the totals, below

**Losses.** Redis without persistence forgets everything when it restarts; so do ``FLUSHALL``
and eviction. Each counter's ``meta`` hash is written by the same scripts as its counts: an
``epoch`` marker, the ``pending`` and ``staged`` totals, and each staged flush's total
(``s:{flush_id}``). The store remembers the epoch and the totals of its last reply; when a
later ``RECORD`` or ``STAGE`` finds the marker gone (or replaced by another replica that found
it gone), the counts of that reply are lost. The store then calls its ``on_loss`` callbacks
(:class:`~domain.counters.Counter` logs it at ERROR, counts it and emits ``counts.lost``) with
the totals it last saw: what was lost as far as this process knows (views recorded by other
replicas after its last call are lost too, unseen). :meth:`~domain.App.embedded` warns at start
when the server would lose data this way (:func:`eventbus.backends.redis.check_redis_server`).

Retries: give this store a client built by :func:`eventbus.backends.redis.make_redis_client`
with ``decode_responses=True`` (or configured the same way: no automatic retries). ``STAGE``
is idempotent by design (a second run with the same flush id is a no-op), so a caller may
retry it; ``RECORD`` is not (a retried batch of viewer-less hits would count twice), so a lost
reply makes ingestion at-most-once for that batch.

Items and viewer keys must not contain a tab or a newline (ids, short codes and hashed viewer
keys never do): hits are sent, and staged hashes read back, as tab/newline-separated strings.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from anyio.abc import AsyncResource
from anyio.lowlevel import checkpoint
from redis.asyncio import Redis
from redis.exceptions import RedisError

from ..abc import Hit, StoreLoss
from . import bucket_of

__all__ = ["RedisCounterStore"]

logger = logging.getLogger("domain.backends.redis")

# The marker check opening RECORD and STAGE. ARGV[4] is the epoch this client last saw ('' at
# its first call), ARGV[5] a fresh one to write if the marker is gone. Returns the epoch and
# 1 when the marker is gone or is another than the one this client saw: its counts are lost.
_EPOCH = """
local function epoch(meta, known, fresh)
  local cur = redis.call('HGET', meta, 'epoch')
  if not cur then
    redis.call('HSET', meta, 'epoch', fresh)
    cur = fresh
  end
  if known ~= '' and cur ~= known then return cur, 1 end
  return cur, 0
end
local function totals(meta)
  local t = redis.call('HMGET', meta, 'pending', 'staged')
  return tonumber(t[1] or '0'), tonumber(t[2] or '0')
end
"""

# Counts a batch of hits: dedupe each (item, viewer) with SET NX PX, aggregate per item, then
# one HINCRBY per item. ARGV: key prefix, ttl ms, then the hits packed as one string of
# "item\tviewer\tbucket\n" lines (one argument instead of three per hit: redis-py encodes and
# sends it ~5x faster), then the epochs. Returns {fresh, epoch, lost, pending, staged}.
_RECORD = (
    _EPOCH
    + """
local p, ttl = ARGV[1], ARGV[2]
local meta = p .. 'meta'
local ep, lost = epoch(meta, ARGV[4], ARGV[5])
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
redis.call('HINCRBY', meta, 'pending', fresh)
local pending, staged = totals(meta)
return {fresh, ep, lost, pending, staged}
"""
)

# Moves every pending bucket to staging keys of one flush id and records the id, atomically.
# A second run with the same id stages nothing (-1) and changes nothing: safe to retry.
# Returns {buckets staged or -1, epoch, lost, pending, staged}.
_STAGE = (
    _EPOCH
    + """
local p, fid, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local meta = p .. 'meta'
local ep, lost = epoch(meta, ARGV[4], ARGV[5])
local staged = -1
if redis.call('SISMEMBER', KEYS[1], fid) == 0 then
  staged = 0
  for b = 0, n - 1 do
    local src = p .. 'pending:' .. b
    if redis.call('EXISTS', src) == 1 then
      redis.call('RENAME', src, p .. 'staging:' .. fid .. ':' .. b)
      staged = staged + 1
    end
  end
  if staged > 0 then
    redis.call('SADD', KEYS[1], fid)
    local moved = tonumber(redis.call('HGET', meta, 'pending') or '0')
    redis.call('HSET', meta, 's:' .. fid, moved, 'pending', 0)
    redis.call('HINCRBY', meta, 'staged', moved)
  end
end
local pending, total = totals(meta)
return {staged, ep, lost, pending, total}
"""
)

# One bulk string per staged bucket ("item\ncount\n..."): redis-py parses one reply instead of
# one per field, which makes reading 100k pending ids ~20x faster without hiredis.
_READ = """
local out = {}
for i, key in ipairs(KEYS) do out[i] = table.concat(redis.call('HGETALL', key), '\\n') end
return out
"""

# Returns {epoch or '', pending, staged}: the totals count only if the epoch is the one seen.
_DROP = (
    _EPOCH
    + """
local p, fid, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local meta = p .. 'meta'
for b = 0, n - 1 do redis.call('DEL', p .. 'staging:' .. fid .. ':' .. b) end
redis.call('SREM', KEYS[1], fid)
local moved = redis.call('HGET', meta, 's:' .. fid)
if moved then
  redis.call('HDEL', meta, 's:' .. fid)
  redis.call('HINCRBY', meta, 'staged', -tonumber(moved))
end
local pending, staged = totals(meta)
return {redis.call('HGET', meta, 'epoch') or '', pending, staged}
"""
)


class RedisCounterStore(AsyncResource):
    """Counts in Redis, shared by every replica; one primary (the scripts touch several keys).

    Detects a loss of its data (see the module docstring) at the next ``record()`` or
    ``stage()`` and reports it to the :meth:`on_loss` callbacks (with none, it logs it at
    ERROR itself).

    :param redis: a client with ``decode_responses=True`` (see
        :func:`eventbus.backends.redis.make_redis_client`); never closed by this store
        (:meth:`aclose` releases nothing)
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
        self._epochs: dict[str, str] = {}  # per counter: the marker of the last reply
        self._seen: dict[str, tuple[int, int, datetime]] = {}  # pending, staged, when
        self._fresh_epoch = uuid.uuid4().hex  # written where a marker is gone
        self._loss_callbacks: list[Callable[[StoreLoss], None]] = []
        self._run_id: str | None = None  # the server's, read at the first reply

    def __repr__(self) -> str:
        return f"RedisCounterStore(buckets={self.buckets}, prefix={self.prefix!r})"

    def _p(self, counter: str) -> str:
        return f"{self.prefix}:{counter}:"

    def on_loss(self, callback: Callable[[StoreLoss], None]) -> None:
        self._loss_callbacks.append(callback)

    def _epoch_args(self, counter: str) -> list[str]:
        return [self._epochs.get(counter, ""), self._fresh_epoch]

    async def record(self, counter: str, hits: Sequence[Hit], *, dedupe_ttl: float) -> int:
        if not hits:
            return 0
        n = self.buckets
        packed = "".join(
            [f"{item}\t{viewer or ''}\t{bucket_of(item, n)}\n" for item, viewer in hits]
        )
        ttl = max(1, int(dedupe_ttl * 1000))
        reply = await self._record(args=[self._p(counter), ttl, packed, *self._epoch_args(counter)])
        await self._observe(counter, *reply[1:])
        return int(reply[0])

    async def stage(self, counter: str, flush_id: str) -> int:
        p = self._p(counter)
        args: list[str | int] = [p, flush_id, self.buckets, *self._epoch_args(counter)]
        reply = await self._stage(keys=[p + "staged"], args=args)
        await self._observe(counter, *reply[1:])
        return max(int(reply[0]), 0)

    async def staged(self, counter: str) -> list[str]:
        members = await self.redis.smembers(self._p(counter) + "staged")
        return sorted(m if isinstance(m, str) else m.decode() for m in members)

    async def read_staged(self, counter: str, flush_id: str) -> dict[str, int]:
        p = self._p(counter)
        keys = [f"{p}staging:{flush_id}:{b}" for b in range(self.buckets)]
        return _parse(await self._read(keys=keys))

    async def drop_staged(self, counter: str, flush_id: str) -> None:
        p = self._p(counter)
        epoch, pending, staged = await self._drop(
            keys=[p + "staged"], args=[p, flush_id, self.buckets]
        )
        if epoch and epoch == self._epochs.get(counter):  # else the next record() tells
            self._seen[counter] = (int(pending), int(staged), datetime.now(UTC))

    async def pending(self, counter: str) -> dict[str, int]:
        p = self._p(counter)
        return _parse(await self._read(keys=[f"{p}pending:{b}" for b in range(self.buckets)]))

    async def aclose(self) -> None:
        """Nothing to release: the client is the caller's (a checkpoint)."""
        await checkpoint()

    async def _observe(
        self, counter: str, epoch: str, lost: int, pending: int, staged: int
    ) -> None:
        """Remember the marker and totals of a reply; report a loss the reply revealed.

        Scripts sent together before the first reply all find the marker gone; the first reply
        to come back reports the loss (its marker is then the known one), the others do not.
        """
        if epoch == self._fresh_epoch:  # ours is written now: another loss needs another one
            self._fresh_epoch = uuid.uuid4().hex
        known, before = self._epochs.get(counter), self._seen.get(counter)
        self._epochs[counter] = epoch
        self._seen[counter] = (int(pending), int(staged), datetime.now(UTC))
        if lost and epoch != known:
            loss = StoreLoss(
                counter=counter,
                pending=0 if before is None else before[0],
                staged=0 if before is None else before[1],
                last_seen_at=None if before is None else before[2],
                cause=await self._cause(),
            )
            self._report(loss)
        elif self._run_id is None:
            self._run_id = await self._server_run_id()  # once: to tell a restart from a flush

    async def _server_run_id(self) -> str:
        try:
            return str((await self.redis.info("server"))["run_id"])
        except (RedisError, KeyError):
            return ""

    async def _cause(self) -> str:
        before, self._run_id = self._run_id, await self._server_run_id()
        if not before or not self._run_id:
            return "its marker key is gone (cause unknown: INFO did not give the run_id)"
        if before != self._run_id:
            return "the Redis server restarted (a new run_id) and did not keep them"
        return (
            "its keys were deleted or evicted (the same server process: FLUSHALL, FLUSHDB, "
            "DEL, or eviction under maxmemory)"
        )

    def _report(self, loss: StoreLoss) -> None:
        if not self._loss_callbacks:
            logger.error("%r: %s", self, loss.describe())
        for callback in self._loss_callbacks:
            try:
                callback(loss)
            except Exception:
                logger.exception("on_loss callback %r raised on %r", callback, loss)


def _parse(shards: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for shard in shards:
        if shard:
            parts = shard.split("\n")
            out.update(zip(parts[::2], map(int, parts[1::2]), strict=True))
    return out
