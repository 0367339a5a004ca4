"""What the relay, the consumers and the janitor of one transport share."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime

import anyio
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from .._core._log_limit import LogLimiter
from .._events import Event, EventRegistry
from .._failures import FailureRecord
from ..abc import FailureStore
from ._held import KeepBudget
from ._inbox import Inbox
from ._keys import StreamKeys
from ._options import DurableOptions
from ._outbox import Outbox
from ._scripts import Scripts

__all__ = [
    "DB_ERRORS",
    "REDIS_ERRORS",
    "AnyRedis",
    "Fault",
    "Runtime",
    "db_deadline",
    "logger",
    "utcnow",
]

logger = logging.getLogger("eventbus.durable")

#: A client of one server, or of a Redis Cluster (every key of one event shares a slot).
AnyRedis = Redis | RedisCluster

#: What a Redis call may raise, cancellation aside. RedisClusterException (a slot without a
#: node during a failover, a command the cluster client refuses) is not a RedisError.
REDIS_ERRORS: tuple[type[Exception], ...] = (RedisError, RedisClusterException)

#: What a database call may raise while the database is unreachable or going away:
#: SQLAlchemy's errors, and the socket's own. asyncpg's connect raises the OSError it got
#: (ConnectionRefusedError while PostgreSQL is down) without SQLAlchemy wrapping it; a
#: bounded wait that ran out raises TimeoutError, an OSError too.
DB_ERRORS: tuple[type[Exception], ...] = (SQLAlchemyError, OSError)

#: A test's hook at a named point of the relay or a consumer (fault injection); awaited there.
Fault = Callable[[str], Awaitable[None]]


def utcnow() -> datetime:
    return datetime.now(UTC)


@contextlib.contextmanager
def db_deadline(seconds: float) -> Iterator[None]:
    """Bound a wait on the database (``db_timeout``): a connection gone silent (a paused
    server, a dropped network path) raises ``TimeoutError``, one of :data:`DB_ERRORS`, and is
    handled as an outage, instead of stalling its caller for as long as it lasts."""
    with anyio.CancelScope(deadline=anyio.current_time() + seconds) as scope:
        yield
    if scope.cancelled_caught:
        raise TimeoutError(f"the database did not answer within db_timeout={seconds} s")


async def _no_fault(_point: str) -> None:
    return None


@dataclasses.dataclass(eq=False)
class Runtime:
    """The parts of one running transport; built by :class:`~eventbus.durable.RedisStreams`."""

    options: DurableOptions
    client: AnyRedis
    engine: AsyncEngine
    keys: StreamKeys
    outbox: Outbox
    inbox: Inbox
    registry: EventRegistry
    service: str
    consumer: str
    failures: FailureStore
    #: stores (and announces) a failure record the consumer logged already: the bus's
    #: failure sink once bound, else the store's ``record``
    record_failure: Callable[[FailureRecord, BaseException], None]
    #: emits a lifecycle event (the bus's ``emit`` once attached); never raises
    notify: Callable[[Event], None]
    fault: Fault = _no_fault
    #: deliveries per (event, field) in which the tolerant reader ignored the field
    ignored: Counter[tuple[str, str]] = dataclasses.field(init=False, default_factory=Counter)
    scripts: Scripts = dataclasses.field(init=False)
    limiter: LogLimiter = dataclasses.field(init=False)
    #: connections the groups taking ``tx`` may keep between batches (``_held``)
    keep: KeepBudget = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.scripts = Scripts(self.client)
        self.keep = KeepBudget(self.engine)
        self.limiter = LogLimiter(logger, level=logging.WARNING, burst=5, interval=60.0)

    def log(self, level: int, key: str | tuple[object, ...], msg: str, *args: object) -> None:
        """Log at *level*, a few lines per *key* and minute; a storm becomes one summary line
        per key, which names the key's parts ("failed billing:grant ValueError")."""
        parts = key if isinstance(key, tuple) else (key,)
        what = " ".join(getattr(p, "__name__", None) or str(p) for p in parts)
        if self.limiter.allow((level, *parts), f"{logging.getLevelName(level)} {what}"):
            logger.log(level, msg, *args)
