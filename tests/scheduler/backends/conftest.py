"""The scheduler's Redis and SQL backends, and the scheduler running on them: asyncio only
(redis-py, aiosqlite and asyncpg run on asyncio), against the session's real servers."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
