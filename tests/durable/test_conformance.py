"""One suite, two transports: the durable behaviours a user's tests rely on, run against
``RedisStreams`` (the session's redis-server) and ``eventbus.testing.MemoryStreams`` (no
server), both on a real SQLite database. What needs a second process or a Redis fault is
``RedisStreams``' alone (test_processes, test_redis_faults)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from eventbus import Event, EventBus, EventRegistry, FailureStatus, MemoryFailureStore, upcaster
from eventbus.abc import DurableTransport
from eventbus.durable import DeadLettered, NoTransactionError, current_delivery
from eventbus.durable._outbox import Outbox
from eventbus.durable._tables import outbox
from eventbus.testing import MemoryStreams
from tests.durable.conftest import FAST, Factory, effect_rows, wait_until
from tests.durable.events import REG, OrderPaid, effects

#: what publishers of other versions of ``order.paid`` declare (their rows are written
#: straight to the outbox, as their own processes would)
V1, V2, V3, STRICT = EventRegistry(), EventRegistry(), EventRegistry(), EventRegistry()


class PaidV1(Event, name="order.paid", registry=V1, durable=True):
    order_id: int
    amount: float


class PaidV2(Event, name="order.paid", registry=V2, durable=True, version=2):
    order_id: int
    cents: int


@upcaster("order.paid", from_version=1, registry=V2)
def _cents(old: dict[str, Any]) -> dict[str, Any]:
    return {"order_id": old["order_id"], "cents": round(old["amount"] * 100)}


class PaidV3(Event, name="order.paid", registry=V3, durable=True, version=3):
    order_id: int
    cents: int
    currency: str


class StrictV2(
    Event, name="order.paid", registry=STRICT, durable=True, version=2, unknown_fields="reject"
):
    """A reader of version 2 that refuses fields it does not declare."""

    order_id: int
    cents: int


Build = Callable[[EventRegistry], DurableTransport]


@pytest.fixture(params=["redis", "memory"])
def build(request: pytest.FixtureRequest, engine: AsyncEngine) -> Build:
    """The transport under test, decoding with a given registry."""
    if request.param == "redis":
        make_streams: Factory = request.getfixturevalue("make_streams")
        return lambda registry: make_streams(registry=registry)
    return lambda registry: MemoryStreams(engine, service="svc", registry=registry, options=FAST)


@pytest.fixture
def transport(build: Build) -> Iterator[DurableTransport]:
    yield build(REG)


@pytest.fixture
def bus(transport: DurableTransport) -> EventBus:
    return EventBus(REG, MemoryFailureStore(), durable=transport)


async def test_each_group_gets_a_committed_event_once_and_a_rolled_back_one_never(
    bus: EventBus, engine: AsyncEngine
) -> None:
    got: dict[str, list[int]] = {"a": [], "b": []}
    bus.on(OrderPaid, lambda e: got["a"].append(e.order_id), durable=True, name="a")

    @bus.on(OrderPaid, durable=True, name="b")
    async def b(e: OrderPaid) -> None:
        got["b"].append(e.order_id)

    async with bus:
        async with engine.begin() as conn:
            await bus.publish(OrderPaid(order_id=1), conn)
        async with engine.connect() as conn:
            async with conn.begin() as tx:
                await bus.publish(OrderPaid(order_id=2), conn)
                await tx.rollback()
        async with engine.begin() as conn:
            await bus.publish(OrderPaid(order_id=3), conn)
        await wait_until(lambda: len(got["a"]) == len(got["b"]) == 2, what="both groups")
    # each group once; in any order: a group runs `concurrency` calls at once, and a sync
    # listener's calls run in worker threads
    assert {group: sorted(ids) for group, ids in got.items()} == {"a": [1, 3], "b": [1, 3]}


async def test_publish_outside_a_transaction_is_refused(bus: EventBus, engine: AsyncEngine) -> None:
    bus.on(OrderPaid, print, durable=True, name="p")
    async with bus:
        async with engine.connect() as conn:
            autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
            with pytest.raises(NoTransactionError):
                await bus.publish(OrderPaid(order_id=1), autocommit)


async def test_a_listener_taking_tx_commits_its_effect_with_the_inbox_row(
    bus: EventBus, engine: AsyncEngine
) -> None:
    @bus.on(OrderPaid, durable=True, name="grant")
    async def grant(e: OrderPaid, tx: AsyncConnection) -> None:
        event_id = current_delivery().event_id
        await tx.execute(
            effects.insert().values(listener="grant", event_id=event_id, order_id=e.order_id)
        )

    async with bus:
        async with engine.begin() as conn:
            event_id = await bus.publish(OrderPaid(order_id=5), conn)
        await wait_until(lambda: _effects(engine, 1), what="the effect")
    [row] = await effect_rows(engine)
    assert (row.order_id, row.event_id) == (5, event_id)
    async with engine.connect() as conn:
        inbox = sa.table("eventbus_inbox", sa.column("group_name"), sa.column("event_id"))
        rows = (await conn.execute(sa.select(inbox.c.group_name, inbox.c.event_id))).all()
    assert [tuple(r) for r in rows] == [("svc:grant", event_id)]


async def test_a_failed_delivery_comes_again_with_a_higher_count(
    bus: EventBus, engine: AsyncEngine
) -> None:
    counts: list[int] = []

    @bus.on(OrderPaid, durable=True, name="flaky")
    async def flaky(e: OrderPaid) -> None:
        counts.append(current_delivery().deliveries)
        if len(counts) == 1:
            raise RuntimeError("first time fails")

    async with bus:
        async with engine.begin() as conn:
            await bus.publish(OrderPaid(order_id=1), conn)
        await wait_until(lambda: len(counts) == 2, what="the redelivery")
    assert counts == [1, 2]


async def test_max_deliveries_then_dead_and_a_retry_resolves_it(
    bus: EventBus, engine: AsyncEngine
) -> None:
    calls: list[int] = []
    dead: list[DeadLettered] = []
    healthy = False

    @bus.on(OrderPaid, durable=True, name="broken")
    async def broken(e: OrderPaid) -> None:
        calls.append(current_delivery().deliveries)
        if not healthy:
            raise RuntimeError(f"broken for {e.order_id}")

    bus.on(DeadLettered, dead.append, name="watch")
    async with bus:
        async with engine.begin() as conn:
            event_id = await bus.publish(OrderPaid(order_id=9), conn)
        await wait_until(lambda: len(dead) == 1, what="the dead letter")
        assert calls == [1, 2, 3]  # FAST: max_deliveries=3
        [rec] = await bus.failures.query()
        assert (rec.status, rec.event_id, rec.durable_group, rec.attempts) == (
            FailureStatus.DEAD,
            event_id,
            "svc:broken",
            3,
        )
        assert dead[0].failure_id == rec.id and dead[0].group == "svc:broken"
        healthy = True
        report = await bus.retry_failures()
        assert [item.result for item in report.items] == ["redelivered"]
        await wait_until(lambda: _status(bus, FailureStatus.RESOLVED), what="resolved")
    assert len(calls) == 4


async def test_scheduled_events_come_at_their_time_and_cancelled_ones_never(
    bus: EventBus, engine: AsyncEngine
) -> None:
    got: list[tuple[int, datetime]] = []
    bus.on(OrderPaid, lambda e: got.append((e.order_id, datetime.now(UTC))), durable=True, name="r")
    async with bus:
        due = datetime.now(UTC) + timedelta(seconds=0.3)
        async with engine.begin() as conn:
            kept = await bus.publish(OrderPaid(order_id=1), conn, deliver_at=due)
            dropped = await bus.publish(OrderPaid(order_id=2), conn, deliver_at=due)
        async with engine.begin() as conn:
            assert await bus.cancel_scheduled(dropped, conn) is True
        async with engine.begin() as conn:  # due after the cancelled one: it came first
            await bus.publish(OrderPaid(order_id=3), conn, deliver_at=due + timedelta(seconds=0.1))
        await wait_until(lambda: [o for o, _ in got] == [1, 3], what="the two kept")
        async with engine.begin() as conn:
            assert await bus.cancel_scheduled(kept, conn) is False
    assert all(at >= due for _, at in got)


async def _write(engine: AsyncEngine, *events: Event) -> None:
    """Rows as a publisher declaring *events*' versions writes them."""
    async with engine.begin() as conn:
        await Outbox(outbox).write(conn, list(events), now=datetime.now(UTC))


async def test_an_older_stored_version_reaches_the_listener_through_its_upcasters(
    build: Build, engine: AsyncEngine
) -> None:
    bus = EventBus(V2, MemoryFailureStore(), durable=build(V2))
    got: list[PaidV2] = []
    bus.on(PaidV2, got.append, durable=True, name="r")
    async with bus:
        await _write(engine, PaidV1(order_id=1, amount=2.5))
        await wait_until(lambda: len(got) == 1, what="the upcast event")
    assert got == [PaidV2(order_id=1, cents=250)]


async def test_a_newer_version_is_read_tolerantly_by_a_type_that_ignores_unknown_fields(
    bus: EventBus, engine: AsyncEngine
) -> None:
    got: list[OrderPaid] = []
    bus.on(OrderPaid, got.append, durable=True, name="r")
    async with bus:
        await _write(engine, PaidV3(order_id=4, cents=1, currency="EUR"))
        await wait_until(lambda: len(got) == 1, what="the tolerant read")
    assert got == [OrderPaid(order_id=4)]
    assert await bus.failures.query() == []


async def test_a_newer_version_a_strict_type_cannot_read_is_held_not_dead(
    build: Build, engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    bus = EventBus(STRICT, MemoryFailureStore(), durable=build(STRICT))
    got: list[int] = []
    bus.on(StrictV2, lambda e: got.append(e.order_id), durable=True, name="r")
    async with bus:
        await _write(engine, PaidV3(order_id=1, cents=1, currency="EUR"))
        await _write(engine, PaidV2(order_id=2, cents=2))  # after it: delivered, not blocked
        await wait_until(lambda: got == [2], what="the readable event")
        await wait_until(lambda: _held(caplog), what="the warning of the held version")
        assert await bus.failures.query() == []
    assert got == [2]


def _held(caplog: pytest.LogCaptureFixture) -> bool:
    return any("left pending, not dead" in r.getMessage() for r in caplog.records)


async def test_a_payload_that_cannot_be_decoded_is_dead_at_its_first_delivery(
    bus: EventBus, engine: AsyncEngine
) -> None:
    bad = EventRegistry()

    class Garbled(Event, name="order.paid", registry=bad, durable=True):
        order_id: str

    calls: list[OrderPaid] = []
    bus.on(OrderPaid, calls.append, durable=True, name="r")
    async with bus:
        await _write(engine, Garbled(order_id="not a number"))
        await wait_until(lambda: _status(bus, FailureStatus.DEAD), what="the dead letter")
        [rec] = await bus.failures.query()
    assert calls == [] and rec.durable_deliveries == 1
    assert "cannot rebuild int" in rec.message and " version=1" in (rec.note or "")


async def _effects(engine: AsyncEngine, n: int) -> bool:
    return len(await effect_rows(engine)) >= n


async def _status(bus: EventBus, status: FailureStatus) -> bool:
    return [r.status for r in await bus.failures.query()] == [status]
