"""Logouts kept in SQL reach every replica (review risk 1): two consoles, each with its own
``SqlSessionRevocations`` on one SQLite file or PostgreSQL database, as processes would have."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import EventBus
from eventbus.backends.sql import make_engine
from eventbus.console import Console, bus_pages
from eventbus.console.sql import SqlSessionRevocations
from tests.console_support import TOKEN, login
from tests.eventbus.console.test_sessions import COOKIE, browser, mounted


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'console.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
async def engines(db_url: str) -> AsyncIterator[list[AsyncEngine]]:
    engines = [make_engine(db_url), make_engine(db_url)]
    yield engines
    for engine in engines:
        await engine.dispose()


async def test_a_logout_on_one_replica_ends_the_session_on_the_other(
    bus: EventBus, engines: list[AsyncEngine]
) -> None:
    a_web, b_web = (
        mounted(Console(bus_pages(bus), secret=TOKEN, revocations=SqlSessionRevocations(e)))
        for e in engines
    )
    async with bus, browser(a_web) as a, browser(b_web) as b:
        csrf = await login(a)
        b.cookies.set(COOKIE, a.cookies[COOKIE], path="/ops")
        assert (await b.get("/ops/")).status_code == 200
        assert (await a.post("/ops/logout", data={"csrf": csrf})).status_code == 303
        r = await b.get("/ops/failures")
        assert r.status_code == 303 and r.headers["location"].startswith("/ops/login")
        assert await login(b)  # signing in again works


async def test_a_revocation_is_kept_until_the_cookie_would_have_expired(
    engines: list[AsyncEngine],
) -> None:
    first, second = (SqlSessionRevocations(e) for e in engines)
    assert not await first.is_revoked("s1")
    await first.revoke("s1", ttl=timedelta(hours=8))
    await first.revoke("s1", ttl=timedelta(hours=8))  # twice: one row
    assert await second.is_revoked("s1")
    await first.revoke("s2", ttl=timedelta(seconds=-1))  # already past: not revoked any more
    assert not await second.is_revoked("s2")
    await second.revoke("s3", ttl=timedelta(hours=8))  # and the expired row is deleted
    async with engines[0].connect() as conn:
        rows = (await conn.exec_driver_sql("SELECT sid FROM console_revoked_sessions")).all()
    assert sorted(r[0] for r in rows) == ["s1", "s3"]
