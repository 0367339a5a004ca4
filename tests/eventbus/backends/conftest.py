"""The SQL failure store, and what runs on it (retries): asyncio only (aiosqlite and asyncpg run
on asyncio), against real SQLite files and the session's PostgreSQL."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
