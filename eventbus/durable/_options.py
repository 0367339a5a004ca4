"""The options of the durable transport, checked once, in one frozen record."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

__all__ = ["DurableOptions"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DurableOptions:
    """Every tunable of the durable transport; the defaults suit most services.

    Times are in seconds unless a ``timedelta``. The relationships checked here (a lease
    shorter than the publish key's life, retries shorter than the visibility time...) are the
    ones the guarantees rest on; the failure-mode table of docs/durable.md explains each.
    """

    #: a consumer's lease on an entry: renewed every third of it while the listener runs;
    #: an entry idle this long is reclaimed by another consumer of the group
    visibility: float = 60.0
    #: calls of a listener for one event (Redis' delivery count) before its dead letter
    max_deliveries: int = 5
    #: the first retry's delay, doubling per delivery, at most ``visibility``
    retry_backoff: float = 1.0
    #: listener calls running at once, per group in this process
    concurrency: int = 16
    #: the longest an async listener call may run before it is cancelled and counted as a
    #: failure (``ListenerTimeoutError``: retried, dead at the last delivery); None: no limit.
    #: A sync listener's thread cannot be stopped, so it is not cut short
    call_timeout: float | None = None
    #: longest wait of one blocking read (``XREADGROUP BLOCK``); below the client's timeout
    block: float = 2.0
    #: the longest the transport's own waits on the database last (the relay's statements,
    #: purges, failure rows; a ``tx`` call's connection, inbox row and commit): past it the
    #: wait counts as an outage (retried, with backoff), so that a connection that went
    #: silent cannot stop a relay or a consumer. The listener's own statements are bounded
    #: by ``call_timeout``
    db_timeout: float = 10.0
    #: how long ``aclose()`` lets running listener calls finish before cancelling them
    shutdown_grace: float = 10.0
    #: run a relay in this process (every process may; they share the work)
    relay: bool = True
    #: rows per relay claim
    relay_batch: int = 500
    #: a relay's lease on the rows it claimed; another relay may retry them after it
    lease: float = 30.0
    #: unpublished outbox rows past which the relay reports backpressure (``backlog_high``
    #: in ``statistics()``, a ``durable.backlog-high`` event once per episode, which ends
    #: with ``backlog-normal`` at half of it); no publish is refused. None: never
    backlog_high: int | None = 10_000
    #: how often an idle relay looks for rows other processes committed
    poll_interval: float = 1.0
    #: how long a relay woken by a local commit waits for more commits to join its batch
    relay_linger: float = 0.002
    #: how long a publish key (the relay's idempotence) lives if its row is never marked
    publish_key_ttl: float = 86_400.0
    #: a stream's ``MAXLEN ~`` cap, a memory backstop only (an alarm when reached); None: none
    maxlen: int | None = 1_000_000
    #: a dead-letter stream's ``MAXLEN ~`` cap
    dead_maxlen: int = 100_000
    #: published outbox rows and inbox rows are kept this long (they back ``republish``)
    retention: timedelta = timedelta(days=7)
    #: how often published rows past retention are purged (in batches of ``purge_batch``)
    purge_interval: float = 60.0
    purge_batch: int = 1_000
    #: how often the janitor trims streams and drops idle consumers
    janitor_interval: float = 60.0
    #: a consumer idle this long with nothing pending is deleted from its group
    consumer_idle: float = 3_600.0
    #: the janitor never trims entries younger than this (seconds); 0: trim all read ones
    trim_keep: float = 0.0

    def __post_init__(self) -> None:
        problems = []
        if self.visibility <= 0 or self.lease <= 0 or self.block <= 0 or self.db_timeout <= 0:
            problems.append("visibility, lease, block and db_timeout must be > 0")
        if self.max_deliveries < 1 or self.concurrency < 1 or self.relay_batch < 1:
            problems.append("max_deliveries, concurrency and relay_batch must be >= 1")
        if not 0 < self.retry_backoff <= self.visibility:
            problems.append(
                f"retry_backoff={self.retry_backoff!r} must be > 0 and at most "
                f"visibility={self.visibility!r} (a retry is a shortened visibility time)"
            )
        if self.publish_key_ttl <= 2 * self.lease:
            problems.append(
                f"publish_key_ttl={self.publish_key_ttl!r} must exceed twice lease={self.lease!r}"
            )
        if self.maxlen is not None and self.maxlen < 100:
            problems.append(f"maxlen={self.maxlen!r} must be None or >= 100 (a backstop)")
        if self.poll_interval <= 0 or self.purge_interval <= 0 or self.janitor_interval <= 0:
            problems.append("poll_interval, purge_interval and janitor_interval must be > 0")
        if self.shutdown_grace < 0 or self.trim_keep < 0 or self.relay_linger < 0:
            problems.append("shutdown_grace, trim_keep and relay_linger must be >= 0")
        if self.backlog_high is not None and self.backlog_high < 1:
            problems.append(f"backlog_high={self.backlog_high!r} must be None or >= 1")
        if self.consumer_idle <= 0:
            problems.append("consumer_idle must be > 0")
        if self.call_timeout is not None and self.call_timeout <= 0:
            problems.append(f"call_timeout={self.call_timeout!r} must be None or > 0")
        if self.purge_batch < 1 or self.dead_maxlen < 1 or self.retention.total_seconds() <= 0:
            problems.append("purge_batch and dead_maxlen must be >= 1, retention > 0")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def settle(self) -> float:
        """How long a publish key lives after its row was marked published: twice the lease.
        A margin only: a relay that stalls after its claim is fenced by the ``PUBLISH``
        script (nothing is added past the claim's deadline), not by the key."""
        return 2 * self.lease

    def retry_delay(self, deliveries: int) -> float:
        """The delay before delivery ``deliveries + 1``: doubling, at most ``visibility``."""
        return float(min(self.retry_backoff * 2 ** max(deliveries - 1, 0), self.visibility))
