"""Which consumer groups a stream is kept for: the registry hash ``...:groups`` of each event.

A group is registered when its consumers start, or ahead of time by a deployment step
(``declare_group``, ``python -m eventbus streams declare``), before its service first runs.
The janitor keeps, for a registered group that does not exist (not created yet, or gone),
every entry the outbox still retains; ``forget_group`` (``streams forget``) takes a group off
the registry and out of Redis when its listener is retired.
"""

from __future__ import annotations

import time
from typing import Any

from redis.exceptions import ResponseError

from ._keys import StreamKeys, validate_part
from ._runtime import Runtime

__all__ = ["check_group", "create_group", "forget_group", "register_group", "registered_groups"]


def check_group(group: str) -> str:
    """Return *group* if it is a group name (``service:listener``), else raise naming it."""
    service, sep, listener = validate_part("group", group).partition(":")
    if not (sep and service and listener):
        raise ValueError(f"group {group!r} must be 'service:listener' (e.g. 'billing:grant')")
    return group


async def register_group(rt: Runtime, event: str, group: str) -> bool:
    """Register *group* for *event*'s stream (kept as it was if registered already); return
    whether it is new."""
    now_ms = int(time.time() * 1000)
    return bool(await rt.client.hsetnx(rt.keys.groups(event), check_group(group), now_ms))


async def create_group(client: Any, stream: str, group: str, start: str) -> bool:
    """``XGROUP CREATE ... MKSTREAM`` at *start*; return ``False`` if it existed already."""
    try:
        await client.xgroup_create(stream, group, id=start, mkstream=True)
    except ResponseError as exc:
        if not str(exc).startswith("BUSYGROUP"):
            raise
        return False
    return True


async def registered_groups(client: Any, keys: StreamKeys, event: str) -> list[str]:
    names = await client.hkeys(keys.groups(event))
    return sorted(n.decode() if isinstance(n, bytes) else str(n) for n in names)


async def forget_group(rt: Runtime, event: str, group: str) -> bool:
    """Take *group* off *event*'s registry and destroy it (on the stream; its redelivery
    stream is deleted): its pending entries and its place are dropped. Return whether there
    was anything to forget."""
    check_group(group)
    found = bool(await rt.client.hdel(rt.keys.groups(event), group))
    try:
        found = bool(await rt.client.xgroup_destroy(rt.keys.stream(event), group)) or found
    except ResponseError:  # no such stream
        pass
    found = bool(await rt.client.delete(rt.keys.redeliver(event, group))) or found
    return found
