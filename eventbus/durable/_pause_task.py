"""Holds a tripped group's pause: until its time is up, or an operator resumes it early.

While paused, the process keeps its entry in the event's pause hash fresh (what ``streams
status`` and the console show) about every second, and learns there whether an operator
asked for a resume (``streams resume``, the console's button); ``RedisStreams.resume_group``
in this process resumes at once. Redis being unreachable only delays what it would tell.
"""

from __future__ import annotations

import logging

import anyio

from .._failures import safe_str
from ._group import Group
from ._pauses import HOLD, pause_value
from ._runtime import REDIS_ERRORS, logger

__all__ = ["pause_loop"]

#: how often a paused process refreshes its entry and looks for an operator's resume
HOLD_EVERY = 1.0


async def pause_loop(group: Group) -> None:
    """Run beside a group's consumer: hold each pause its kill switch trips, then resume."""
    while True:
        await group.tripped.wait()
        await _hold(group)
        group.resume()


async def _hold(group: Group) -> None:
    rt, switch = group.rt, group.switch
    assert switch is not None
    key = rt.keys.paused(group.listener.event_name)
    field = f"{group.name}/{rt.consumer}"
    hold = rt.client.register_script(HOLD)
    while (left := switch.remaining()) > 0 and not group.resume_asked.is_set():
        state = switch.state()
        value = pause_value(state.paused_since, state.resumes_at, state.failures, state.deliveries)
        ttl_ms = int((left + 5 * HOLD_EVERY) * 1000)
        try:
            if await hold(keys=[key], args=[field, value, ttl_ms]):
                logger.warning("group %r resumes early: an operator asked", group.name)
                return
        except REDIS_ERRORS as exc:
            rt.log(
                logging.WARNING,
                ("pause-hold", group.name),
                "could not show group %r as paused in Redis (%s)",
                group.name,
                safe_str(exc),
            )
        with anyio.move_on_after(min(left, HOLD_EVERY)):
            await group.resume_asked.wait()
    try:
        with anyio.move_on_after(HOLD_EVERY):
            await rt.client.hdel(key, field)
    except REDIS_ERRORS:  # it expires a few seconds after the pause anyway
        pass
