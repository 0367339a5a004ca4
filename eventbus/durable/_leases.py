"""Leases on entries in flight, and the reclaim of entries whose lease ran out.

* Renewal, every third of ``visibility``: ``XCLAIM ... IDLE 0 JUSTID`` on the entries this
  process is working on, only those still owned by it (the ``RENEW`` script). ``JUSTID``
  leaves the delivery count alone, so that a long call is not mistaken for a crash loop, and
  a call that outlives any fixed timeout is never handed to another consumer while it runs.
* Reclaim, every half ``visibility`` and whenever a scheduled retry falls due:
  ``XAUTOCLAIM`` with ``min-idle = visibility``, looped until its cursor is ``0-0`` (a call
  may scan only part of the pending list and return nothing with a cursor that is not done).
  Its third reply, the ids Redis found pending but deleted from the stream, raises the
  ``entries-lost`` alarm. XAUTOCLAIM is atomic: two reclaimers never take one entry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from .._failures import safe_str
from ._attempts import Attempts, classify, field_of
from ._envelope import text_fields
from ._events import EntriesLost
from ._group import Entry, Group, is_missing_group
from ._runtime import REDIS_ERRORS, logger

__all__ = ["adopt_own_pending", "reclaim_loop", "reclaim_once", "renew_loop", "renew_once"]

CHUNK = 500  # ids per script call


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def renew_loop(group: Group) -> None:
    while True:
        await anyio.sleep(group.rt.options.visibility / 3)
        await renew_once(group)


async def renew_once(group: Group) -> None:
    """Renew the lease of every entry in flight; flag the ones another consumer took."""
    rt = group.rt
    by_stream: dict[str, list[str]] = {}
    for flight in list(group.in_flight.values()):
        if not flight.lost:
            by_stream.setdefault(flight.entry.stream, []).append(flight.entry.id)
    for stream, ids in by_stream.items():
        for start in range(0, len(ids), CHUNK):
            try:
                async with group.idle_lock:
                    # Still in flight? A retry scheduled meanwhile has set its own idle time.
                    chunk = [
                        i for i in ids[start : start + CHUNK] if (stream, i) in group.in_flight
                    ]
                    if not chunk:
                        continue
                    kept = await rt.scripts.renew(
                        keys=[stream], args=[group.name, rt.consumer, 0, *chunk]
                    )
            except REDIS_ERRORS as exc:
                rt.log(
                    logging.WARNING,
                    ("renew", group.name),
                    "could not renew the leases of group %r (%s); entries in flight may be "
                    "reclaimed by another consumer after visibility=%s s",
                    group.name,
                    safe_str(exc),
                    rt.options.visibility,
                )
                continue
            ours = {_text(k) for k in kept}
            for entry_id in chunk:
                lost = group.in_flight.get((stream, entry_id))
                if entry_id in ours or lost is None or lost.lost:
                    continue
                lost.lost = True
                group.counters.leases_lost += 1
                rt.log(
                    logging.WARNING,
                    ("lease", group.name),
                    "entry %s of group %r was reclaimed by another consumer while this one "
                    "worked on it (a stall longer than visibility=%s s); both may complete it",
                    entry_id,
                    group.name,
                    rt.options.visibility,
                )


async def adopt_own_pending(group: Group) -> None:
    """Hand this consumer's own pending entries (left by an earlier run under the same
    consumer name) to the reclaim loop at once, instead of after the visibility time."""
    rt = group.rt
    idle_ms = int(rt.options.visibility * 1000)
    for stream in group.streams:
        start = "-"
        while True:
            rows = await rt.client.xpending_range(
                stream, group.name, min=start, max="+", count=CHUNK, consumername=rt.consumer
            )
            ids = [_text(r["message_id"]) for r in rows]
            if not ids:
                break
            async with group.idle_lock:
                await rt.scripts.renew(keys=[stream], args=[group.name, rt.consumer, idle_ms, *ids])
            if len(ids) < CHUNK:
                break
            start = "(" + ids[-1]
    group.reclaim_wakeup.set()


async def reclaim_loop(group: Group, start: Callable[[Entry], None]) -> None:
    """Reclaim periodically and when retries fall due; *start* runs a reclaimed entry."""
    period = group.rt.options.visibility / 2
    next_pass = time.monotonic()
    while True:
        await group.wait_resumed()  # a tripped kill switch: no reclaiming until it resumes
        now = time.monotonic()
        due = min(next_pass, group.next_retry() or next_pass)
        if due > now:
            group.reclaim_wakeup = anyio.Event()
            with anyio.move_on_after(due - now):
                await group.reclaim_wakeup.wait()
            continue
        if now >= next_pass:
            next_pass = now + period
        group.retries_due(now)
        await reclaim_once(group, start)


async def reclaim_once(group: Group, start: Callable[[Entry], None]) -> int:
    """One pass over both streams of the group; return how many entries were taken."""
    rt = group.rt
    min_idle = int(rt.options.visibility * 1000)
    taken = 0
    for stream in group.streams:
        cursor = "0-0"
        lost: list[str] = []
        while (free := group.free_slots()) > 0:
            try:
                prefix = field_of("", stream == group.restream)
                reply = await rt.scripts.reclaim(
                    keys=[stream, group.runs],
                    args=[group.name, rt.consumer, min_idle, cursor, free, prefix],
                )
            except REDIS_ERRORS as exc:
                if is_missing_group(exc):
                    await group.recover(exc)
                else:
                    rt.log(
                        logging.WARNING,
                        ("reclaim", group.name),
                        "could not reclaim entries of group %r: %s",
                        group.name,
                        safe_str(exc),
                    )
                break
            next_cursor, entries, deleted, counts, records = reply
            lost += [_text(d) for d in deleted]
            for (entry_id, flat), count, raw in zip(entries, counts, records, strict=True):
                eid = _text(entry_id)
                if (stream, eid) in group.in_flight:
                    continue  # ours and still running (a late renewal): leave it be
                group.counters.reclaimed += 1
                taken += 1
                record = Attempts.decode(raw)
                attempts, suspect = classify(int(count), record)
                if suspect:
                    group.counters.suspects += 1
                entry = Entry(stream, eid, _pairs(flat), int(count), attempts, suspect)
                entry.recorded = record is not None
                start(entry)
            cursor = _text(next_cursor)
            if cursor == "0-0":
                break
        if lost:  # one alarm per pass, however many calls the scan took
            _lost(group, stream, lost)
    return taken


def _pairs(flat: Sequence[Any]) -> dict[str, str]:
    return text_fields(dict(zip(flat[::2], flat[1::2], strict=True)))


def _lost(group: Group, stream: str, ids: list[str]) -> None:
    group.counters.lost += len(ids)
    logger.error(
        "%d pending entries of group %r were deleted from stream %r before they were "
        "processed (a MAXLEN cap or an XDEL): %s; republish(since=...) restores them from "
        "the outbox while its rows are retained",
        len(ids),
        group.name,
        stream,
        ", ".join(ids[:10]) + (" ..." if len(ids) > 10 else ""),
    )
    group.rt.notify(EntriesLost(stream=stream, group=group.name, entry_ids=tuple(ids)))
