"""The relay: moves committed outbox rows to their streams, once each, then marks them.

One batch: claim up to ``relay_batch`` rows with a lease (one statement), add them to their
streams with the ``PUBLISH`` script (one call per stream, one pipeline), then mark the rows
published where the claim's token still holds their lease (one statement). A crash or a
stall anywhere only delays rows: their lease expires, another relay (or this one) claims
them again, and the publish key the script set makes the second addition a no-op that
returns the first id.

The relay is woken after a local commit (see :func:`~eventbus.durable._wake.wake_after_commit`)
and polls every ``poll_interval`` for rows other processes committed. Every
``purge_interval`` it deletes published rows past ``retention``, in batches (the janitor
purges the inbox, in every process that consumes).
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
from sqlalchemy.ext.asyncio import AsyncConnection

from .._failures import safe_str
from ._envelope import VERSION
from ._events import BacklogHigh, BacklogNormal, StreamCapped
from ._outbox import ClaimedRow
from ._runtime import DB_ERRORS, REDIS_ERRORS, Runtime, db_deadline, logger, utcnow
from ._scripts import ScriptCall, run_scripts
from ._stats import RelayCounters

__all__ = ["Relay"]

#: seconds between two backlog counts (a ``count(*)`` over the partial index)
BACKLOG_INTERVAL = 1.0
#: longest pause after failed batches
MAX_BACKOFF = 5.0
#: seconds between two cap alarms of one stream
CAP_ALARM_INTERVAL = 60.0
#: what a batch may fail with: its rows are given back, the relay backs off and goes on
RETRIED: tuple[type[Exception], ...] = (*REDIS_ERRORS, *DB_ERRORS)
#: the longest a stop that left rows waits to count them (for its log line)
LEFT_COUNT_PATIENCE = 2.0
#: the share of its lease after which a claim adds nothing (the rest is a margin for clocks)
LEASE_SPENT = 0.8


class Relay:
    """Publishes the outbox of one database; run one per process (they share the work).

    The relay keeps one connection of its own, in autocommit: a claim and a mark are each one
    statement, atomic by itself, so a batch costs two round trips to the database, not eight.
    """

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.counters = RelayCounters()
        self._wakeup = anyio.Event()
        self._claims = itertools.count(1)
        self._backoff = 0.0
        self._next_backlog = 0.0
        self._next_purge = time.monotonic() + rt.options.purge_interval
        self._capped_at: dict[str, float] = {}
        self._high_since = 0.0  #: monotonic start of the backlog-high episode
        self._stopping = False
        self._done: anyio.Event | None = None
        #: monotonic time at which the rows this relay gave back after a failure are
        #: claimable again (a drain at stop waits for them)
        self._held_back_until = 0.0
        #: the last failure of a batch, for the line a stop logs if rows are left
        self._last_error: str | None = None
        self._conn: AsyncConnection | None = None
        #: (name, event id) of rows marked published whose publish keys are not shortened yet
        self._to_settle: list[tuple[str, str]] = []

    def __repr__(self) -> str:
        return f"Relay(consumer={self.rt.consumer!r}, outbox={self.rt.outbox.table.name!r})"

    def wake(self) -> None:
        """Look for rows now (a local transaction that wrote some has ended)."""
        self._wakeup.set()

    async def run(self) -> None:
        """Publish until cancelled or stopped; errors are logged and retried with backoff."""
        self._done = anyio.Event()
        self._stopping = False
        try:
            await self._loop()
        finally:
            with anyio.CancelScope(shield=True):
                await self.aclose()
            self._done.set()

    async def stop(self, grace: float) -> None:
        """Drain, then return: publish every row committed before this call, for at most
        *grace* seconds. What is left is logged with its count; it stays in the outbox for
        the next relay (the loop is cancelled by the caller)."""
        self._stopping = True
        self.wake()
        done = self._done
        if done is None:
            return
        with anyio.move_on_after(grace):
            await done.wait()
        if not done.is_set():
            await self._log_left(grace)

    async def _log_left(self, grace: float) -> None:
        count = "an unknown number of"
        with anyio.move_on_after(LEFT_COUNT_PATIENCE):
            try:
                count = str((await self.rt.outbox.backlog(self.rt.engine)).count)
            except DB_ERRORS:
                pass
        logger.warning(
            "relay: stopped after shutdown_grace=%s s with %s rows unpublished in the outbox "
            "(%s); the next relay to run publishes them",
            grace,
            count,
            self._last_error or "publishing was still under way",
        )

    async def _loop(self) -> None:
        opts = self.rt.options
        while True:
            self._wakeup = anyio.Event()  # before the claim: a wake during it is not lost
            # A claim that starts after stop() sees every row this process committed before
            # it (the wake comes after the commit): the drain ends with such a claim.
            draining = self._stopping
            started = time.monotonic()
            try:
                claimed = await self.publish_batch()
            except RETRIED as exc:
                self.counters.errors += 1
                self._backoff = min(max(self._backoff * 2, 0.05), MAX_BACKOFF)
                self._last_error = f"{type(exc).__name__}: {safe_str(exc)}"
                self.rt.log(
                    logging.WARNING,
                    ("relay", type(exc)),
                    "relay: publishing failed (%s); retrying in %.2f s, rows stay in the outbox",
                    safe_str(exc),
                    self._backoff,
                )
                if not self._stopping:  # stopping: the drain goes on within the grace
                    await self._update_backlog()
                await anyio.sleep(self._backoff)
                continue
            self._backoff = 0.0
            self._last_error = None
            if claimed >= opts.relay_batch:
                await self._update_backlog()  # once a second: saturated is when it matters
                await checkpoint()
                continue
            if self._stopping:
                if not draining or started < self._held_back_until:
                    # the claim began before the stop, or before rows this relay gave back
                    # after a failure became claimable again: claim once more
                    await anyio.sleep(max(0.0, self._held_back_until - time.monotonic()))
                    continue
                await self._settle()
                return
            await self._maintain()
            with anyio.move_on_after(opts.poll_interval) as idle:
                await self._wakeup.wait()
                if opts.relay_linger:  # let the commits of the next few moments join in
                    await anyio.sleep(opts.relay_linger)
            if idle.cancelled_caught:  # no batch came to carry the SETTLE calls: send them
                await self._settle()

    async def _db(self) -> AsyncConnection:
        if self._conn is None or self._conn.closed:
            conn = await self.rt.engine.connect()
            self._conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        return self._conn

    async def aclose(self) -> None:
        """Close the relay's connection (``run()`` does when it ends)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                with anyio.move_on_after(self.rt.options.db_timeout):
                    await conn.close()
            except Exception:  # a broken connection: the pool discards it
                pass

    async def publish_batch(self) -> int:
        """Claim, publish and mark one batch; return how many rows were claimed.

        :raises RedisError: (or a database error) after giving the rows back for a retry
        """
        rt, opts = self.rt, self.rt.options
        token = f"{rt.consumer}:{next(self._claims)}"
        claimed_at = utcnow()
        try:
            with db_deadline(opts.db_timeout):
                db = await self._db()
                rows = await rt.outbox.claim(
                    db, token=token, limit=opts.relay_batch, lease=opts.lease, now=claimed_at
                )
        except DB_ERRORS:
            await self.aclose()
            raise
        if not rows:
            return 0
        self.counters.batches += 1
        started = time.monotonic()
        await rt.fault("claimed")
        # A relay that stalled past most of its lease leaves the rows to whoever claims them
        # next. Checked here to save a round trip; the PUBLISH script checks it again, by
        # the server's clock, at the moment it would add (a stall may come after this line).
        deadline = claimed_at + timedelta(seconds=opts.lease * LEASE_SPENT)
        if utcnow() >= deadline:
            self.counters.leases_lost += len(rows)
            return len(rows)
        await rt.fault("adding")
        try:
            stream_ids, refused = await self._add(rows, int(deadline.timestamp() * 1000))
        except REDIS_ERRORS as exc:
            delay = min(max(self._backoff * 2, 0.05), MAX_BACKOFF)
            retry_at = utcnow() + timedelta(seconds=delay)
            self._held_back_until = time.monotonic() + delay
            with db_deadline(opts.db_timeout):
                await rt.outbox.release(
                    db,
                    token=token,
                    ids=[r.id for r in rows],
                    error=f"{type(exc).__name__}: {safe_str(exc)}",
                    retry_at=retry_at,
                )
            raise
        if refused:
            await self._refused(db, token, refused, time.monotonic() - started)
        await rt.fault("published")
        if stream_ids:
            try:
                with db_deadline(opts.db_timeout):
                    marked = await rt.outbox.mark(
                        db, token=token, stream_ids=stream_ids, now=utcnow()
                    )
            except DB_ERRORS:
                await self.aclose()
                raise
            await rt.fault("marked")
            if marked < len(stream_ids):
                self.counters.leases_lost += len(stream_ids) - marked
                rt.log(
                    logging.WARNING,
                    "relay-lease",
                    "relay: %d of %d rows were claimed by another relay before this one marked "
                    "them (a stall longer than lease=%s s); the other relay found their "
                    "publish keys and added nothing: each was added once",
                    len(stream_ids) - marked,
                    len(stream_ids),
                    opts.lease,
                )
            else:
                self._to_settle += [(r.name, r.event_id) for r in rows if r.id in stream_ids]
        return len(rows)

    async def _refused(
        self, db: AsyncConnection, token: str, ids: list[int], elapsed: float
    ) -> None:
        """Rows the ``PUBLISH`` script refused: this claim's deadline had passed by Redis'
        clock. Given back (where this claim still holds them), for any relay to claim again."""
        rt, opts = self.rt, self.rt.options
        self.counters.leases_lost += len(ids)
        if elapsed < opts.lease * LEASE_SPENT / 2:  # no stall here: the clocks disagree
            rt.log(
                logging.ERROR,
                "relay-clock",
                "relay: Redis refused to add %d rows as past their claim's deadline %.2f s "
                "after the claim (lease=%s s): this host's clock is behind the Redis server's "
                "by seconds; leases need the clocks of relays, Redis and the database in step "
                "(NTP)",
                len(ids),
                elapsed,
                opts.lease,
            )
        else:
            rt.log(
                logging.WARNING,
                "relay-lease",
                "relay: %d rows not added: this relay stalled %.2f s after claiming them, past "
                "most of lease=%s s; another relay (or this one) publishes them",
                len(ids),
                elapsed,
                opts.lease,
            )
        try:
            with db_deadline(opts.db_timeout):
                await rt.outbox.release(
                    db,
                    token=token,
                    ids=ids,
                    error="lease spent before publishing",
                    retry_at=utcnow(),
                )
        except DB_ERRORS:  # they come back when their lease ends
            await self.aclose()

    async def _add(
        self, rows: Sequence[ClaimedRow], deadline_ms: int
    ) -> tuple[dict[int, str], list[int]]:
        """Run the ``PUBLISH`` script once per stream (after the ``SETTLE`` calls left from
        the batch before), all in one pipeline; return the stream id of each row added (or
        found added), and the ids of the rows refused because *deadline_ms* (Unix ms) had
        passed. Rows of a stream whose script failed are claimed again after their lease."""
        rt, opts = self.rt, self.rt.options
        by_name: dict[str, list[ClaimedRow]] = {}
        for row in rows:
            by_name.setdefault(row.name, []).append(row)
        ttl_ms = str(int(opts.publish_key_ttl * 1000))
        cap = str(opts.maxlen or 0)
        settles = self._settle_calls()
        calls: list[ScriptCall] = list(settles)
        for name, batch in by_name.items():
            keys = [rt.keys.stream(name)]
            args: list[str] = [ttl_ms, cap, name, VERSION, str(deadline_ms)]
            for row in batch:
                keys.append(rt.keys.published(name, row.event_id))
                args += row.envelope().script_args()
            calls.append((rt.scripts.publish, keys, args))
        results = (await run_scripts(rt.client, calls))[len(settles) :]
        self._to_settle.clear()  # a SETTLE that failed only leaves keys to expire on their own
        out: dict[int, str] = {}
        refused: list[int] = []
        failed: list[BaseException] = []
        for (name, batch), result in zip(by_name.items(), results, strict=True):
            if isinstance(result, BaseException):
                failed.append(result)
                continue
            ids, flags, capped = result
            flags = flags.decode() if isinstance(flags, bytes) else str(flags)
            for row, stream_id, flag in zip(batch, ids, flags, strict=True):
                if flag == "2":
                    refused.append(row.id)
                else:
                    out[row.id] = _text(stream_id)
            added = flags.count("1")
            self.counters.published += added
            self.counters.deduplicated += flags.count("0")
            if capped:
                self._cap_alarm(name)
        if failed and not out and not refused:
            raise failed[0] if isinstance(failed[0], REDIS_ERRORS) else RedisError(failed[0])
        if failed:
            self.counters.errors += 1
            rt.log(
                logging.WARNING,
                "relay-stream",
                "relay: rows of %d streams could not be added (%s); retried after their lease",
                len(failed),
                safe_str(failed[0]),
            )
        return out, refused

    def _settle_calls(self) -> list[ScriptCall]:
        """``SETTLE`` calls for the rows marked since the last ones: their publish keys live
        ``settle`` seconds more, so memory stays bounded by the publish rate times twice the
        lease, not by a day of events."""
        by_name: dict[str, list[str]] = {}
        for name, event_id in self._to_settle:
            by_name.setdefault(name, []).append(self.rt.keys.published(name, event_id))
        ms = str(int(self.rt.options.settle * 1000))
        return [(self.rt.scripts.settle, keys, [ms]) for keys in by_name.values()]

    async def _settle(self) -> None:
        if self._to_settle:
            try:
                await run_scripts(self.rt.client, self._settle_calls())
            except REDIS_ERRORS:
                pass  # the keys expire by their own TTL
            self._to_settle.clear()

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
        try:  # cut short, it goes on next time: each batch commits on its own
            with db_deadline(opts.db_timeout):
                self.counters.purged += await rt.outbox.purge(
                    rt.engine, before=before, batch=opts.purge_batch
                )
        except DB_ERRORS as exc:
            rt.log(logging.WARNING, "purge", "relay: purge failed (%s)", safe_str(exc))

    async def _update_backlog(self) -> None:
        if time.monotonic() < self._next_backlog:
            return
        self._next_backlog = time.monotonic() + BACKLOG_INTERVAL
        try:
            with db_deadline(self.rt.options.db_timeout):
                backlog = await self.rt.outbox.backlog(self.rt.engine)
        except DB_ERRORS as exc:
            self.rt.log(
                logging.WARNING,
                "backlog",
                "relay: could not count the outbox backlog (%s); statistics keep the last count",
                safe_str(exc),
            )
            return
        self.counters.backlog = backlog.count
        self.counters.oldest_age = backlog.oldest_age(utcnow())
        self._watch_backlog()

    def _watch_backlog(self) -> None:
        """Backpressure: one alarm when the backlog passes ``backlog_high``, one all-clear
        when it is back to half of it (a backlog hovering at the bound raises no storm)."""
        bound, c = self.rt.options.backlog_high, self.counters
        if bound is None or c.backlog is None:
            return
        if not c.backlog_high and c.backlog > bound:
            c.backlog_high = True
            self._high_since = time.monotonic()
            logger.warning(
                "relay: %d rows wait in the outbox, past backlog_high=%d (the oldest for %s s): "
                "publishers commit faster than the relays publish, or Redis is unreachable; "
                "nothing is refused",
                c.backlog,
                bound,
                "?" if c.oldest_age is None else f"{c.oldest_age:.1f}",
            )
            self.rt.notify(BacklogHigh(backlog=c.backlog, bound=bound, oldest_age=c.oldest_age))
        elif c.backlog_high and c.backlog <= bound // 2:
            c.backlog_high = False
            seconds = time.monotonic() - self._high_since
            logger.info(
                "relay: the outbox backlog is back to %d rows after %.1f s past backlog_high=%d",
                c.backlog,
                seconds,
                bound,
            )
            self.rt.notify(BacklogNormal(backlog=c.backlog, bound=bound, seconds=seconds))


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
