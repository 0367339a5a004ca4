"""Session-wide fixtures: the anyio backends and a throwaway redis-server.

Core tests run on asyncio and trio (the default ``anyio_backend`` below); modules that touch
SQL or Redis override ``anyio_backend`` to return ``"asyncio"``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.redis_server import RedisServer


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One real redis-server for the session; tests that restart or pause it must restore it."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """A clean database on the session's server (FLUSHALL before each test)."""
    if redis_server.proc is None or redis_server.proc.poll() is not None:
        redis_server.start()
    redis_server.resume()
    redis_server.flushall()
    return redis_server.url
