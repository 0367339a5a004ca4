"""The group kill switch: its window, ratio and growing pause on a virtual clock; its options'
and ``trip_on``'s checks; and a group in one process against the real Redis, paused without
spending its pending entries' delivery counts, then resumed early by an operator."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import Event, EventBus, MemoryFailureStore
from eventbus.durable import (
    DurableOptions,
    GroupPaused,
    GroupResumed,
    RedisStreams,
    current_delivery,
)
from eventbus.durable._kill_switch import KillSwitch, Outcome
from tests.durable.conftest import FAST, Factory, wait_until
from tests.durable.events import REG, OrderPaid


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def switch(clock: Clock, **kwargs: Any) -> KillSwitch:
    options: dict[str, Any] = {
        "trip_after": 4,
        "trip_ratio": 0.5,
        "trip_window": 10.0,
        "pause": 2.0,
        "max_pause": 5.0,
    }
    options.update(kwargs)
    return KillSwitch(clock=clock, wall=clock, **options)


def test_it_trips_only_after_enough_deliveries_at_the_ratio() -> None:
    clock = Clock()
    s = switch(clock)
    assert [s.record(Outcome.FAILED) for _ in range(3)] == [False, False, False]  # 3 < 4
    assert s.record(Outcome.FAILED) and s.paused and s.remaining() == 2.0
    assert not s.charging  # failures from the trip on are the outage's, not their entries'


def test_below_the_ratio_it_does_not_trip() -> None:
    s = switch(Clock())
    for _ in range(10):
        assert not s.record(Outcome.OK)
        assert not s.record(Outcome.OTHER)  # a failure its trip_on does not count
    assert not s.record(Outcome.FAILED)  # 1 of 21
    assert not s.paused and s.charging


def test_outcomes_older_than_the_window_are_forgotten() -> None:
    clock = Clock()
    s = switch(clock)
    for _ in range(3):
        s.record(Outcome.FAILED)
    clock.now += 10.5
    assert s.state().deliveries == 0
    assert not s.record(Outcome.FAILED)


def test_the_pause_doubles_while_it_keeps_tripping_and_resets_after_a_calm_window() -> None:
    clock = Clock()
    s = switch(clock)
    pauses = []
    for _ in range(4):
        while not s.record(Outcome.FAILED):
            pass
        pauses.append(s.remaining())
        clock.now += s.remaining()
        s.resume()
    assert pauses == [2.0, 4.0, 5.0, 5.0]  # doubling, at most max_pause
    clock.now += 11.0  # a window without a trip since the last resume
    while not s.record(Outcome.FAILED):
        pass
    assert s.remaining() == 2.0


def test_an_episode_ends_once_at_the_first_success_after_its_last_pause() -> None:
    clock = Clock()
    s = switch(clock)
    while not s.record(Outcome.FAILED):
        pass
    started = clock.now
    s.record(Outcome.OK)  # an in-flight call that succeeded during the pause
    assert s.ended_episode() is None  # still paused
    clock.now += 2.0
    s.resume()
    while not s.record(Outcome.FAILED):
        pass
    clock.now += 4.0
    s.resume()
    assert s.ended_episode() is None  # no success yet
    s.record(Outcome.OK)
    assert s.ended_episode() == (started, 2)
    assert s.ended_episode() is None and s.charging


def test_outcomes_while_paused_do_not_count_toward_the_next_trip() -> None:
    clock = Clock()
    s = switch(clock)
    while not s.record(Outcome.FAILED):
        pass
    for _ in range(10):
        assert not s.record(Outcome.FAILED)  # calls in flight at the trip
    s.resume()
    assert s.state().deliveries == 0


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("trip_ratio", 1.5, "trip_ratio=1.5 must be a failure ratio above 0 and at most 1"),
        ("trip_ratio", -0.1, "trip_ratio=-0.1 must be"),
        ("trip_ratio", 0.0, "trip_ratio=0.0 must be"),
        ("trip_window", -1.0, "trip_window=-1.0 must be > 0"),
        ("pause", -2.0, "pause=-2.0 must be > 0"),
        ("trip_after", 0, "trip_after=0 must be >= 1"),
        ("max_pause", 1.0, "max_pause=1.0 must be >= pause=5.0"),
    ],
)
def test_bad_kill_switch_options_are_refused_naming_the_option(
    option: str, value: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        DurableOptions(**{option: value})


@pytest.mark.parametrize("bad", [ValueError("an instance"), (ValueError, "x"), int, ()])
async def test_a_trip_on_that_is_not_exception_types_is_refused_naming_it(
    make_streams: Factory, bad: object
) -> None:
    streams = make_streams()
    with pytest.raises(TypeError, match="trip_on="):
        streams.subscribe(OrderPaid, lambda e: None, name="x", trip_on=bad)  # type: ignore[arg-type]
    assert streams.listeners() == []


async def test_a_tripped_group_pauses_without_spending_delivery_counts_and_resumes_early(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    down = True
    calls: list[int] = []
    announced: list[Event] = []
    options = replace(FAST, trip_after=5, trip_ratio=0.5, pause=60.0, max_pause=60.0)
    streams = make_streams(options=options)
    streams.notify = announced.append

    class DatabaseDown(Exception):
        pass

    async def grant(e: OrderPaid) -> None:
        calls.append(e.order_id)
        if down:
            raise DatabaseDown("connection refused")

    streams.subscribe(OrderPaid, grant, name="grant", trip_on=DatabaseDown)
    async with streams:
        async with engine.begin() as conn:
            await streams.publish_many([OrderPaid(order_id=i) for i in range(1, 11)], conn)
        await wait_until(lambda: streams.statistics().group("grant").paused, what="the trip")
        stats = streams.statistics().group("grant")
        assert stats.trips == 1 and stats.resumes_at is not None and stats.dead == 0
        [paused] = await _wait_paused(streams)
        assert (paused.group, paused.consumer) == ("svc:grant", streams.consumer)
        counts = await _counts(client, streams)
        called = len(calls)
        # The failed ones idle past twice the visibility time: a reclaim would have taken
        # them by now (the others, read and held, have their leases renewed).
        failed = streams.statistics().group("grant").failed
        await wait_until(lambda: _idle(client, streams, 2.0, failed), what="idle", within=15)
        assert await _counts(client, streams) == counts  # no delivery spent by the pause
        assert len(calls) == called
        down = False
        assert await streams.resume_group("order.paid", "svc:grant") == 1
        await wait_until(
            lambda: streams.statistics().group("grant").succeeded == 10, what="every event"
        )
        stats = streams.statistics().group("grant")
    assert (stats.dead, stats.paused) == (0, False)
    assert sum(isinstance(e, GroupPaused) for e in announced) == 1
    [resumed] = [e for e in announced if isinstance(e, GroupResumed)]
    assert resumed.trips == 1


async def test_a_stop_during_a_pause_hands_back_the_held_entries_at_once_uncharged(
    make_streams: Factory, engine: AsyncEngine
) -> None:
    """Entries held at the gate never began: the stop does not wait the grace for them, and
    the next consumer takes them as they were, not as suspects charged with a crash."""
    options = replace(
        FAST, concurrency=10, trip_after=5, trip_ratio=0.5, pause=60.0, max_pause=60.0
    )
    options = replace(options, shutdown_grace=10.0)
    first = make_streams(options=options)

    class DatabaseDown(Exception):
        pass

    async def down(e: OrderPaid) -> None:
        raise DatabaseDown("connection refused")

    first.subscribe(OrderPaid, down, name="grant", trip_on=DatabaseDown)
    async with first:
        async with engine.begin() as conn:
            await first.publish_many([OrderPaid(order_id=i) for i in range(1, 11)], conn)
        await wait_until(lambda: first.statistics().group("grant").paused, what="the trip")
        held = first.statistics().group("grant").in_flight
        assert held > 0  # read before the trip, waiting at the gate
        began = anyio.current_time()
    took = anyio.current_time() - began
    assert took < options.shutdown_grace / 2  # nothing that began was left to wait for

    deliveries: dict[int, list[int]] = {}

    async def grant(e: OrderPaid) -> None:
        deliveries.setdefault(e.order_id, []).append(current_delivery().deliveries)

    second = make_streams(options=replace(options, shutdown_grace=1.0))
    second.subscribe(OrderPaid, grant, name="grant", trip_on=DatabaseDown)
    async with second:
        await wait_until(lambda: len(deliveries) == 10, what="every event", within=15)
        stats = second.statistics().group("grant")
    assert all(len(d) == 1 for d in deliveries.values())  # each once
    assert stats.suspects == 0 and stats.dead == 0
    assert sorted(d for [d] in deliveries.values()).count(1) == held  # their count unspent


async def _wait_paused(streams: RedisStreams) -> list[Any]:
    found: list[Any] = []

    async def shown() -> bool:
        [status] = await streams.status(["order.paid"])
        found[:] = [p for g in status.groups for p in g.paused]
        return bool(found)

    await wait_until(shown, what="the pause in Redis")
    return found


async def _pending(client: Redis, streams: RedisStreams) -> list[Any]:
    rows: Any = await client.xpending_range(
        streams.keys.stream("order.paid"), "svc:grant", min="-", max="+", count=100
    )
    return list(rows)


async def _counts(client: Redis, streams: RedisStreams) -> dict[str, int]:
    return {r["message_id"]: r["times_delivered"] for r in await _pending(client, streams)}


async def _idle(client: Redis, streams: RedisStreams, visibilities: float, n: int) -> bool:
    limit = visibilities * streams.options.visibility * 1000
    rows = await _pending(client, streams)
    return bool(sum(r["time_since_delivered"] >= limit for r in rows) >= n)


async def test_trip_on_goes_through_the_bus_and_only_for_durable_listeners(
    make_streams: Factory,
) -> None:
    streams = make_streams()
    bus = EventBus(REG, MemoryFailureStore(), durable=streams)
    bus.on(OrderPaid, lambda e: None, durable=True, name="g", trip_on=OSError)
    bus.on(OrderPaid, lambda e: None, durable=True, name="h")
    assert [(x.name, x.trip_on) for x in streams.listeners()] == [("g", (OSError,)), ("h", None)]
    with pytest.raises(TypeError, match="trip_on= applies to durable listeners only"):
        bus.on(OrderPaid, lambda e: None, trip_on=OSError)  # type: ignore[call-overload]
