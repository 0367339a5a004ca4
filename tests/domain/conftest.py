"""Fixtures of the domain tests: a SQLite file per test, counter stores (memory and Redis),
and the web application (``web``, from the module's own ``config`` fixture) with a client.

The domain's services run on SQL and Redis, so its tests run on asyncio (``anyio_backend``
below); ``test_counters.py`` picks trio with a virtual clock for the in-process window.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import anyio
import httpx
import pytest
from anyio import wait_all_tasks_blocked
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from domain.abc import CounterStore
from domain.backends.memory import MemoryCounterStore
from domain.backends.redis import RedisCounterStore
from domain.db import create_tables
from eventbus import EventBus
from eventbus.backends.redis import make_redis_client
from eventbus.backends.sql import make_engine

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from domain import App
    from domain.web import WebConfig


#: Where :class:`Clock` starts.
T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)


class Clock:
    """An aware UTC wall clock that moves only when a test sets ``now``."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class FakeClock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def engine(tmp_path: object) -> AsyncIterator[AsyncEngine]:
    # make_engine's SQLite (WAL, synchronous=NORMAL, a writer waits up to 30 s for the lock),
    # not a bare engine's (a synced rollback journal, 5 s): 50 racing creators on a busy
    # machine outwaited that lock timeout, which is not what their test is about
    eng = make_engine(f"sqlite+aiosqlite:///{tmp_path}/domain.db")
    await create_tables(eng)
    yield eng
    await eng.dispose()


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[Redis]:
    client = make_redis_client(redis_url, decode_responses=True, socket_timeout=2.0)
    yield client
    await client.aclose()


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest, clock: FakeClock) -> AsyncIterator[CounterStore]:
    """The same conformance tests run against both stores."""
    if request.param == "memory":
        yield MemoryCounterStore(buckets=4, clock=clock)
        return
    client = make_redis_client(
        request.getfixturevalue("redis_url"), decode_responses=True, socket_timeout=2.0
    )
    yield RedisCounterStore(client, buckets=4)
    await client.aclose()


async def advance(store: CounterStore, clock: FakeClock, seconds: float) -> None:
    """Let *seconds* pass for the dedupe window: the fake clock, or Redis key TTLs."""
    clock.now += seconds
    if isinstance(store, RedisCounterStore):
        ms = int(seconds * 1000)
        async for key in store.redis.scan_iter(match=f"{store.prefix}:*:seen:*"):
            left = await store.redis.pttl(key)
            if left <= ms:
                await store.redis.delete(key)
            else:
                await store.redis.pexpire(key, left - ms)


@pytest.fixture
async def web(config: WebConfig) -> AsyncIterator[Starlette]:
    """The app with its lifespan entered (httpx's ASGITransport does not run lifespans)."""
    from domain.web import create_app

    app = create_app(config)
    with anyio.fail_after(10):
        async with app.router.lifespan_context(app):
            yield app


@pytest.fixture
async def client(web: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=web, client=("203.0.113.7", 4711))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c


def domain_app(web: Starlette) -> App:
    app: App = web.state.domain
    return app


async def settle(bus: EventBus) -> None:
    """Wait until the bus's background listeners finished what the request queued.

    A job handed to an idle worker is in neither counter until that worker runs, hence the
    wait for every task to block first.
    """
    with anyio.fail_after(5):
        await wait_all_tasks_blocked()
        while (s := bus.statistics()).queued or s.in_flight:
            await wait_all_tasks_blocked()
