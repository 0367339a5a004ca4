"""Durable events through the bus: ``durable=True`` types, ``EventBus(durable=...)``,
``bus.publish(event, conn)``, ``bus.on(E, durable=True)``, failures in the bus's store, the
lifecycle events on the bus, and retrying dead durable failures (also from the CLI)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from eventbus import (
    DurableError,
    Event,
    EventBus,
    EventRegistry,
    FailureRecord,
    FailureStatus,
    MemoryFailureStore,
)
from eventbus._cli._main import main
from eventbus.durable import DeadLettered, DurableStarted, DurableStopped, RedisStreams
from tests.durable.conftest import Factory, effect_rows, wait_until
from tests.durable.events import REG, OrderPaid, Refunded, effects


@pytest.fixture
def durable_bus(make_streams: Factory) -> Iterator[tuple[EventBus, RedisStreams]]:
    streams = make_streams()
    yield EventBus(REG, MemoryFailureStore(), durable=streams), streams


def test_durable_is_part_of_the_type() -> None:
    reg = EventRegistry()

    class Paid(Event, name="x.paid", registry=reg, durable=True):
        n: int

    class Seen(Event, name="x.seen", registry=reg):
        n: int

    assert (Paid.__durable__, Seen.__durable__) == (True, False)
    with pytest.raises(TypeError, match="durable=True without a name="):

        class Base(Event, durable=True): ...


async def test_publish_to_a_durable_listener_through_the_bus(
    durable_bus: tuple[EventBus, RedisStreams], engine: AsyncEngine
) -> None:
    bus, _ = durable_bus
    in_process: list[int] = []
    lifecycle: list[Event] = []

    @bus.on(OrderPaid, durable=True, name="rewards.grant")
    async def grant(e: OrderPaid, tx: AsyncConnection) -> None:
        await tx.execute(
            effects.insert().values(listener="grant", event_id="", order_id=e.order_id)
        )

    bus.on(OrderPaid, lambda e: in_process.append(e.order_id), name="local")
    bus.on("eventbus.durable.*", lifecycle.append, name="lifecycle")
    async with bus:
        async with engine.begin() as conn:
            event_id = await bus.publish(OrderPaid(order_id=1), conn, correlation_id="req-1")
        await wait_until(lambda: _n_effects(engine, 1), what="the durable listener")
        bus.emit(OrderPaid(order_id=2))  # in-process, as any event: only the local listener
    assert [e.order_id for e in await effect_rows(engine)] == [1]
    assert in_process == [2] and len(event_id) == 32
    assert [type(e) for e in lifecycle] == [DurableStarted, DurableStopped]
    assert isinstance(lifecycle[0], DurableStarted) and lifecycle[0].groups == (
        "svc:rewards.grant",
    )


async def _n_effects(engine: AsyncEngine, n: int) -> bool:
    return len(await effect_rows(engine)) >= n


async def test_what_is_not_durable_is_refused_with_the_reason(
    durable_bus: tuple[EventBus, RedisStreams], engine: AsyncEngine
) -> None:
    bus, _ = durable_bus
    plain = EventBus(REG)
    async with engine.begin() as conn:
        with pytest.raises(DurableError, match=r"publish\('order.refunded'\): its type is not"):
            await bus.publish(Refunded(order_id=1), conn)
        with pytest.raises(DurableError, match="the bus has no durable transport"):
            await plain.publish(OrderPaid(order_id=1), conn)
    with pytest.raises(DurableError, match="not a name or pattern"):
        bus.on("order.*", print, durable=True)  # type: ignore[call-overload]
    with pytest.raises(DurableError, match="priority= and times= do not apply"):
        bus.on(OrderPaid, print, durable=True, name="x", retries=2)  # type: ignore[call-overload]
    with pytest.raises(DurableError, match="not declared durable"):
        bus.on(Refunded, print, durable=True, name="r")
    bus.on(OrderPaid, print, name="taken")
    from eventbus import DuplicateListenerError

    with pytest.raises(DuplicateListenerError):
        bus.on(OrderPaid, print, durable=True, name="taken")


def grant_points(e: OrderPaid) -> None:
    """A listener subscribed durably under its default name, then in-process."""


async def test_listener_names_are_unique_across_durable_and_in_process_listeners(
    durable_bus: tuple[EventBus, RedisStreams],
) -> None:
    from eventbus import DuplicateListenerError

    bus, streams = durable_bus
    bus.on(OrderPaid, print, durable=True, name="rewards.grant")
    with pytest.raises(DuplicateListenerError, match="'rewards.grant' is already subscribed"):
        bus.on(OrderPaid, print, name="rewards.grant")
    with pytest.raises(DuplicateListenerError, match="'rewards.grant' is already subscribed"):
        bus.on(Refunded, print, name="rewards.grant")  # another event: still one name
    bus.on(OrderPaid, grant_points, durable=True)  # its default name, module:qualname
    default = "tests.durable.test_bus:grant_points"
    with pytest.raises(DuplicateListenerError, match=f"'{default}' is already subscribed"):
        bus.on(OrderPaid, grant_points)
    bus.on(OrderPaid, print, name="local")
    with pytest.raises(DuplicateListenerError, match="'local' is already subscribed"):
        bus.on(OrderPaid, grant_points, durable=True, name="local")
    assert [lst.name for lst in streams.listeners()] == ["rewards.grant", default]
    assert [lst.name for lst in bus.listeners(OrderPaid)] == ["local"]


async def test_a_dead_delivery_goes_to_the_bus_store_and_hook_and_is_retried_by_redelivery(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    from dataclasses import replace

    from tests.durable.conftest import FAST

    store = MemoryFailureStore()
    hooked: list[FailureRecord] = []
    announced: list[DeadLettered] = []
    broken = True
    handled: list[int] = []
    streams = make_streams(options=replace(FAST, max_deliveries=2))
    bus = EventBus(REG, store, durable=streams, on_failure=hooked.append)

    @bus.on(OrderPaid, durable=True, name="fragile")
    async def fragile(e: OrderPaid) -> None:
        if broken:
            raise RuntimeError("not yet")
        handled.append(e.order_id)

    bus.on(DeadLettered, announced.append, name="alarm")
    async with bus:
        async with engine.begin() as conn:
            await bus.publish(OrderPaid(order_id=3), conn)
        await wait_until(lambda: len(announced) == 1, what="the dead letter")
        [rec] = await store.query()
        assert (rec.status, rec.attempts, rec.listener) == (FailureStatus.DEAD, 2, "fragile")
        assert hooked == [rec] and bus.statistics().failures == 1
        broken = False
        report = await bus.retry_failures()
        assert (report.redelivered, str(report)) == (
            1,
            "1 retried: 0 resolved, 0 failed again, 0 dead, 0 skipped, 1 redelivered",
        )
        await wait_until(lambda: handled == [3], what="the redelivery")
        await wait_until(lambda: _resolved(store, rec.id), what="the row resolved")
        assert (await bus.retry_failures()).items == ()  # nothing left
    assert announced[0].failure_id == rec.id


async def test_a_publish_from_a_listener_carries_its_emission_s_causality_to_the_failure(
    make_streams: Factory, engine: AsyncEngine
) -> None:
    """An event published while a listener runs was caused by that listener's event: the
    outbox row, the envelope and the durable listener's failure carry both ids."""
    from dataclasses import replace

    import sqlalchemy as sa

    from eventbus import current_emission
    from eventbus.durable import outbox_table
    from tests.durable.conftest import FAST

    store = MemoryFailureStore()
    streams = make_streams(options=replace(FAST, max_deliveries=1))
    bus = EventBus(REG, store, durable=streams)
    seen: list[tuple[str, str]] = []  # (event id, correlation id) of the refund's emission
    announced: list[DeadLettered] = []

    @bus.on(Refunded, name="publisher")
    async def publish_paid(e: Refunded) -> None:
        emission = current_emission()
        assert emission is not None
        seen.append((emission.event_id, emission.correlation_id))
        async with engine.begin() as conn:
            await bus.publish(OrderPaid(order_id=e.order_id), conn)

    @bus.on(OrderPaid, durable=True, name="always-fails")
    async def fail(e: OrderPaid) -> None:
        raise RuntimeError("no")

    bus.on(DeadLettered, announced.append, name="alarm")
    async with bus:
        await bus.emit_async(Refunded(order_id=5))
        await wait_until(lambda: len(announced) == 1, what="the dead letter")
    [(refund_id, root)] = seen
    async with engine.connect() as conn:
        [row] = (await conn.execute(sa.select(outbox_table()))).mappings().all()
    assert (row["causation_id"], row["correlation_id"]) == (refund_id, root)
    [rec] = await store.query()
    assert rec.listener == "always-fails" and rec.event_id == row["event_id"]
    assert (rec.causation_id, rec.correlation_id) == (refund_id, root)


async def test_a_publish_outside_listeners_has_no_cause_and_starts_its_own_chain(
    make_streams: Factory, engine: AsyncEngine
) -> None:
    from dataclasses import replace

    from tests.durable.conftest import FAST

    store = MemoryFailureStore()
    bus = EventBus(REG, store, durable=make_streams(options=replace(FAST, max_deliveries=1)))
    announced: list[DeadLettered] = []

    @bus.on(OrderPaid, durable=True, name="always-fails")
    async def fail(e: OrderPaid) -> None:
        raise RuntimeError("no")

    bus.on(DeadLettered, announced.append, name="alarm")
    async with bus:
        async with engine.begin() as conn:
            event_id = await bus.publish(OrderPaid(order_id=6), conn)
        await wait_until(lambda: len(announced) == 1, what="the dead letter")
    [rec] = await store.query()
    assert (rec.event_id, rec.causation_id, rec.correlation_id) == (event_id, None, event_id)


async def _any(bus: EventBus, status: FailureStatus) -> bool:
    return bool(await bus.failures.query(status=status))


async def _resolved(store: MemoryFailureStore, fid: str) -> bool:
    rec = await store.get(fid)
    return rec is not None and rec.status is FailureStatus.RESOLVED


def test_failures_retry_on_the_command_line_redelivers_without_consuming(
    redis_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.durable import bus_app

    monkeypatch.setattr(bus_app, "handled", [])  # this test's calls only, whatever ran before
    db = tmp_path / "app.db"
    monkeypatch.setenv("TEST_REDIS_URL", redis_url)
    monkeypatch.setenv("TEST_DB", str(db))
    monkeypatch.setenv("TEST_BROKEN", "1")

    async def dead_then_fixed(expect_redelivery: bool) -> list[FailureRecord]:
        bus = bus_app.make_bus()
        async with bus:
            assert bus.durable is not None
            if not expect_redelivery:
                engine = bus.durable.engine  # type: ignore[attr-defined]
                async with engine.begin() as conn:
                    await bus.publish(OrderPaid(order_id=8), conn)
                await wait_until(lambda: _any(bus, FailureStatus.DEAD), what="the dead row")
            else:
                await wait_until(lambda: bus_app.handled == [8], what="the redelivery")
                await wait_until(lambda: _any(bus, FailureStatus.RESOLVED), what="resolved")
            return await bus.failures.query()

    anyio.run(dead_then_fixed, False, backend="asyncio")
    monkeypatch.delenv("TEST_BROKEN")
    code = main(["failures", "retry", "--app", "tests.durable.bus_app:make_bus", "--db", str(db)])
    out = capsys.readouterr().out
    assert code == 0 and "redelivered  fragile  as entry " in out
    assert bus_app.handled == []  # the command did not consume: it only handed the event back
    [rec] = anyio.run(dead_then_fixed, True, backend="asyncio")
    assert rec.status is FailureStatus.RESOLVED
