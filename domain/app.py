"""The domain modules wired together: one bus, one engine, one counter store, one scheduler.

:meth:`App.embedded` builds everything on embedded defaults (a SQLite file, memory counters, a
local lock, no server); ``redis_url=`` moves counters and locks to Redis for several replicas.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import EventBus, MemoryFailureStore
from eventbus.abc import FailureStore
from eventbus.backends.sql import SqlFailureStore, make_engine
from scheduler import LocalLock, MemoryRunStore, RunContext, Scheduler
from scheduler.abc import Lock, RunStore
from scheduler.backends.sql import SqlRunStore

from ._public import shown_as_domain
from .abc import CounterStore
from .backends.memory import MemoryCounterStore
from .db import create_tables
from .events import catalog
from .listeners import ExampleListeners
from .publishing import PUBLISH_CRON, Publisher
from .shortlinks import ShortLinks
from .view_history import ViewHistory
from .views import ArticleViews

__all__ = ["App", "Schedules"]

logger = logging.getLogger("domain.app")


@dataclasses.dataclass(frozen=True, slots=True)
class Schedules:
    """Six-field cron expressions of the domain jobs (production defaults)."""

    flush_views: str = "0 * * * * *"
    flush_clicks: str = "30 * * * * *"
    publish: str = PUBLISH_CRON
    refill: str = "0 0 3 * * *"

    @classmethod
    def fast(cls) -> Schedules:
        """Every second or two, for the demo."""
        return cls("*/2 * * * * *", "1/2 * * * * *", "* * * * * *", "*/5 * * * * *")


class App:
    """The services, the example listeners and their jobs on one bus and one scheduler.

    ``async with app:`` creates the tables, starts the view window, the bus and the scheduler,
    and on exit stops them in reverse order (the bus drains its queue into the still open
    window), then flushes the counters once more (a memory store loses what it holds with the
    process).

    :param engine: the SQL engine (not owned)
    :param counters: where pending views and clicks live
    :param lock: the scheduler's lock (``LocalLock`` for one process, ``RedisLock`` for more)
    :param runs: the run table (default: in memory)
    :param failures: the bus's failure store (default: in memory)
    :param view_window: in-process pre-aggregation of views, in seconds (``None``: off)
    :param allow_intranet_links: short links may lead to loopback, link-local and private
        addresses (``ShortLinks(allow_intranet=True)``)
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        counters: CounterStore,
        lock: Lock | None = None,
        runs: RunStore | None = None,
        failures: FailureStore | None = None,
        schedules: Schedules = Schedules(),
        view_window: float | None = None,
        min_lead: timedelta = timedelta(seconds=1),
        refill_watermark: int = 1_000,
        allow_intranet_links: bool = False,
    ) -> None:
        self.engine = engine
        self.schedules = schedules
        self.bus = EventBus(
            registry=catalog, failures=failures if failures is not None else MemoryFailureStore()
        )
        self.listeners = ExampleListeners()
        self.listeners.attach(self.bus)
        self.views = ArticleViews(counters, engine, window=view_window)
        self.views.attach(self.bus)
        self.view_history = ViewHistory(engine)
        self.links = ShortLinks(
            engine,
            bus=self.bus,
            clicks=counters,
            watermark=refill_watermark,
            allow_intranet=allow_intranet_links,
        )
        self.links.attach(self.bus)
        self.publisher = Publisher(engine, bus=self.bus, min_lead=min_lead)
        self.scheduler = Scheduler(
            bus=self.bus,
            lock=lock if lock is not None else LocalLock(),
            runs=runs if runs is not None else MemoryRunStore(),
        )
        self._register_jobs()
        self._stack: AsyncExitStack | None = None

    def __repr__(self) -> str:
        return f"App(engine={self.engine.url!r}, bus={self.bus!r}, scheduler={self.scheduler!r})"

    def _register_jobs(self) -> None:
        s, plan = self.scheduler, self.schedules
        s.cron(plan.flush_views, name="flush_views", lock_ttl=60)(self._flush_views)
        s.cron(plan.flush_clicks, name="flush_clicks", lock_ttl=60)(self._flush_clicks)
        s.cron(plan.publish, name="publish_due", lock_ttl=60)(self._publish_due)
        s.cron(plan.refill, name="refill_pool", lock_ttl=600)(self._refill_pool)

    async def _flush_views(self, run: RunContext) -> None:
        report = await self.views.flush()
        if report.total:
            logger.info("flushed %d views of %d articles", report.total, report.items)
            await self.view_history.sample()  # for the console's views-over-time chart

    async def _flush_clicks(self, run: RunContext) -> None:
        report = await self.links.flush_clicks()
        if report.total:
            logger.info("flushed %d clicks of %d links", report.total, report.items)

    async def _publish_due(self, run: RunContext) -> None:
        published = await self.publisher.publish_due()
        if published:
            logger.info("published articles %s", published)

    async def _refill_pool(self, run: RunContext) -> None:
        added = await self.links.refill()
        if added:
            logger.info("added %d codes to the short-link pool", added)

    async def __aenter__(self) -> Self:
        await create_tables(self.engine)
        async with AsyncExitStack() as stack:
            stack.push_async_callback(self._final_flush)
            # the view window exits after the bus: views still queued on the bus at shutdown
            # reach an open window when the bus drains them
            await stack.enter_async_context(self.views)
            await stack.enter_async_context(self.bus)
            await stack.enter_async_context(self.scheduler)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        stack, self._stack = self._stack, None
        assert stack is not None, "App.__aexit__ without __aenter__"
        return await stack.__aexit__(exc_type, exc_val, tb)

    async def aclose(self) -> None:
        """Stop as leaving ``async with`` would (scheduler, bus, view window, a last flush);
        nothing when it is not running. Call it from the task that entered."""
        if self._stack is not None:
            await self.__aexit__(None, None, None)

    async def _final_flush(self) -> None:
        await self.views.flush()
        await self.links.flush_clicks()

    @classmethod
    @asynccontextmanager
    async def embedded(
        cls,
        db: str | Path,
        *,
        redis_url: str | None = None,
        **options: Any,
    ) -> AsyncIterator[App]:
        """Build and run an app on *db* (a SQLite file path, or a SQLAlchemy async URL: see
        :func:`eventbus.backends.sql.database_url`); with *redis_url*, counters and locks in
        Redis.

        The engine comes from :func:`eventbus.backends.sql.make_engine` (SQLite: WAL, and a
        writer waits up to 5 s for another's lock). The failure table (``SqlFailureStore``) and
        the run table (``SqlRunStore``) live in the same database. Owns (and closes) the engine
        and the Redis clients it builds. With Redis, it warns once at start when the server can
        lose counts or locks (see :func:`eventbus.backends.redis.check_redis_server`).

        :raises ValueError: if *db* names no usable database (see ``make_engine``)
        """
        engine = make_engine(db, busy_timeout=5.0)
        async with AsyncExitStack() as stack:
            stack.push_async_callback(engine.dispose)
            counters: CounterStore = MemoryCounterStore()
            lock: Lock = LocalLock()
            if redis_url is not None:
                from eventbus.backends.redis import check_redis_server, make_redis_client
                from scheduler.backends.redis import RedisLock

                from .backends.redis import RedisCounterStore

                # two clients, each configured for its job (the counters parse text replies,
                # the lock compares bytes); neither resends a command whose reply was lost (a
                # resent batch could count twice, a resent SET NX could find its own lock
                # taken): RedisLock resends only what is safe, and settles the rest
                counter_client = make_redis_client(redis_url, decode_responses=True)
                stack.push_async_callback(counter_client.aclose)
                # one warning for both (and fail early if unreachable); the lock skips its own
                await check_redis_server(
                    counter_client,
                    purpose="pending counts and locks",
                    on_unsafe="warn",
                    snapshots_suffice=True,
                    after_loss=_AFTER_LOSS,
                    log=logger,
                )
                lock_client = make_redis_client(redis_url)
                stack.push_async_callback(lock_client.aclose)
                counters = RedisCounterStore(counter_client)
                lock = RedisLock(lock_client, prefix="domain-demo", check_server=False)
            app = cls(
                engine,
                counters=counters,
                lock=lock,
                runs=SqlRunStore(engine),
                failures=SqlFailureStore(engine),
                **options,
            )
            async with app:
                yield app


#: What the start-up warning about the Redis server adds (see ``check_redis_server``).
_AFTER_LOSS = (
    "The counters report a loss at ERROR and as a counts.lost event; a lock lost early lets "
    "another replica start the same job (its run gets the next fencing token)"
)

shown_as_domain(App, Schedules)
