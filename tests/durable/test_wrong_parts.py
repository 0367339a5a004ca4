"""What a durable app is built from, checked when it is built: a listener that cannot take
the event (and ``tx``), a sync SQLAlchemy engine, connection or session, a sync redis client.

Regression tests: each of these was accepted and failed later with an internal error
(``TypeError: expected str, bytes or os.PathLike object, not Engine``, ``AttributeError:
... 'sync_connection'``, ``object dict can't be used in 'await' expression``), or, for a
generator listener, "succeeded" without its body ever running.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from eventbus import EventBus, MemoryFailureStore
from eventbus.backends.sql import SqlFailureStore
from eventbus.durable import RedisStreams, create_durable_tables
from scheduler.backends.redis import RedisLock
from scheduler.backends.sql import SqlJobStore, SqlRunStore
from tests.durable.conftest import Factory
from tests.durable.events import REG, OrderPaid


async def no_parameter() -> None: ...


async def two_required(e: OrderPaid, other: int) -> None: ...


async def keyword_only_tx(e: OrderPaid, *, tx: AsyncConnection, when: str) -> None: ...


async def async_generator(e: OrderPaid, tx: AsyncConnection) -> AsyncIterator[int]:
    yield e.order_id


async def takes_tx(e: OrderPaid, tx: AsyncConnection) -> None: ...


async def takes_keyword_tx(e: OrderPaid, *, tx: AsyncConnection) -> None: ...


async def takes_positional_tx(e: OrderPaid, tx: AsyncConnection, /) -> None: ...


@pytest.mark.parametrize(
    ("fn", "reason"),
    [
        (no_parameter, "cannot be called with the event: it takes no parameter"),
        (two_required, "it requires 'other' after the event"),
        (keyword_only_tx, "it requires the keyword-only 'when'"),
        (async_generator, "is an async generator function"),
    ],
    ids=["no-parameter", "two-required", "keyword-only", "async-generator"],
)
async def test_a_durable_listener_that_cannot_take_the_event_is_refused_at_on(
    make_streams: Factory, fn: Callable[..., Any], reason: str
) -> None:
    streams = make_streams()
    bus = EventBus(REG, MemoryFailureStore(), durable=streams)
    with pytest.raises(TypeError) as info:
        bus.on(OrderPaid, fn, durable=True, name="audit")
    assert str(info.value).startswith("durable listener 'audit' ")
    assert reason in str(info.value) and "\n" not in str(info.value)
    assert streams.listeners() == []


async def test_durable_listeners_may_take_tx_every_way_it_is_passed(make_streams: Factory) -> None:
    streams = make_streams()
    bus = EventBus(REG, MemoryFailureStore(), durable=streams)
    fns: tuple[Callable[..., Any], ...] = (takes_tx, takes_keyword_tx, takes_positional_tx)
    for i, fn in enumerate(fns):
        bus.on(OrderPaid, fn, durable=True, name=f"ok{i}")
    assert len(streams.listeners()) == 3


# -- sync SQLAlchemy and redis objects ------------------------------------------------------


@pytest.fixture
def sync_engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'sync.db'}")
    yield engine
    engine.dispose()


def test_stores_refuse_a_sync_engine_in_one_line(sync_engine: sa.Engine) -> None:
    wanted = "got a sync Engine (sqlalchemy.create_engine); build it with "
    for build, owner in (
        (SqlFailureStore, "SqlFailureStore needs an AsyncEngine or a database URL"),
        (SqlRunStore, "SqlRunStore (or SqlRunStore.from_url(url)) needs an AsyncEngine"),
        (SqlJobStore, "SqlJobStore needs an AsyncEngine"),
    ):
        with pytest.raises(TypeError) as info:
            build(sync_engine)  # type: ignore[arg-type]
        assert str(info.value).startswith(f"{owner}, {wanted}")


async def test_redis_streams_refuse_a_sync_engine_and_a_sync_redis_client(
    sync_engine: sa.Engine, engine: AsyncEngine, client: Redis, redis_url: str
) -> None:
    with pytest.raises(TypeError, match="^RedisStreams needs an AsyncEngine or a database URL"):
        RedisStreams(client, sync_engine, service="svc")  # type: ignore[arg-type]
    sync_client = redis.Redis.from_url(redis_url)
    try:
        with pytest.raises(TypeError) as info:
            RedisStreams(sync_client, engine, service="svc")  # type: ignore[arg-type]
        assert str(info.value) == (
            "RedisStreams needs an asyncio redis client (redis.asyncio.Redis, or a URL), got the "
            "sync redis.client.Redis; build it with redis.asyncio.from_url(...) instead"
        )
        with pytest.raises(TypeError, match="^RedisLock needs an asyncio redis client"):
            RedisLock(sync_client)  # type: ignore[arg-type]
    finally:
        sync_client.close()


async def test_publish_refuses_an_engine_or_a_sync_connection_naming_what_it_needs(
    make_streams: Factory, engine: AsyncEngine, sync_engine: sa.Engine
) -> None:
    streams = make_streams()
    needs = "publish('order.paid') needs the AsyncConnection or AsyncSession of an open transaction"
    with pytest.raises(TypeError, match=r"got an AsyncEngine, which has no transaction$") as info:
        await streams.publish(OrderPaid(order_id=1), engine)  # type: ignore[arg-type]
    assert str(info.value).startswith(needs)
    with sync_engine.begin() as conn:
        with pytest.raises(TypeError, match=r"got the sync sqlalchemy\.engine\.base\.Connection$"):
            await streams.publish(OrderPaid(order_id=1), conn)  # type: ignore[arg-type]
    with Session(sync_engine) as session, session.begin():
        with pytest.raises(TypeError, match=r"got the sync sqlalchemy\.orm\.session\.Session$"):
            await streams.publish(OrderPaid(order_id=1), session)  # type: ignore[arg-type]
    await create_durable_tables(engine)
    async with AsyncSession(engine) as good, good.begin():  # still accepted
        assert len(await streams.publish(OrderPaid(order_id=2), good)) == 32
