"""Paused consumer groups as Redis shows them: for ``streams status``, the console, and an
operator's early resume.

A group's kill switch pauses it in one process. That process keeps an entry in the event's
pause hash (``<prefix>:evt:{<name>}:paused``, field ``<group>/<consumer>``) while paused,
refreshed about every second and expiring soon after the process stops refreshing it; an
operator asking for an early resume overwrites the entries of a group with ``resume``, and
each paused process sees it at its next refresh.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

from ._keys import StreamKeys
from ._runtime import AnyRedis

__all__ = ["PausedConsumer", "paused_consumers", "request_resume"]

#: the value an operator writes over a paused consumer's entry
RESUME = "resume"

#: Refresh this consumer's entry unless an operator asked it to resume (then delete it).
#: KEYS: the pause hash. ARGV: field, value, TTL ms. Returns 1 if a resume was asked.
HOLD = """
if redis.call('HGET', KEYS[1], ARGV[1]) == 'resume' then
    redis.call('HDEL', KEYS[1], ARGV[1])
    return 1
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 0
"""

#: Ask every paused consumer of one group to resume. KEYS: the pause hash. ARGV: group.
#: Returns the consumers asked.
RESUME_GROUP = """
local asked = {}
local prefix = ARGV[1] .. '/'
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
    if string.sub(all[i], 1, #prefix) == prefix and all[i + 1] ~= 'resume' then
        redis.call('HSET', KEYS[1], all[i], 'resume')
        asked[#asked + 1] = string.sub(all[i], #prefix + 1)
    end
end
return asked
"""


@dataclasses.dataclass(frozen=True, slots=True)
class PausedConsumer:
    """One process whose kill switch paused a group."""

    group: str
    consumer: str
    paused_since: datetime | None  #: the episode's first trip
    resumes_at: datetime | None  #: the end of the current pause
    failures: int  #: failures among ``deliveries`` in the switch's window at the trip
    deliveries: int
    resume_requested: bool  #: an operator asked it to resume; it will at its next check


def pause_value(since: float | None, resumes_at: float | None, failures: int, total: int) -> str:
    return json.dumps(
        {"since": since, "resumes_at": resumes_at, "failures": failures, "deliveries": total}
    )


def _when(value: Any) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(float(value), UTC)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def paused_consumers(client: AnyRedis, keys: StreamKeys, name: str) -> list[PausedConsumer]:
    """The paused consumers of every group of the event (an unreadable entry is skipped)."""
    out = []
    raw: dict[Any, Any] = await client.hgetall(keys.paused(name))
    for field, value in raw.items():
        group, sep, consumer = _text(field).rpartition("/")
        if not sep:
            continue
        text = _text(value)
        if text == RESUME:
            out.append(PausedConsumer(group, consumer, None, None, 0, 0, True))
            continue
        try:
            data = json.loads(text)
            out.append(
                PausedConsumer(
                    group,
                    consumer,
                    _when(data.get("since")),
                    _when(data.get("resumes_at")),
                    int(data.get("failures", 0)),
                    int(data.get("deliveries", 0)),
                    False,
                )
            )
        except (ValueError, TypeError, AttributeError):
            continue
    return sorted(out, key=lambda p: (p.group, p.consumer))


async def request_resume(client: AnyRedis, keys: StreamKeys, name: str, group: str) -> list[str]:
    """Ask the paused consumers of *group* on the event's stream to resume now; their names."""
    script = client.register_script(RESUME_GROUP)
    return [_text(c) for c in await script(keys=[keys.paused(name)], args=[group])]
