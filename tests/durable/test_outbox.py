"""The outbox on SQLite: a durable publish is part of the caller's transaction (F1), rows are
claimed with a lease and marked only by their claim, purged after retention, republished."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import Event, EventRegistry, PayloadError, UnknownEventError
from eventbus.backends.sql import make_engine
from eventbus.durable import NoTransactionError, create_durable_tables, outbox_table
from eventbus.durable._outbox import Outbox
from eventbus.durable._tables import outbox
from tests.durable.conftest import Factory, entries, wait_until
from tests.durable.events import OrderPaid

NOW = datetime(2026, 1, 1, tzinfo=UTC)


async def outbox_rows(engine: AsyncEngine) -> list[sa.Row[object]]:
    async with engine.connect() as conn:
        return list((await conn.execute(sa.select(outbox).order_by(outbox.c.id))).all())


async def test_f1_rollback_leaves_no_row_and_sends_nothing(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    streams = make_streams()
    async with streams:
        with pytest.raises(ZeroDivisionError):
            async with engine.begin() as conn:
                await streams.publish(OrderPaid(order_id=1), conn)
                raise ZeroDivisionError  # the application's transaction fails
        async with engine.begin() as conn:  # and a committed one, to know the relay ran
            await streams.publish(OrderPaid(order_id=2), conn)
        await wait_until(lambda: streams.statistics().relay.published == 1, what="one publish")
    assert [r.payload for r in await outbox_rows(engine)] == ['{"order_id": 2}']
    found = await entries(client, streams.keys.stream("order.paid"))
    assert [e[1][b"payload"] for e in found] == [b'{"order_id": 2}']


async def test_f1_publish_outside_a_transaction_is_refused(
    make_streams: Factory, engine: AsyncEngine
) -> None:
    streams = make_streams()
    await create_durable_tables(engine)
    async with engine.connect() as conn:
        with pytest.raises(
            NoTransactionError, match=r"publish\('order.paid'\).*no open transaction"
        ):
            await streams.publish(OrderPaid(order_id=1), conn)
    async with engine.connect() as conn:
        auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await auto.execute(sa.text("SELECT 1"))
        with pytest.raises(NoTransactionError, match="autocommit"):
            await streams.publish(OrderPaid(order_id=1), auto)
    assert await outbox_rows(engine) == []


async def test_publish_checks_the_event_before_writing(
    make_streams: Factory, engine: AsyncEngine
) -> None:
    other = EventRegistry()

    class Stranger(Event, name="order.paid", registry=other, durable=True):
        order_id: int

    class Opaque(Event, name="opaque.thing", registry=other, durable=True):
        value: object

    streams = make_streams()
    await create_durable_tables(engine)
    async with engine.begin() as conn:
        with pytest.raises(UnknownEventError, match="order.paid"):
            await streams.publish(Stranger(order_id=1), conn)
    bad = make_streams(registry=other)
    async with engine.begin() as conn:
        with pytest.raises(PayloadError, match="opaque.thing.*cannot be encoded"):
            await bad.publish(Opaque(value=object()), conn)
    assert await outbox_rows(engine) == []


async def test_a_row_carries_ids_and_headers_into_the_envelope(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    streams = make_streams()
    async with streams:
        async with engine.begin() as conn:
            event_id = await streams.publish(
                OrderPaid(order_id=7),
                conn,
                aggregate_key="order-7",
                causation_id="c1",
                correlation_id="k1",
                headers={"tenant": "acme"},
            )
        await wait_until(lambda: streams.statistics().relay.published == 1, what="the publish")
    [(_, fields)] = await entries(client, streams.keys.stream("order.paid"))
    [row] = await outbox_rows(engine)
    assert fields == {
        b"v": b"1",
        b"event_id": event_id.encode(),
        b"name": b"order.paid",
        b"seq": str(row.id).encode(),
        b"occurred_at": row.created_at.isoformat().encode(),
        b"payload": b'{"order_id": 7}',
        b"aggregate_key": b"order-7",
        b"causation_id": b"c1",
        b"correlation_id": b"k1",
        b"headers": b'{"tenant": "acme"}',
        b"event_version": b"1",
    }
    assert row.event_version == 1
    assert row.published_at is not None and row.stream_id is not None
    assert (row.lease_owner, row.attempts) == (None, 1)


async def test_a_claim_leases_rows_and_only_its_token_marks_them(engine: AsyncEngine) -> None:
    await create_durable_tables(engine)
    box = Outbox(outbox)
    async with engine.begin() as conn:
        await box.write(conn, [OrderPaid(order_id=i) for i in range(3)], now=NOW)
    first = await box.claim(engine, token="a:1", limit=2, lease=30, now=NOW)
    assert [r.id for r in first] == [1, 2]
    # Leased rows are skipped until the lease ends, then claimed again by anyone.
    assert [r.id for r in await box.claim(engine, token="b:1", limit=5, lease=30, now=NOW)] == [3]
    later = NOW + timedelta(seconds=31)
    assert [r.id for r in await box.claim(engine, token="b:2", limit=5, lease=30, now=later)] == [
        1,
        2,
        3,
    ]
    assert await box.mark(engine, token="a:1", stream_ids={1: "1-0", 2: "2-0"}, now=later) == 0
    assert await box.mark(engine, token="b:2", stream_ids={1: "1-0", 3: "3-0"}, now=later) == 2
    rows = {r.id: r for r in await outbox_rows(engine)}
    assert (rows[1].stream_id, rows[2].stream_id, rows[3].stream_id) == ("1-0", None, "3-0")
    assert rows[2].attempts == 2  # claimed twice, published by neither mark
    assert await box.claim(engine, token="c:1", limit=5, lease=30, now=later) == []


async def test_given_back_rows_wait_for_their_retry_time(engine: AsyncEngine) -> None:
    await create_durable_tables(engine)
    box = Outbox(outbox)
    async with engine.begin() as conn:
        await box.write(conn, [OrderPaid(order_id=1)], now=NOW)
    [row] = await box.claim(engine, token="a:1", limit=5, lease=30, now=NOW)
    retry_at = NOW + timedelta(seconds=2)
    await box.release(
        engine, token="a:1", ids=[row.id], error="ConnectionError: down", retry_at=retry_at
    )
    assert await box.claim(engine, token="b:1", limit=5, lease=30, now=NOW) == []
    assert (
        len(
            await box.claim(
                engine, token="b:1", limit=5, lease=30, now=retry_at + timedelta(seconds=1)
            )
        )
        == 1
    )
    [stored] = await outbox_rows(engine)
    assert stored.last_error == "ConnectionError: down"


async def test_purge_deletes_published_rows_past_retention_in_batches(engine: AsyncEngine) -> None:
    await create_durable_tables(engine)
    box = Outbox(outbox)
    async with engine.begin() as conn:
        await box.write(conn, [OrderPaid(order_id=i) for i in range(7)], now=NOW)
    claimed = await box.claim(engine, token="a:1", limit=5, lease=30, now=NOW)
    await box.mark(engine, token="a:1", stream_ids={r.id: f"{r.id}-0" for r in claimed}, now=NOW)
    assert await box.purge(engine, before=NOW, batch=2) == 0  # strictly older only
    assert await box.purge(engine, before=NOW + timedelta(seconds=1), batch=2) == 5
    assert [r.id for r in await outbox_rows(engine)] == [6, 7]  # unpublished rows stay


async def test_backlog_counts_unpublished_rows_and_their_age(engine: AsyncEngine) -> None:
    await create_durable_tables(engine)
    box = Outbox(outbox)
    assert (await box.backlog(engine)).count == 0
    async with engine.begin() as conn:
        await box.write(conn, [OrderPaid(order_id=1), OrderPaid(order_id=2)], now=NOW)
    backlog = await box.backlog(engine)
    assert (backlog.count, backlog.oldest_at) == (2, NOW)
    assert backlog.oldest_age(NOW + timedelta(seconds=5)) == 5.0


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_the_outbox_has_a_partial_index_of_unpublished_rows(dialect: str) -> None:
    from sqlalchemy.dialects import postgresql, sqlite
    from sqlalchemy.schema import CreateIndex

    table = outbox_table("my_outbox")
    [index] = [i for i in table.indexes if i.name == "ix_my_outbox_unpublished"]
    d = sqlite.dialect() if dialect == "sqlite" else postgresql.dialect()  # type: ignore[no-untyped-call]
    assert str(CreateIndex(index).compile(dialect=d)).endswith("WHERE published_at IS NULL")


async def test_the_relay_is_woken_by_a_local_commit_not_by_its_poll(
    make_streams: Factory, engine: AsyncEngine
) -> None:
    from dataclasses import replace

    from tests.durable.conftest import FAST

    streams = make_streams(options=replace(FAST, poll_interval=30.0))
    async with streams:
        await anyio.sleep(0.05)  # let the relay's first (empty) pass go to sleep
        async with engine.begin() as conn:
            await streams.publish(OrderPaid(order_id=1), conn)
        async with engine.connect() as conn:  # a connection reused after its commit
            async with conn.begin():
                await streams.publish(OrderPaid(order_id=2), conn)
            async with conn.begin():
                await conn.execute(sa.text("SELECT 1"))
            with anyio.fail_after(5):  # far below the 30 s poll
                await wait_until(lambda: streams.statistics().relay.published == 2, what="both")


async def test_inbox_rows_past_retention_are_purged_in_batches(engine: AsyncEngine) -> None:
    from eventbus.durable._inbox import Inbox
    from eventbus.durable._tables import inbox

    await create_durable_tables(engine)
    box = Inbox(inbox)
    for i in range(5):
        async with engine.begin() as conn:
            when = NOW + timedelta(seconds=i)
            assert await box.claim(conn, group="g", event_id=f"e{i}", now=when)
            assert not await box.claim(conn, group="g", event_id=f"e{i}", now=when)
    assert await box.purge(engine, before=NOW + timedelta(seconds=3), batch=2) == 3
    assert [await box.seen(engine, group="g", event_id=f"e{i}") for i in range(5)] == [
        False,
        False,
        False,
        True,
        True,
    ]


async def test_processes_starting_together_both_get_the_tables(tmp_path: Path) -> None:
    """Regression test: two processes starting on a new SQLite file raced to create the
    tables, and the loser's start failed ("table eventbus_outbox already exists")."""
    for i in range(5):
        engines = [make_engine(tmp_path / f"race{i}.db") for _ in range(3)]
        try:
            async with anyio.create_task_group() as tg:
                for eng in engines:
                    tg.start_soon(create_durable_tables, eng)
            async with engines[0].connect() as conn:
                names = await conn.run_sync(lambda c: sa.inspect(c).get_table_names())
            assert {"eventbus_outbox", "eventbus_inbox"} <= set(names)
        finally:
            for eng in engines:
                await eng.dispose()
