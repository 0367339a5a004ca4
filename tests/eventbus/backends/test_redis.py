"""The one Redis client factory and the one server check, on the session's real redis-server
(``--save "" --appendonly no``): every risk the check knows is set up for real with
``CONFIG SET`` (and an ACL user where managed Redis refuses commands), then put back."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import pytest
from redis.asyncio import BlockingConnectionPool, Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from eventbus.backends.redis import (
    UnsafeRedisError,
    check_redis_server,
    make_redis_client,
    read_server_info,
)
from tests.redis_server import RedisServer

NO_PERSISTENCE = 'no persistence (appendonly no, save ""): a restart empties it'
CONFIG_REFUSED = (
    "no persistence seen (appendonly no, and no RDB snapshot since it started; CONFIG "
    "GET save is refused, so the save schedule is unknown)"
)
Limited = Callable[[str], Awaitable[Redis]]

# -- the factory -----------------------------------------------------------------------------


async def test_the_client_never_retries_a_command() -> None:
    """Regression test: the scheduler's factory retried after a ConnectionError, which can run
    a command whose reply was lost a second time (durable events and counters alike)."""
    client = make_redis_client("redis://127.0.0.1:1/0", max_connections=3, socket_timeout=1.5)
    try:
        pool = client.connection_pool
        kwargs = pool.connection_kwargs
        assert kwargs["socket_timeout"] == 1.5 and pool.max_connections == 3
        assert kwargs["retry"].get_retries() == 0
        with anyio.fail_after(5), pytest.raises(RedisConnectionError):
            await client.ping()  # refused once, and not again
    finally:
        await client.aclose()


def test_retries_are_given_explicitly() -> None:
    client = make_redis_client("redis://127.0.0.1:1/0", retries=2)
    assert client.connection_pool.connection_kwargs["retry"].get_retries() == 2


@pytest.mark.parametrize("decode", [False, True], ids=["bytes", "text"])
async def test_the_pool_is_bounded_and_a_burst_waits_then_fails(
    redis_url: str, decode: bool
) -> None:
    """Regression test: the counters' ``connect()`` built an unbounded pool, one connection per
    concurrent request under a burst, unlike the scheduler's client."""
    client = make_redis_client(
        redis_url, max_connections=2, pool_timeout=0.05, decode_responses=decode
    )
    try:
        with anyio.fail_after(5):
            pool = client.connection_pool
            assert isinstance(pool, BlockingConnectionPool)
            assert pool.max_connections == 2
            take = pool.get_connection  # untyped in redis-py
            held = [await take(), await take()]  # type: ignore[no-untyped-call]
            with pytest.raises(RedisConnectionError, match="No connection available"):
                await take()  # type: ignore[no-untyped-call]  # waits pool_timeout, then fails
            assert all(conn.retry.get_retries() == 0 for conn in held)
            for conn in held:
                await pool.release(conn)
            await client.set("k", "v")
            assert await client.get("k") == ("v" if decode else b"v")
    finally:
        await client.aclose()


# -- the server check ------------------------------------------------------------------------


@pytest.fixture(params=[False, True], ids=["bytes", "text"])
async def client(request: pytest.FixtureRequest, redis_url: str) -> AsyncIterator[Redis]:
    """A lock's or durable events' client (bytes), and the counters' (text); the server's
    settings are put back after the test."""
    client = make_redis_client(redis_url, socket_timeout=2.0, decode_responses=request.param)
    yield client
    await client.config_set("maxmemory", "0")
    await client.config_set("maxmemory-policy", "noeviction")
    await client.config_set("save", "")
    await client.aclose()


@pytest.fixture
async def limited(client: Redis, redis_url: str) -> AsyncIterator[Limited]:
    """A client of an ACL user to whom *command* is refused, as managed Redis refuses some."""
    made: list[tuple[str, Redis]] = []

    async def without(command: str) -> Redis:
        user = f"no-{command}"
        await client.acl_setuser(
            user, enabled=True, nopass=True, categories=["+@all"], commands=[f"-{command}"],
            keys=["*"], channels=["*"],
        )  # fmt: skip
        made.append((user, make_redis_client(redis_url.replace("://", f"://{user}@"))))
        return made[-1][1]

    yield without
    for user, limited_client in made:
        await limited_client.aclose()
        await client.acl_deluser(user)


async def test_what_info_says_about_the_session_server(client: Redis) -> None:
    with anyio.fail_after(5):
        info = await read_server_info(client)
    assert info.version >= (7, 0) and info.run_id
    assert (info.aof_enabled, info.rdb_enabled, info.snapshots) == (False, False, False)
    assert (info.maxmemory, info.maxmemory_policy) == (0, "noeviction")
    assert not (info.evicts_any_key or info.evicts_expiring_keys)


async def test_a_server_without_persistence_is_warned_about_once(
    client: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING), anyio.fail_after(5):
        risks = await check_redis_server(
            client, purpose="pending counts and locks", on_unsafe="warn", after_loss="Or not."
        )
    assert risks == [NO_PERSISTENCE]
    [record] = caplog.records
    assert (record.levelno, record.name) == (logging.WARNING, "eventbus.redis")
    message = record.getMessage()
    assert message.startswith("Redis at 127.0.0.1:")
    assert "can lose pending counts and locks: no persistence" in message
    assert "'appendonly yes'" in message and message.endswith(". Or not.")


async def test_a_save_schedule_is_persistence_enough_where_the_caller_says_so(
    client: Redis,
) -> None:
    """Counters and locks accept losing the writes since the last snapshot; durable events,
    which would have to republish them, do not."""
    with anyio.fail_after(5):
        await client.config_set("save", "3600 1")
        assert await check_redis_server(client, purpose="counts", snapshots_suffice=True) == []
        assert await check_redis_server(client, purpose="durable events") == [
            "only RDB snapshots (appendonly no): a restart loses the writes since the last snapshot"
        ]


@pytest.mark.parametrize("on_unsafe", ["refuse", "warn"])
async def test_an_evicting_policy_counts_only_under_a_memory_limit(
    client: Redis, on_unsafe: str
) -> None:
    with anyio.fail_after(5):
        await client.config_set("maxmemory-policy", "allkeys-lru")
        risks = await check_redis_server(client, purpose="x", on_unsafe=on_unsafe)  # type: ignore[arg-type]
        assert risks == [NO_PERSISTENCE]  # no limit: nothing evicted, nothing refused
        await client.config_set("maxmemory", "1gb")
        if on_unsafe == "refuse":
            with pytest.raises(
                UnsafeRedisError,
                match=r"maxmemory-policy 'allkeys-lru' with maxmemory 1.00G, which may evict "
                r"any key \(durable events would vanish .*'noeviction'",
            ):
                await check_redis_server(client, purpose="durable events")
            return
        risks = await check_redis_server(client, purpose="locks", on_unsafe="warn")
    assert risks == [
        NO_PERSISTENCE,
        "maxmemory-policy allkeys-lru with maxmemory 1.00G: keys are evicted when memory is full",
    ]


async def test_expiring_evictions_are_warned_about_even_where_evictions_are_refused(
    client: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Streams have no TTL: ``volatile-*`` only takes keys that have one (publish keys)."""
    await client.config_set("maxmemory", "1gb")
    await client.config_set("maxmemory-policy", "volatile-lru")
    with caplog.at_level(logging.WARNING), anyio.fail_after(5):
        risks = await check_redis_server(
            client, purpose="durable events", after_loss="Use republish(since=...)."
        )
    assert risks[1] == (
        "maxmemory-policy volatile-lru with maxmemory 1.00G: keys with a TTL are evicted when "
        "memory is full"
    )
    [record] = caplog.records
    message = record.getMessage()
    assert "no persistence" in message and "volatile-lru" in message
    assert "'appendonly yes'" in message and "'maxmemory-policy noeviction'" in message
    assert "republish(since=...)" in message


@pytest.mark.parametrize("on_unsafe", ["refuse", "warn"])
async def test_a_server_older_than_the_minimum(
    client: Redis, on_unsafe: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Refused for durable events; a warning for data whose loss is tolerated."""
    with anyio.fail_after(5), caplog.at_level(logging.WARNING):
        if on_unsafe == "refuse":
            too_old = r"runs version 7\.\d+\.\d+, older than 99\.0"
            with pytest.raises(UnsafeRedisError, match=too_old):
                await check_redis_server(client, purpose="durable events", min_version=(99, 0))
            assert caplog.records == []
            return
        risks = await check_redis_server(
            client, purpose="locks", on_unsafe="warn", min_version=(99, 0)
        )
    assert risks[0].startswith("it runs version 7.") and "older than 99.0" in risks[0]
    assert len(caplog.records) == 1


async def test_a_server_refusing_config_is_judged_from_info(limited: Limited) -> None:
    """Managed Redis often refuses CONFIG: no snapshot since start then counts as none."""
    no_config = await limited("config")
    with anyio.fail_after(5):
        info = await read_server_info(no_config)
        risks = await check_redis_server(no_config, purpose="x", snapshots_suffice=True)
    assert info.rdb_enabled is None and not info.snapshots
    assert risks == [CONFIG_REFUSED]


async def test_a_snapshot_taken_counts_as_a_schedule_where_config_is_refused() -> None:
    """On a server of its own: the session's must stay without a dump file (a restart would
    load it, where tests expect an empty server)."""
    with RedisServer() as server:
        admin = make_redis_client(server.url)
        no_config = make_redis_client(server.url.replace("://", "://no-config@"))
        try:
            with anyio.fail_after(5):
                await admin.acl_setuser(
                    "no-config", enabled=True, nopass=True, categories=["+@all"],
                    commands=["-config"], keys=["*"],
                )  # fmt: skip
                await admin.save()  # rdb_saves: 1
                info = await read_server_info(no_config)
                risks = await check_redis_server(no_config, purpose="x", snapshots_suffice=True)
        finally:
            await no_config.aclose()
            await admin.aclose()
    assert (info.rdb_enabled, info.rdb_saves, info.snapshots) == (None, 1, True)
    assert risks == []


async def test_a_server_refusing_info_cannot_be_checked(
    limited: Limited, caplog: pytest.LogCaptureFixture
) -> None:
    """A warning where a loss is tolerated; the server's own error where it is not."""
    no_info = await limited("info")
    with anyio.fail_after(5):
        with caplog.at_level(logging.WARNING):
            [risk] = await check_redis_server(no_info, purpose="locks", on_unsafe="warn")
        with pytest.raises(ResponseError, match="info"):
            await check_redis_server(no_info, purpose="durable events")
    assert risk.startswith("its settings cannot be checked: INFO is refused")
    [record] = caplog.records
    assert "may lose locks: its settings cannot be checked" in record.getMessage()


async def test_an_unreachable_server_is_an_error() -> None:
    client = make_redis_client("redis://127.0.0.1:1/0")
    try:
        with anyio.fail_after(5), pytest.raises(RedisConnectionError):
            await check_redis_server(client, purpose="locks", on_unsafe="warn")
    finally:
        await client.aclose()
