"""Fixtures of the domain tests: a SQLite file per test and counter stores (memory and Redis).

The domain's services run on SQL and Redis, so its tests run on asyncio (``anyio_backend``
below); ``test_counters.py`` picks trio with a virtual clock for the in-process window.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from domain.abc import CounterStore
from domain.backends.memory import MemoryCounterStore
from domain.backends.redis import RedisCounterStore, connect
from domain.db import create_tables


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
    eng = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/domain.db")
    await create_tables(eng)
    yield eng
    await eng.dispose()


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[Redis]:
    client = connect(redis_url, socket_timeout=2.0)
    yield client
    await client.aclose()


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest, clock: FakeClock) -> AsyncIterator[CounterStore]:
    """The same conformance tests run against both stores."""
    if request.param == "memory":
        yield MemoryCounterStore(buckets=4, clock=clock)
        return
    client = connect(request.getfixturevalue("redis_url"), socket_timeout=2.0)
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
