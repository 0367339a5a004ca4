"""One conformance suite for LocalLock and RedisLock (a real throwaway redis-server)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from eventbus.backends.redis import make_redis_client
from scheduler import LocalLock, VirtualClock
from scheduler.abc import Lock
from scheduler.backends.redis import RedisLock

T0 = datetime(2024, 1, 1, tzinfo=UTC)


@pytest.fixture(params=["local", "redis"])
async def lock(request: pytest.FixtureRequest) -> AsyncIterator[Lock]:
    if request.param == "local":
        yield LocalLock()
        return
    url: str = request.getfixturevalue("redis_url")
    client = make_redis_client(url)
    yield RedisLock(client)
    await client.aclose()


async def test_locks_fit_the_protocol() -> None:
    _: Lock = LocalLock()
    client = make_redis_client("redis://127.0.0.1:1/0")
    try:
        _ = RedisLock(client)
    finally:
        await client.aclose()


async def test_acquire_is_exclusive_until_released(lock: Lock) -> None:
    first = await lock.acquire("job", ttl=30)
    assert first is not None
    assert await lock.acquire("job", ttl=30) is None
    assert await lock.acquire("other", ttl=30) is not None
    assert await first.release() is True
    again = await lock.acquire("job", ttl=30)
    assert again is not None


async def test_fencing_tokens_increase_with_each_acquisition(lock: Lock) -> None:
    fences = []
    for _ in range(3):
        lease = await lock.acquire("job", ttl=30)
        assert lease is not None
        fences.append(lease.fence)
        await lease.release()
    # consecutive (Redis seeds a new counter from its clock, LocalLock starts at 1)
    assert fences == [fences[0], fences[0] + 1, fences[0] + 2]


async def test_release_and_extend_of_a_stale_lease_do_not_touch_the_new_holder(lock: Lock) -> None:
    old = await lock.acquire("job", ttl=30)
    assert old is not None
    assert await old.release() is True
    new = await lock.acquire("job", ttl=30)
    assert new is not None
    assert await old.release() is False  # a late release: not ours any more
    assert await old.extend() is False
    assert await lock.acquire("job", ttl=30) is None  # the new holder still holds it
    assert await new.extend() is True
    assert await new.release() is True


async def test_claim_fire_is_granted_once_per_name_and_fire_time(lock: Lock) -> None:
    fire = T0 + timedelta(minutes=1)
    assert await lock.claim_fire("job", fire, ttl=60) is True
    assert await lock.claim_fire("job", fire, ttl=60) is False
    assert await lock.claim_fire("job", fire + timedelta(seconds=1), ttl=60) is True
    assert await lock.claim_fire("other", fire, ttl=60) is True


async def test_local_lock_expires_by_its_clock() -> None:
    clock = VirtualClock(T0)
    lock = LocalLock(clock.now)
    lease = await lock.acquire("job", ttl=10)
    assert lease is not None
    await clock.jump(11)
    other = await lock.acquire("job", ttl=10)
    assert other is not None
    assert await lease.release() is False
    assert await lock.holder("job") is not None


async def test_holder_names_the_owner_written_into_the_token(
    request: pytest.FixtureRequest,
) -> None:
    client = make_redis_client(request.getfixturevalue("redis_url"))
    try:
        for lock in (LocalLock(owner="replica-a"), RedisLock(client, owner="replica-a")):
            assert await lock.holder("job") is None
            lease = await lock.acquire("job", ttl=30)
            assert lease is not None
            assert await lock.holder("job") == "replica-a"
            await lease.release()
            assert await lock.holder("job") is None
    finally:
        await client.aclose()


async def test_claims_of_sub_second_fires_do_not_collide(lock: Lock) -> None:
    """Regression test: claims were keyed on whole seconds, so the fires at 1.0 s and 1.5 s
    shared one key and the second was skipped as 'claimed' on every replica."""
    assert await lock.claim_fire("fast", T0 + timedelta(seconds=1.0), ttl=60)
    assert await lock.claim_fire("fast", T0 + timedelta(seconds=1.5), ttl=60)
    assert not await lock.claim_fire("fast", T0 + timedelta(seconds=1.5), ttl=60)
