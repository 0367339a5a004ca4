"""The Lua scripts of durable events: each one step that must not be split by a crash.

Every script touches only keys of one event name (one hash tag), so it runs on Redis Cluster.
Redis 7.0 commands only: no XADD ``IDMP`` (8.6), no ``ACKED`` trimming (8.2), no XREADGROUP
``CLAIM`` (8.4).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoScriptError, RedisClusterException, RedisError

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript


__all__ = ["ScriptCall", "Scripts", "run_scripts"]

#: one script call: the script, its keys, its arguments
ScriptCall = tuple["AsyncScript", Sequence[str], Sequence[str]]

#: Add events of one stream, each once, while the relay's claim still holds. KEYS: the
#: stream, then one publish key per event. ARGV: publish key TTL (ms), MAXLEN cap (0: none),
#: the event name, the envelope version, the claim's deadline (Unix ms by the relay's clock;
#: 0: none), then per event: n, event_id, seq, occurred_at, payload, and n optional
#: field/value pairs (the script writes the field names: half the arguments to send per
#: event).
#: The fence: past the deadline (by the server's clock, ``TIME``), nothing is added and every
#: flag is "2": the relay stalled after its claim, and another relay may have claimed, added
#: and marked the rows since, and its publish keys may have expired.
#: A publish key that exists means the event was added before (by a relay that crashed or
#: stalled before it marked the row): its id is returned instead of adding the event again.
#: Returns {ids, flags, capped}: flags has "1" (added), "0" (found) or "2" (refused) per
#: event; capped is 1 when the stream has reached its cap.
PUBLISH = """
local ttl, cap, name, version = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local deadline = tonumber(ARGV[5])
local ids, flags = {}, {}
if deadline > 0 then
    local t = redis.call('TIME')
    if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) >= deadline then
        for k = 2, #KEYS do ids[#ids + 1] = '' end
        return {ids, string.rep('2', #KEYS - 1), 0}
    end
end
local pos = 6
for k = 2, #KEYS do
    local n = tonumber(ARGV[pos])
    local prev = redis.call('GET', KEYS[k])
    if prev then
        ids[#ids + 1] = prev
        flags[#flags + 1] = '0'
    else
        local fields = {'v', version, 'event_id', ARGV[pos + 1], 'name', name,
                        'seq', ARGV[pos + 2], 'occurred_at', ARGV[pos + 3],
                        'payload', ARGV[pos + 4]}
        for i = 1, 2 * n do fields[#fields + 1] = ARGV[pos + 4 + i] end
        local id
        if cap > 0 then
            id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', cap, '*', unpack(fields))
        else
            id = redis.call('XADD', KEYS[1], '*', unpack(fields))
        end
        redis.call('SET', KEYS[k], id, 'NX', 'PX', ttl)
        ids[#ids + 1] = id
        flags[#flags + 1] = '1'
    end
    pos = pos + 5 + 2 * n
end
local capped = 0
if cap > 0 and redis.call('XLEN', KEYS[1]) >= cap then capped = 1 end
return {ids, table.concat(flags), capped}
"""

#: Shorten the life of publish keys (of one stream) whose rows were marked published.
#: KEYS: publish keys. ARGV: TTL ms.
SETTLE = """
for _, key in ipairs(KEYS) do redis.call('PEXPIRE', key, ARGV[1]) end
return #KEYS
"""

#: Set the idle time of entries this consumer still owns (``XCLAIM ... IDLE n JUSTID``: the
#: delivery counter is left alone). IDLE 0 renews a lease; IDLE visibility-delay schedules a
#: retry after delay. KEYS: stream. ARGV: group, consumer, idle ms, ids. Returns the ids that
#: were still ours; the others were reclaimed by another consumer (or acknowledged).
RENEW = """
local kept = {}
for i = 4, #ARGV do
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
    if p[1] and p[1][2] == ARGV[2] then
        redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'IDLE', ARGV[3], 'JUSTID')
        kept[#kept + 1] = ARGV[i]
    end
end
return kept
"""

#: One XAUTOCLAIM step plus each claimed entry's delivery count. KEYS: stream. ARGV: group,
#: consumer, min idle ms, cursor, count. Returns {next cursor, entries, deleted ids, counts}.
#: Deleted ids were in the group's pending list but are gone from the stream (trimmed or
#: deleted): Redis 7 drops them from the pending list and reports them here.
RECLAIM = """
local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'COUNT', ARGV[5])
local counts = {}
for i, e in ipairs(r[2]) do
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], e[1], e[1], 1)
    if p[1] then counts[i] = p[1][4] else counts[i] = 0 end
end
return {r[1], r[2], r[3] or {}, counts}
"""

#: Move an entry to the dead-letter stream: only if it is still pending (so a retried call
#: adds nothing twice), add the dead letter, then acknowledge it. Adding first: a script that
#: fails on the way (an error stops it, and nothing is rolled back) leaves the entry pending,
#: never acknowledged without its dead letter. KEYS: stream read from, dead-letter stream.
#: ARGV: group, entry id, dead-letter MAXLEN cap, field/value pairs. Returns the dead
#: letter's id, or false if the entry was no longer pending.
DEAD_LETTER = """
if #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1) == 0 then return false end
local id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', unpack(ARGV, 4))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return id
"""

#: Hand entries back to one group: copy each from the source stream (a dead-letter stream) to
#: the group's redelivery stream, with extra fields, and delete it from the source. KEYS:
#: source, redelivery stream. ARGV: group, extra field count n, n field/value pairs, then ids.
#: Returns the new ids (false for an id no longer in the source).
REDELIVER = """
local n = tonumber(ARGV[2])
redis.pcall('XGROUP', 'CREATE', KEYS[2], ARGV[1], '0', 'MKSTREAM')
local out = {}
for i = 3 + 2 * n, #ARGV do
    local e = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])
    if #e == 0 then
        out[#out + 1] = false
    else
        local f = e[1][2]
        for j = 3, 2 + 2 * n do f[#f + 1] = ARGV[j] end
        out[#out + 1] = redis.call('XADD', KEYS[2], '*', unpack(f))
        redis.call('XDEL', KEYS[1], ARGV[i])
    end
end
return out
"""

#: Trim a stream below the oldest entry any of its groups still needs: the smallest pending
#: id, or the entry after the last one delivered, whichever is older; for a group registered
#: in the registry hash (KEYS[2], optional) that does not exist (declared, not created yet;
#: or vanished), every entry younger than ARGV[2] ms (the outbox's retention); never an entry
#: younger than ARGV[1] ms. A stream without groups is left alone (a service not deployed
#: yet will want its events). KEYS: stream, registry. ARGV: keep ms, retention ms. Returns
#: {min id kept, entries trimmed}, or false when there was nothing to decide on.
TRIM = """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
if #groups == 0 then return false end
local function parse(id)
    local ms, seq = string.match(id, '^(%d+)-(%d+)$')
    return tonumber(ms), tonumber(seq)
end
local best_ms, best_seq = nil, nil
local function consider(ms, seq)
    if best_ms == nil or ms < best_ms or (ms == best_ms and seq < best_seq) then
        best_ms, best_seq = ms, seq
    end
end
local present = {}
for _, g in ipairs(groups) do
    local info = {}
    for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
    present[info['name']] = true
    local ms, seq = parse(info['last-delivered-id'])
    consider(ms, seq + 1)
    if tonumber(info['pending']) > 0 then
        local s = redis.call('XPENDING', KEYS[1], info['name'])
        consider(parse(s[2]))
    end
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if #KEYS > 1 then
    for _, name in ipairs(redis.call('HKEYS', KEYS[2])) do
        if not present[name] then consider(now_ms - tonumber(ARGV[2]), 0) end
    end
end
local keep = tonumber(ARGV[1])
if keep > 0 then consider(now_ms - keep, 0) end
if best_ms < 0 then return false end
local min_id = string.format('%.0f-%.0f', best_ms, best_seq)
local trimmed = redis.call('XTRIM', KEYS[1], 'MINID', '~', min_id)
return {min_id, trimmed}
"""

#: Delete the consumers of every group of a stream that are idle and own no pending entry;
#: never one with pending entries (they would become unclaimable). KEYS: stream. ARGV: min
#: idle ms, a consumer to keep (this process). Returns the deleted names as "group/consumer".
DROP_IDLE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
local out = {}
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    local group
    for i = 1, #g, 2 do if g[i] == 'name' then group = g[i + 1] end end
    for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], group)) do
        local info = {}
        for i = 1, #c, 2 do info[c[i]] = c[i + 1] end
        local idle = info['idle'] >= tonumber(ARGV[1])
        if info['pending'] == 0 and idle and info['name'] ~= ARGV[2] then
            redis.call('XGROUP', 'DELCONSUMER', KEYS[1], group, info['name'])
            out[#out + 1] = group .. '/' .. info['name']
        end
    end
end
return out
"""


class Scripts:
    """The scripts registered on one client (``EVALSHA``, loaded again after a restart)."""

    def __init__(self, client: Redis | RedisCluster) -> None:
        self.publish: AsyncScript = client.register_script(PUBLISH)
        self.settle: AsyncScript = client.register_script(SETTLE)
        self.renew: AsyncScript = client.register_script(RENEW)
        self.reclaim: AsyncScript = client.register_script(RECLAIM)
        self.dead_letter: AsyncScript = client.register_script(DEAD_LETTER)
        self.redeliver: AsyncScript = client.register_script(REDELIVER)
        self.trim: AsyncScript = client.register_script(TRIM)
        self.drop_idle: AsyncScript = client.register_script(DROP_IDLE)


async def run_scripts(
    client: Redis | RedisCluster, calls: Sequence[ScriptCall], *, reload: bool = True
) -> list[Any]:
    """``EVALSHA`` every call in one pipeline; return each call's reply or exception.

    redis-py's own pipeline sends ``SCRIPT EXISTS`` first, a round trip per batch; here a
    script missing after a server restart fails with ``NOSCRIPT`` (without running), is
    loaded, and only those calls are sent again. On Redis Cluster, whose client refuses
    scripts in a pipeline, the calls run concurrently instead, each on its key's node.
    """
    if isinstance(client, RedisCluster):
        results = await _each(client, calls)
    else:
        async with client.pipeline(transaction=False) as pipe:
            for script, keys, args in calls:
                pipe.evalsha(script.sha, len(keys), *keys, *args)
            results = await pipe.execute(raise_on_error=False)
    missing = [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]
    if missing and reload:
        for script in {id(calls[i][0]): calls[i][0] for i in missing}.values():
            await client.script_load(script.script)  # on a cluster: on every master
        again = await run_scripts(client, [calls[i] for i in missing], reload=False)
        for i, reply in zip(missing, again, strict=True):
            results[i] = reply
    return results


async def _each(client: RedisCluster, calls: Sequence[ScriptCall]) -> list[Any]:
    results: list[Any] = [None] * len(calls)

    async def call(i: int, script: AsyncScript, keys: Sequence[str], args: Sequence[str]) -> None:
        try:
            results[i] = await client.evalsha(script.sha, len(keys), *keys, *args)
        except (RedisError, RedisClusterException) as exc:
            results[i] = exc

    async with anyio.create_task_group() as tg:
        for i, (script, keys, args) in enumerate(calls):
            tg.start_soon(call, i, script, keys, args)
    return results
