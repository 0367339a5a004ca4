"""The relay: moves committed outbox rows to their streams, once each, then marks them.

One batch: claim up to ``relay_batch`` rows with a lease (a short transaction of its own),
add each to its stream with the ``PUBLISH`` script in one pipeline, then mark the rows
published where the claim's token still holds their lease. A crash or a stall anywhere only
delays rows: their lease expires, another relay (or this one) claims them again, and the
publish key the script set makes the second addition a no-op that returns the first id.

The relay is woken after a local commit (see :func:`~eventbus.durable._outbox.wake_after_commit`)
and polls every ``poll_interval`` for rows other processes committed. Every
``purge_interval`` it deletes published rows and inbox rows past ``retention``, in batches.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Sequence
from datetime import timedelta

import anyio
from anyio.lowlevel import checkpoint
from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError

from .._failures import safe_str
from ._events import StreamCapped
from ._outbox import ClaimedRow
from ._runtime import Runtime, logger, utcnow
from ._stats import RelayCounters

__all__ = ["Relay"]

#: seconds between two backlog counts (a ``count(*)`` over the partial index)
BACKLOG_INTERVAL = 1.0
#: longest pause after failed batches
MAX_BACKOFF = 5.0
#: seconds between two cap alarms of one stream
CAP_ALARM_INTERVAL = 60.0


class Relay:
    """Publishes the outbox of one database; run one per process (they share the work)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.counters = RelayCounters()
        self._wakeup = anyio.Event()
        self._claims = itertools.count(1)
        self._backoff = 0.0
        self._next_backlog = 0.0
        self._next_purge = time.monotonic() + rt.options.purge_interval
        self._capped_at: dict[str, float] = {}
        self._stopping = False
        self._done: anyio.Event | None = None

    def __repr__(self) -> str:
        return f"Relay(consumer={self.rt.consumer!r}, outbox={self.rt.outbox.table.name!r})"

    def wake(self) -> None:
        """Look for rows now (a local transaction that wrote some has ended)."""
        self._wakeup.set()

    async def run(self) -> None:
        """Publish until cancelled or stopped; errors are logged and retried with backoff."""
        self._done = anyio.Event()
        try:
            await self._loop()
        finally:
            self._done.set()

    async def stop(self) -> None:
        """Finish: publish what is left (the caller bounds the wait), then return."""
        self._stopping = True
        self.wake()
        if self._done is not None:
            await self._done.wait()

    async def _loop(self) -> None:
        opts = self.rt.options
        while True:
            self._wakeup = anyio.Event()  # before the claim: a wake during it is not lost
            try:
                claimed = await self.publish_batch()
            except (RedisError, SQLAlchemyError, OSError) as exc:
                if self._stopping:
                    return
                self.counters.errors += 1
                self._backoff = min(max(self._backoff * 2, 0.05), MAX_BACKOFF)
                self.rt.log(
                    logging.WARNING,
                    ("relay", type(exc)),
                    "relay: publishing failed (%s); retrying in %.2f s, rows stay in the outbox",
                    safe_str(exc),
                    self._backoff,
                )
                await self._update_backlog()
                await anyio.sleep(self._backoff)
                continue
            self._backoff = 0.0
            if claimed >= opts.relay_batch:
                await checkpoint()
                continue
            if self._stopping:
                return
            await self._maintain()
            with anyio.move_on_after(opts.poll_interval):
                await self._wakeup.wait()

    async def publish_batch(self) -> int:
        """Claim, publish and mark one batch; return how many rows were claimed.

        :raises RedisError: (or a database error) after giving the rows back for a retry
        """
        rt, opts = self.rt, self.rt.options
        token = f"{rt.consumer}:{next(self._claims)}"
        claimed_at = utcnow()
        rows = await rt.outbox.claim(
            rt.engine, token=token, limit=opts.relay_batch, lease=opts.lease, now=claimed_at
        )
        if not rows:
            return 0
        self.counters.batches += 1
        await rt.fault("claimed")
        # A relay that stalled past most of its lease leaves the rows to whoever claims them
        # next: adding them now could race that relay after it cleared the publish keys.
        if (utcnow() - claimed_at).total_seconds() > opts.lease * 0.8:
            self.counters.leases_lost += len(rows)
            return len(rows)
        try:
            stream_ids = await self._add(rows)
        except RedisError as exc:
            retry_at = utcnow() + timedelta(seconds=min(max(self._backoff * 2, 0.05), 5.0))
            await rt.outbox.release(
                rt.engine,
                token=token,
                ids=[r.id for r in rows],
                error=f"{type(exc).__name__}: {safe_str(exc)}",
                retry_at=retry_at,
            )
            raise
        await rt.fault("published")
        if stream_ids:
            marked = await rt.outbox.mark(
                rt.engine, token=token, stream_ids=stream_ids, now=utcnow()
            )
            await rt.fault("marked")
            if marked < len(stream_ids):
                self.counters.leases_lost += len(stream_ids) - marked
                rt.log(
                    logging.WARNING,
                    "relay-lease",
                    "relay: %d of %d rows were claimed by another relay before this one marked "
                    "them (a stall longer than lease=%s s); they were published once",
                    len(stream_ids) - marked,
                    len(stream_ids),
                    opts.lease,
                )
            else:
                await self._settle(rows)
        return len(rows)

    async def _add(self, rows: Sequence[ClaimedRow]) -> dict[int, str]:
        """Run the ``PUBLISH`` script once per stream, all in one pipeline; return the stream
        id of each row added (or found added). Rows of a stream whose script failed are
        claimed again after their lease."""
        rt, opts = self.rt, self.rt.options
        by_name: dict[str, list[ClaimedRow]] = {}
        for row in rows:
            by_name.setdefault(row.name, []).append(row)
        ttl_ms = str(int(opts.publish_key_ttl * 1000))
        cap = str(opts.maxlen or 0)
        async with rt.client.pipeline(transaction=False) as pipe:
            for name, batch in by_name.items():
                keys = [rt.keys.stream(name)]
                args: list[str] = [ttl_ms, cap]
                for row in batch:
                    keys.append(rt.keys.published(name, row.event_id))
                    fields = row.envelope().fields()
                    args.append(str(2 * len(fields)))
                    for item in fields.items():
                        args += item
                await rt.scripts.publish(keys=keys, args=args, client=pipe)
            results = await pipe.execute(raise_on_error=False)
        out: dict[int, str] = {}
        failed: list[BaseException] = []
        for (name, batch), result in zip(by_name.items(), results, strict=True):
            if isinstance(result, BaseException):
                failed.append(result)
                continue
            ids, flags, capped = result
            flags = flags.decode() if isinstance(flags, bytes) else str(flags)
            for row, stream_id in zip(batch, ids, strict=True):
                out[row.id] = stream_id.decode() if isinstance(stream_id, bytes) else stream_id
            added = flags.count("1")
            self.counters.published += added
            self.counters.deduplicated += len(batch) - added
            if capped:
                self._cap_alarm(name)
        if failed and not out:
            raise failed[0] if isinstance(failed[0], RedisError) else RedisError(failed[0])
        if failed:
            self.counters.errors += 1
            rt.log(
                logging.WARNING,
                "relay-stream",
                "relay: rows of %d streams could not be added (%s); retried after their lease",
                len(failed),
                safe_str(failed[0]),
            )
        return out

    async def _settle(self, rows: Sequence[ClaimedRow]) -> None:
        """Shorten the publish keys of marked rows to ``settle``: memory stays bounded by the
        publish rate times twice the lease, not by a day of events."""
        rt = self.rt
        ms = str(int(rt.options.settle * 1000))
        by_name: dict[str, list[str]] = {}
        for row in rows:
            by_name.setdefault(row.name, []).append(rt.keys.published(row.name, row.event_id))
        try:
            async with rt.client.pipeline(transaction=False) as pipe:
                for keys in by_name.values():
                    await rt.scripts.settle(keys=keys, args=[ms], client=pipe)
                await pipe.execute(raise_on_error=False)
        except RedisError:
            pass  # the keys expire by their own TTL

    def _cap_alarm(self, name: str) -> None:
        self.counters.capped += 1
        now = time.monotonic()
        if now - self._capped_at.get(name, -CAP_ALARM_INTERVAL) < CAP_ALARM_INTERVAL:
            return
        self._capped_at[name] = now
        stream = self.rt.keys.stream(name)
        maxlen = self.rt.options.maxlen or 0
        logger.error(
            "stream %r reached its MAXLEN cap of %d: its oldest entries are trimmed whether or "
            "not every group read them; find the stalled group ('streams status') or raise maxlen",
            stream,
            maxlen,
        )
        self.rt.notify(StreamCapped(stream=stream, maxlen=maxlen))

    async def _maintain(self) -> None:
        await self._update_backlog()
        if time.monotonic() < self._next_purge:
            return
        rt, opts = self.rt, self.rt.options
        self._next_purge = time.monotonic() + opts.purge_interval
        before = utcnow() - opts.retention
        try:
            self.counters.purged += await rt.outbox.purge(
                rt.engine, before=before, batch=opts.purge_batch
            )
            await rt.inbox.purge(rt.engine, before=before, batch=opts.purge_batch)
        except SQLAlchemyError as exc:
            rt.log(logging.WARNING, "purge", "relay: purge failed (%s)", safe_str(exc))

    async def _update_backlog(self) -> None:
        if time.monotonic() < self._next_backlog:
            return
        self._next_backlog = time.monotonic() + BACKLOG_INTERVAL
        try:
            backlog = await self.rt.outbox.backlog(self.rt.engine)
        except SQLAlchemyError:
            return
        self.counters.backlog = backlog.count
        self.counters.oldest_age = backlog.oldest_age(utcnow())
