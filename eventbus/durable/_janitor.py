"""The janitor: keeps streams short and consumer lists clean, without losing anything.

For each event stream this process consumes (one process per stream and round, by a
``SET NX PX`` turn key), every ``janitor_interval``:

* trim the stream below the oldest entry any of its groups still needs (the ``TRIM``
  script: the smallest pending id, or the entry after the last one delivered), and never an
  entry younger than ``trim_keep``. Acknowledging never deletes (``XDEL`` on ack would take
  the entry from every other group too); the ``MAXLEN`` cap on ``XADD`` is only a backstop.
  A stream with no group at all is left alone: a service not deployed yet will want it.
* every group that ever registered for the stream (its consumers register it when they
  start; ``declare_group`` / ``streams declare`` registers one before its service first
  runs) counts, existing or not: for one that does not exist (yet, or any more), entries
  younger than the outbox's ``retention`` are kept. The rule: an entry goes once every
  registered group has read it, or once the outbox no longer retains its row either. The
  price: while a registered group is absent, the stream holds up to ``retention`` of events
  (at most ``maxlen``, with the cap's alarm); ``forget_group`` / ``streams forget`` ends it.
* delete consumers idle for ``consumer_idle`` that own no pending entry (a consumer with
  pending entries is never deleted: they would become unclaimable).

And every ``purge_interval``, in each process with a listener taking ``tx``, inbox rows past
``retention`` are deleted in batches (the relay purges the outbox; a service that only
consumes runs no relay, but has an inbox).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import anyio

from .._failures import safe_str
from ._group import Group
from ._runtime import DB_ERRORS, REDIS_ERRORS, Runtime, db_deadline, logger, utcnow
from ._stats import JanitorStatistics

__all__ = ["Janitor"]


class Janitor:
    """Trims the streams of *groups* and drops their idle consumers (see module docstring)."""

    def __init__(self, rt: Runtime, groups: Sequence[Group]) -> None:
        self.rt = rt
        self.groups = list(groups)
        self.trimmed = 0
        self.consumers_deleted = 0

    def statistics(self) -> JanitorStatistics:
        return JanitorStatistics(trimmed=self.trimmed, consumers_deleted=self.consumers_deleted)

    async def run(self) -> None:
        while True:
            await anyio.sleep(self.rt.options.janitor_interval)
            try:
                await self.sweep()
            except REDIS_ERRORS as exc:
                self.rt.log(logging.WARNING, "janitor", "janitor: %s", safe_str(exc))

    async def purge_inbox_loop(self) -> None:
        rt, opts = self.rt, self.rt.options
        while True:
            await anyio.sleep(opts.purge_interval)
            if not any(g.listener.takes_tx for g in self.groups):
                continue
            try:  # cut short, it goes on next time: each batch commits on its own
                with db_deadline(opts.db_timeout):
                    await rt.inbox.purge(
                        rt.engine, before=utcnow() - opts.retention, batch=opts.purge_batch
                    )
            except DB_ERRORS as exc:
                rt.log(logging.WARNING, "purge", "inbox purge failed (%s)", safe_str(exc))

    async def sweep(self, events: Iterable[str] | None = None, *, force: bool = False) -> int:
        """One round over the streams of *events* (default: those of this process's groups);
        return the entries trimmed.

        :param force: skip the turn key (tests, and operators)
        """
        rt, opts = self.rt, self.rt.options
        trimmed = 0
        names = sorted(events or {g.listener.event_name for g in self.groups})
        turn_ms = max(1, int(opts.janitor_interval * 900))
        for name in names:
            if not force and not await rt.client.set(
                rt.keys.janitor(name), rt.consumer, nx=True, px=turn_ms
            ):
                continue  # another process has this round
            registry = rt.keys.groups(name)
            streams: list[tuple[str, str | None]] = [(rt.keys.stream(name), registry)]
            streams += [(g.restream, None) for g in self.groups if g.listener.event_name == name]
            for stream, registered in streams:
                trimmed += await self.trim(stream, registered)
                dropped = await rt.scripts.drop_idle(
                    keys=[stream], args=[int(opts.consumer_idle * 1000), rt.consumer]
                )
                if dropped:
                    self.consumers_deleted += len(dropped)
                    logger.info(
                        "janitor: deleted %d idle consumers with nothing pending from %r: %s",
                        len(dropped),
                        stream,
                        ", ".join(d.decode() if isinstance(d, bytes) else d for d in dropped),
                    )
        self.trimmed += trimmed
        return trimmed

    async def trim(self, stream: str, registry: str | None = None) -> int:
        """Trim one stream below what its groups (and the absent ones of *registry*) still
        need; return the entries removed."""
        opts = self.rt.options
        reply = await self.rt.scripts.trim(
            keys=[stream] if registry is None else [stream, registry],
            args=[int(opts.trim_keep * 1000), int(opts.retention.total_seconds() * 1000)],
        )
        if not reply:
            return 0
        return int(reply[1])
