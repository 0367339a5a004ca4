"""Session-wide fixtures: the anyio backends, a throwaway redis-server, Redis Cluster and
PostgreSQL.

Core tests run on asyncio and trio (the default ``anyio_backend`` below); modules that touch
SQL or Redis override ``anyio_backend`` to return ``"asyncio"``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.postgres_server import PostgresNotInstalled, PostgresServer
from tests.redis_cluster import RedisClusterServer
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


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServer]:
    """A throwaway three-master Redis Cluster, built only when a test first asks for it (about
    two seconds), removed at the end of the session."""
    with RedisClusterServer() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL for the session, started only when a test first asks for it.

    Without the binaries the test is skipped, or fails when ``$CI`` is set (CI must run it).
    """
    try:
        server = PostgresServer()
    except PostgresNotInstalled as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but PostgreSQL cannot run: {exc}", pytrace=False)
        pytest.skip(str(exc))
    with server:
        yield server


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A SQLAlchemy asyncpg URL of the session's database, emptied for this test.

    Emptying the ``public`` schema takes ~30 ms where a fresh database takes ~400 ms; a
    connection an earlier test leaked is ended first, so that it cannot hold a lock.
    """
    postgres_server.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid(); "
        "SET lock_timeout = '5s'; DROP SCHEMA public CASCADE; CREATE SCHEMA public",
        database=postgres_server.database,
    )
    return postgres_server.url()
