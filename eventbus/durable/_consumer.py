"""The consumer of one group in this process: reads entries, runs a bounded number of
listener calls, keeps their leases, and stops without acknowledging unfinished work.

Reading: at start, this consumer's own pending entries (from an earlier run under the same
name) go to the reclaim loop; then ``XREADGROUP ... >`` on the event's stream and the group's
redelivery stream, asking for as many entries as there are free slots, blocking at most
``block`` seconds. A missing group (``NOGROUP``) is recreated at ``0`` with a backoff; an
unreachable Redis is retried with a backoff too: neither can spin the loop.

Stopping: no more reads or reclaims; entries whose call has not begun (queued, or held at the
gate by a kill-switch pause or a suspect) are handed back at once, their delivery not counted,
for any consumer's next reclaim; calls that began get ``shutdown_grace`` seconds, then are
cancelled. Cancelled calls are never acknowledged: their entries stay pending for another
consumer (or this one, restarted) after the visibility time.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from .._failures import safe_str
from ._batch import deliver_batch
from ._delivery import deliver, hand_back
from ._envelope import text_fields
from ._group import Entry, Group, InFlight, batch_limit, is_missing_group, shares_transactions
from ._held import release_period
from ._leases import adopt_own_pending, reclaim_loop, renew_loop
from ._pause_task import pause_loop
from ._runtime import REDIS_ERRORS

__all__ = ["Consumer"]

MAX_BACKOFF = 5.0  # longest pause after failed reads


class Consumer:
    """Runs one :class:`Group` in this process (see the module docstring)."""

    def __init__(self, group: Group) -> None:
        self.group = group
        # An asyncio queue, not an anyio memory stream: a get() with an item waiting costs a
        # method call, where a stream's receive() checkpoints; per entry, that is a fifth of
        # the consumer's time. The transport runs on asyncio only anyway.
        self._queue: asyncio.Queue[Entry] = asyncio.Queue()
        self._intake = anyio.CancelScope()
        self._handlers: TaskGroup | None = None
        self._done = anyio.Event()
        self._stopping = False  #: no call begins from now on: stop() hands the entries back

    def __repr__(self) -> str:
        return f"Consumer({self.group.name!r}, consumer={self.group.rt.consumer!r})"

    async def prepare(self) -> None:
        """Create the group if missing and adopt this consumer's own pending entries."""
        await self.group.ensure()
        await adopt_own_pending(self.group)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        group = self.group
        try:
            async with anyio.create_task_group() as service:  # outlives the listener calls
                service.start_soon(renew_loop, group)
                service.start_soon(group.ack_loop)
                if shares_transactions(group):
                    service.start_soon(_release_idle_connections, group)
                if group.switch is not None:
                    service.start_soon(pause_loop, group)
                async with anyio.create_task_group() as handlers:
                    self._handlers = handlers
                    for _ in range(group.rt.options.concurrency):
                        handlers.start_soon(self._work)
                    task_status.started()
                    with self._intake:
                        async with anyio.create_task_group() as intake:
                            intake.start_soon(self._read_loop)
                            intake.start_soon(reclaim_loop, group, self.start)
                group.in_flight.clear()  # queued, never started: pending for whoever is next
                await group.flush_acks()
                service.cancel_scope.cancel()
        finally:
            await group.release_connections(idle_only=False)
            self._done.set()

    def start(self, entry: Entry) -> None:
        """Queue *entry* for the next free worker (its lease is renewed from now on)."""
        self.group.in_flight[entry.key] = InFlight(entry)
        if entry.suspect:
            self.group.suspects += 1
        self._queue.put_nowait(entry)

    async def _work(self) -> None:
        """One of ``concurrency`` workers: a fixed pool, so that no task is made per entry.

        A suspect (an entry back after its consumer ended or stalled) runs alone: it waits
        until no other call of the group runs here, and no other call starts until it is done;
        should it end the process again, no batch-mate was running beside it."""
        group = self.group
        if not shares_transactions(group):
            while await self._next():
                pass
            return
        # Only a worker holding a transaction slot takes entries: the others wait at the gate
        # with none, so that entries arriving while every slot is busy stay queued together
        # for the next free slot's batch (not one held by each idle worker, to run alone).
        while True:
            while group.tx_reserved >= group.tx_slots():
                await group.wait_gate()
            group.tx_reserved += 1
            try:
                if not await self._next():
                    return
            finally:
                group.tx_reserved -= 1
                group.gate_changed()

    async def _next(self) -> bool:
        """Take the next entry (and, for shared transactions, its share of the queue) and
        handle it; ``False`` once stopping."""
        queue, group = self._queue, self.group
        shared = shares_transactions(group)
        entry = await queue.get()
        if entry.suspect:
            await self._alone(entry)
            return True
        while group.alone or group.paused:  # held, its lease renewed, its count unspent
            await group.wait_gate()
        batch: list[Entry] = []
        suspects: list[Entry] = []
        limit = batch_limit(group)
        if shared:  # a share of what is queued per free slot: a burst runs side by side
            free = max(1, group.tx_slots() - group.tx_running)
            limit = min(limit, -(-(queue.qsize() + 1) // free))
        while len(batch) + 1 < limit and not queue.empty():  # queued already
            more = queue.get_nowait()
            (suspects if more.suspect else batch).append(more)
        if not self._begin([entry, *batch]):
            return False
        group.running += 1
        try:
            if shared:
                held = group.take_connection()
                try:
                    await deliver_batch(group, [entry, *batch], held)
                finally:
                    try:
                        await held.after_batch()
                    finally:
                        group.give_back(held)
            else:
                await deliver(group, entry)
        finally:
            group.running -= 1
            if group.alone and not group.running:
                group.gate_changed()
        for suspect in suspects:
            await self._alone(suspect)
        return True

    async def _alone(self, entry: Entry) -> None:
        group = self.group
        group.alone += 1
        try:
            async with group.alone_lock:
                while group.running or group.paused:
                    await group.wait_gate()
                if not self._begin([entry]):
                    return
                await deliver(group, entry)
                # Acknowledged (and its record deleted) before the next suspect runs: should
                # that one end the process, this one must not come back charged with it.
                await group.flush_acks()
        finally:
            group.alone -= 1
            group.gate_changed()

    def _begin(self, entries: list[Entry]) -> bool:
        """Mark the calls of *entries* begun; ``False`` once stopping (stop() has handed them
        back: they must not run here too)."""
        if self._stopping:
            return False
        for entry in entries:
            flight = self.group.in_flight.get(entry.key)
            if flight is not None:
                flight.started = True
        return True

    async def stop(self, grace: float) -> int:
        """Stop reading, hand back the entries whose call has not begun, let the calls that
        began finish for *grace* seconds, cancel the rest; return how many were cancelled
        (their entries stay pending, unacknowledged)."""
        self._intake.cancel()
        self._stopping = True
        group = self.group
        await hand_back(group, [f.entry for f in group.in_flight.values() if not f.started])
        with anyio.move_on_after(grace):
            while group.in_flight:
                await group.wait_finished()
        unfinished = len(group.in_flight)
        if self._handlers is not None:
            self._handlers.cancel_scope.cancel()
        await self._done.wait()
        return unfinished

    async def _read_loop(self) -> None:
        group, rt = self.group, self.group.rt
        streams: dict[Any, Any] = {group.stream: ">", group.restream: ">"}
        block_ms = int(rt.options.block * 1000)
        backoff = 0.0
        while True:
            await group.wait_resumed()  # a tripped kill switch: no reading until it resumes
            while group.free_slots() == 0:
                await group.wait_finished()
            try:
                reply: Any = await rt.client.xreadgroup(
                    group.name, rt.consumer, streams, count=group.free_slots(), block=block_ms
                )
            except REDIS_ERRORS as exc:
                if is_missing_group(exc):
                    await group.recover(exc)
                    continue
                backoff = min(max(backoff * 2, 0.05), MAX_BACKOFF)
                rt.log(
                    logging.WARNING,
                    ("read", group.name, type(exc)),
                    "reading group %r failed (%s); retrying in %.2f s",
                    group.name,
                    safe_str(exc),
                    backoff,
                )
                await anyio.sleep(backoff)
                continue
            backoff = 0.0
            for raw_stream, entries in reply or ():
                stream = raw_stream.decode() if isinstance(raw_stream, bytes) else raw_stream
                redelivered = stream == group.restream
                for raw_id, fields in entries:
                    if fields is None:
                        continue  # deleted while pending: only own-history reads return it
                    entry_id = raw_id.decode() if isinstance(raw_id, bytes) else raw_id
                    if redelivered:
                        group.counters.redelivered += 1
                    self.start(Entry(stream, entry_id, text_fields(fields), 1))


async def _release_idle_connections(group: Group) -> None:
    """Give back the connections of transaction slots that had no batch for a while: a
    quiet group holds none from the pool."""
    while True:
        await anyio.sleep(release_period())
        await group.release_connections(idle_only=True)
