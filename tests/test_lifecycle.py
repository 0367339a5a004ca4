"""Every store, lock and service: ``async with`` gives the object itself and closes it, and
``aclose()`` closes it the same way, harmlessly again (as httpx's transports and anyio's
resources behave).

One case per class, on every backend the class runs on (SQL and Redis: asyncio only). A
service that starts work on entering (the bus, the scheduler, a counter window, the app) is
seen running inside the block and stopped after it; a passive store or lock has nothing to
observe but the calls themselves. What a class owns is tested after the suite: what it built
is released, what it was given is left open.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy as sa
from anyio.abc import AsyncResource
from sqlalchemy.ext.asyncio import AsyncEngine

from domain import App, ArticleViews, Counter, MemoryCounterStore
from domain.backends.redis import RedisCounterStore
from domain.db import articles
from eventbus import EventBus, EventRegistry, MemoryFailureStore
from eventbus.backends.redis import make_redis_client
from eventbus.backends.sql import SqlFailureStore, make_engine
from scheduler import LocalLock, MemoryJobStore, MemoryRunStore, Scheduler, VirtualClock
from scheduler.backends.redis import RedisLock
from scheduler.backends.sql import SqlJobStore, SqlRunStore


@dataclasses.dataclass(frozen=True)
class Case:
    """How to build one class's object, and how to see whether it runs (``None``: passive)."""

    make: Callable[[pytest.FixtureRequest], AsyncResource | Any]
    running: Callable[[Any], bool] | None = None
    server: bool = False  # SQL or Redis: asyncio only


def _sqlite(request: pytest.FixtureRequest, name: str) -> Path:
    tmp: Path = request.getfixturevalue("tmp_path")
    return tmp / name


def _unopened_engine(request: pytest.FixtureRequest) -> AsyncEngine:
    """An engine nothing connects (a counter flushes nothing here): fine on trio too."""
    return make_engine(_sqlite(request, "never-opened.db"))


def _redis(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue("redis_url")
    return url


def _counter(request: pytest.FixtureRequest) -> Counter:
    engine = _unopened_engine(request)
    return Counter(MemoryCounterStore(), engine, name="c", column=articles.c.view_count, window=1)


def _views(request: pytest.FixtureRequest) -> ArticleViews:
    return ArticleViews(MemoryCounterStore(), _unopened_engine(request), window=1)


def _app(request: pytest.FixtureRequest) -> App:
    return App(request.getfixturevalue("given_engine"), counters=MemoryCounterStore())


def _buffering(service: Any) -> bool:
    """A counter window is open when it buffers a hit instead of refusing it."""
    counter = service.counter if isinstance(service, ArticleViews) else service
    try:
        counter.hit_nowait(1, "probe")
    except RuntimeError:
        return False
    return True


CASES: dict[str, Case] = {
    "MemoryFailureStore": Case(lambda r: MemoryFailureStore()),
    "SqlFailureStore": Case(lambda r: SqlFailureStore(_sqlite(r, "failures.db")), server=True),
    "MemoryRunStore": Case(lambda r: MemoryRunStore()),
    "SqlRunStore": Case(lambda r: SqlRunStore.from_url(_sqlite(r, "runs.db")), server=True),
    "MemoryJobStore": Case(lambda r: MemoryJobStore()),
    "SqlJobStore": Case(lambda r: SqlJobStore(r.getfixturevalue("given_engine")), server=True),
    "LocalLock": Case(lambda r: LocalLock()),
    "RedisLock": Case(lambda r: RedisLock(r.getfixturevalue("lock_client")), server=True),
    "MemoryCounterStore": Case(lambda r: MemoryCounterStore()),
    "RedisCounterStore": Case(
        lambda r: RedisCounterStore(r.getfixturevalue("counter_client")), server=True
    ),
    "EventBus": Case(lambda r: EventBus(EventRegistry()), running=lambda b: b.running),
    "Scheduler": Case(
        lambda r: Scheduler(clock=VirtualClock(datetime(2026, 1, 1, tzinfo=UTC))),
        running=lambda s: s.running,
    ),
    "Counter": Case(_counter, running=_buffering),
    "ArticleViews": Case(_views, running=_buffering),
    "App": Case(_app, running=lambda app: app.bus.running and app.scheduler.running, server=True),
}

PARAMS = [
    pytest.param((name, backend), id=f"{name}-{backend}")
    for name, case in CASES.items()
    for backend in (("asyncio",) if case.server else ("asyncio", "trio"))
]


@pytest.fixture(params=PARAMS)
def case_and_backend(request: pytest.FixtureRequest) -> tuple[str, str]:
    name, backend = request.param
    return name, backend


@pytest.fixture
def anyio_backend(case_and_backend: tuple[str, str]) -> str:
    """The backend of the case: SQL and Redis run on asyncio only."""
    return case_and_backend[1]


@pytest.fixture
async def given_engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = make_engine(tmp_path / "given.db")
    yield engine
    await engine.dispose()


@pytest.fixture
async def lock_client(redis_url: str) -> AsyncIterator[Any]:
    client = make_redis_client(redis_url, socket_timeout=2)
    yield client
    await client.aclose()


@pytest.fixture
async def counter_client(redis_url: str) -> AsyncIterator[Any]:
    client = make_redis_client(redis_url, decode_responses=True, socket_timeout=2)
    yield client
    await client.aclose()


@pytest.fixture
def resource(case_and_backend: tuple[str, str], request: pytest.FixtureRequest) -> tuple[Case, Any]:
    case = CASES[case_and_backend[0]]
    return case, case.make(request)


async def test_async_with_gives_the_object_itself_and_closes_it(
    resource: tuple[Case, Any],
) -> None:
    case, obj = resource
    with anyio.fail_after(10):
        async with obj as got:
            assert got is obj
            if case.running is not None:
                assert case.running(obj)
    if case.running is not None:
        assert not case.running(obj)


async def test_aclose_closes_it_as_leaving_the_block_would_and_again_is_harmless(
    resource: tuple[Case, Any],
) -> None:
    case, obj = resource
    with anyio.fail_after(10):
        await obj.__aenter__()
        await obj.aclose()
        if case.running is not None:
            assert not case.running(obj)
        await obj.aclose()


async def test_aclose_of_an_object_never_entered_is_harmless(resource: tuple[Case, Any]) -> None:
    case, obj = resource
    with anyio.fail_after(10):
        await obj.aclose()
    if case.running is not None:
        assert not case.running(obj)


# -- what each class owns ----------------------------------------------------------------------
# These run on asyncio only: they open SQL engines and Redis clients.


@pytest.mark.parametrize("case_and_backend", [("SqlRunStore", "asyncio")], indirect=True)
async def test_a_run_store_disposes_the_engine_it_built_and_leaves_a_given_one_open(
    tmp_path: Path, given_engine: AsyncEngine
) -> None:
    with anyio.fail_after(10):
        async with SqlRunStore.from_url(tmp_path / "built.db") as built:
            await built.query()
            pool = built.engine.pool
            assert isinstance(pool, sa.pool.QueuePool) and pool.checkedin() == 1
        assert pool.checkedin() == 0  # closed by dispose()
        async with SqlRunStore(given_engine) as given:
            await given.query()
        given_pool = given_engine.pool
        assert isinstance(given_pool, sa.pool.QueuePool) and given_pool.checkedin() == 1


@pytest.mark.parametrize("case_and_backend", [("RedisLock", "asyncio")], indirect=True)
async def test_a_redis_lock_settles_on_close_and_leaves_its_client_open(lock_client: Any) -> None:
    """A lock taken by a command whose reply was lost is voided by ``aclose()``."""
    lock = RedisLock(lock_client)
    token = b"elsewhere#lost-reply"
    with anyio.fail_after(10):
        await lock_client.set("scheduler:lock:job", token, px=60_000)  # what the command took
        lock._remember("scheduler:lock:job", token, 60_000)  # the reply it never got
        async with lock:
            pass
        assert lock.unsettled == 0
        assert await lock_client.get("scheduler:lock:job") is None
        assert await lock_client.ping()


@pytest.mark.parametrize("case_and_backend", [("RedisCounterStore", "asyncio")], indirect=True)
async def test_a_redis_counter_store_leaves_its_client_open(counter_client: Any) -> None:
    with anyio.fail_after(10):
        async with RedisCounterStore(counter_client) as store:
            assert await store.record("views", [("1", None)], dedupe_ttl=1) == 1
        assert await counter_client.ping()
