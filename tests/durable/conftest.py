"""Fixtures of the durable-events tests: asyncio only, the session's real Redis, SQLite files
(and PostgreSQL where a test asks), a transport factory, and subprocess apps.

Times are short (visibility and lease about a second) and every wait is bounded by
``fail_after``; conditions are polled (``wait_until``), never assumed after a fixed sleep.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy as sa
from anyio.abc import Process
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import MemoryFailureStore
from eventbus.backends.redis import make_redis_client
from eventbus.backends.sql import make_engine
from eventbus.durable import DurableOptions, RedisStreams, create_durable_tables
from tests.durable.events import REG, effects, test_metadata

ROOT = Path(__file__).resolve().parents[2]

#: options for tests: leases and visibility of about a second, quick polls
FAST = DurableOptions(
    visibility=1.0,
    retry_backoff=0.1,
    max_deliveries=3,
    lease=1.0,
    poll_interval=0.1,
    block=0.5,
    shutdown_grace=1.0,
    publish_key_ttl=60.0,
    relay_batch=100,
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'app.db'}"


def orphaned_closes() -> list[asyncio.Task[Any]]:
    """Tasks closing a connection SQLAlchemy invalidated because a statement on it was
    cancelled: on aiosqlite such a task can wait forever and hang the event loop's shutdown
    (so the whole run) instead of failing one test."""
    return [
        t
        for t in asyncio.all_tasks()
        if "_terminate_graceful_close" in getattr(t.get_coro(), "__qualname__", "")
    ]


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    eng = make_engine(db_url)
    async with eng.begin() as conn:
        await conn.run_sync(test_metadata.create_all)
    yield eng
    await eng.dispose()
    if orphans := orphaned_closes():
        for task in orphans:  # aiosqlite's close() awaits again after one cancel
            for _ in range(3):
                task.cancel()
                await asyncio.sleep(0)
        pytest.fail(f"{len(orphans)} connection(s) invalidated by a cancelled statement")


@pytest.fixture(params=["sqlite", "postgresql"])
async def database(
    request: pytest.FixtureRequest, engine: AsyncEngine
) -> AsyncIterator[AsyncEngine]:
    """The test's SQLite database, or the session's PostgreSQL emptied for the test (with
    the durable tables and the test tables): a test taking it runs on both."""
    if request.param == "sqlite":
        yield engine
        return
    pg = make_engine(request.getfixturevalue("postgres_url"))
    async with pg.begin() as conn:
        await conn.run_sync(test_metadata.create_all)
    await create_durable_tables(pg)
    yield pg
    await pg.dispose()


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Redis]:
    c = make_redis_client(redis_url, socket_timeout=3.0, max_connections=64)
    yield c
    await c.aclose()


Factory = Callable[..., RedisStreams]


@pytest.fixture
def make_streams(client: Redis, engine: AsyncEngine) -> Iterator[Factory]:
    """Build transports on the test's Redis and database (``service="svc"``, :data:`FAST`)."""

    def build(**kwargs: Any) -> RedisStreams:
        kwargs.setdefault("service", "svc")
        kwargs.setdefault("registry", REG)
        kwargs.setdefault("options", FAST)
        kwargs.setdefault("failures", MemoryFailureStore())
        return RedisStreams(kwargs.pop("redis", client), kwargs.pop("engine", engine), **kwargs)

    yield build


async def wait_until(
    check: Callable[[], Awaitable[bool]] | Callable[[], bool],
    *,
    within: float = 10.0,
    every: float = 0.02,
    what: str = "condition",
) -> None:
    """Poll *check* until it is true; fail after *within* seconds naming *what*."""
    try:
        with anyio.fail_after(within):
            while True:
                result = check()
                if not isinstance(result, bool):
                    result = await result
                if result:
                    return
                await anyio.sleep(every)
    except TimeoutError:
        pytest.fail(f"timed out after {within} s waiting for {what}")


async def entries(client: Redis, key: str) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """Every entry of a stream, as the client returns them (bytes)."""
    found: Any = await client.xrange(key)
    return [(entry_id, dict(fields)) for entry_id, fields in found]


async def rows(engine: AsyncEngine, table: sa.Table, **where: Any) -> list[sa.Row[Any]]:
    stmt = sa.select(table)
    for key, value in where.items():
        stmt = stmt.where(table.c[key] == value)
    async with engine.connect() as conn:
        return list((await conn.execute(stmt.order_by(table.c.id))).all())


@dataclasses.dataclass(frozen=True)
class Call:
    """One listener call a subprocess app made (a line of its ``--calls`` file)."""

    listener: str
    event_id: str
    order_id: int
    consumer: str
    at: float


def call_rows(path: Path) -> list[Call]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [Call(**json.loads(line)) for line in text.splitlines() if line.endswith("}")]


async def effect_rows(engine: AsyncEngine, listener: str | None = None) -> list[sa.Row[Any]]:
    return await rows(engine, effects, **({"listener": listener} if listener else {}))


class App:
    """A running ``tests.durable.app`` process: read its lines, signal it, stop it."""

    def __init__(self, proc: Process, args: list[str]) -> None:
        self.proc = proc
        self.args = args
        self._buffer = b""
        self.lines: list[str] = []

    async def line(self, within: float = 20.0) -> str:
        assert self.proc.stdout is not None
        with anyio.fail_after(within):
            while b"\n" not in self._buffer:
                self._buffer += await self.proc.stdout.receive()
        raw, _, self._buffer = self._buffer.partition(b"\n")
        text = raw.decode()
        self.lines.append(text)
        return text

    async def expect(self, wanted: str, within: float = 20.0) -> None:
        """Return once the process has printed the line *wanted* (now or earlier)."""
        with anyio.fail_after(within):
            while wanted not in self.lines:
                await self.line(within)

    async def stop(self, within: float = 20.0) -> dict[str, Any]:
        """Close stdin (a graceful stop) and return its final statistics."""
        assert self.proc.stdin is not None
        await self.proc.stdin.aclose()
        stats: dict[str, Any] = {}
        with anyio.fail_after(within):
            while True:
                try:
                    text = await self.line(within)
                except anyio.EndOfStream:
                    break
                if text.startswith("stats "):
                    stats = json.loads(text[6:])
                    break
            await self.proc.wait()
        return stats

    def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()


@pytest.fixture
def calls_file(tmp_path: Path) -> Path:
    """Where the subprocess apps' listeners log their calls."""
    return tmp_path / "calls.jsonl"


@pytest.fixture
async def apps(
    redis_url: str, db_url: str, calls_file: Path
) -> AsyncIterator[Callable[..., Awaitable[App]]]:
    """Start ``tests.durable.app`` processes on the test's Redis and database; all killed at
    the end of the test if still running."""
    started: list[App] = []

    async def start(
        *args: str, ready: str | None = "ready", redis: str | None = None, db: str | None = None
    ) -> App:
        argv = [sys.executable, "-m", "tests.durable.app"]
        argv += ["--redis", redis or redis_url, "--db", db or db_url, "--calls", str(calls_file)]
        argv += list(args)
        proc = await anyio.open_process(argv, cwd=ROOT, stderr=None)
        app = App(proc, argv)
        started.append(app)
        if ready is not None:
            await app.expect(ready, within=30)
        return app

    yield start
    for app in started:
        app.kill()
        with anyio.move_on_after(10):
            await app.proc.wait()
        await app.proc.aclose()
