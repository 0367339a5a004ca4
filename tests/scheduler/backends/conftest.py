"""The scheduler's Redis and SQL backends, and the scheduler running on them: asyncio only
(redis-py, aiosqlite and asyncpg run on asyncio), against the session's real servers."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from eventbus.backends.redis import make_redis_client


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Redis]:
    """A lock's client on the session's Redis (emptied for the test), patient for 2 s."""
    client = make_redis_client(redis_url, socket_timeout=2)
    yield client
    await client.aclose()
