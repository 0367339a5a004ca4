"""Delayed durable events: ``publish(..., deliver_at=/delay=)`` writes one outbox row due
later; the relay publishes it at or after that time (waking for it, not for its next poll);
``cancel_scheduled`` removes it in the caller's transaction. On SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import logging
from datetime import UTC, datetime, timedelta

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import EventBus, MemoryFailureStore
from eventbus._cli._main import main
from eventbus.durable import NoTransactionError, create_durable_tables
from eventbus.durable._outbox import Backlog, Outbox
from eventbus.durable._tables import outbox
from tests.durable.conftest import FAST, Factory, wait_until
from tests.durable.events import REG, OrderPaid

#: a poll far longer than any test: a scheduled row delivered in time was woken for
SLOW_POLL = dataclasses.replace(FAST, poll_interval=30.0)


async def test_scheduled_events_arrive_at_their_time_once_and_cancelled_ones_never(
    database: AsyncEngine, make_streams: Factory
) -> None:
    streams = make_streams(engine=database, options=SLOW_POLL)
    bus = EventBus(REG, MemoryFailureStore(), durable=streams)
    arrived: dict[int, list[datetime]] = {}

    @bus.on(OrderPaid, durable=True, name="remind")
    async def remind(e: OrderPaid) -> None:
        arrived.setdefault(e.order_id, []).append(datetime.now(UTC))

    due: dict[int, datetime] = {}
    ids: dict[int, str] = {}
    async with bus:
        start = datetime.now(UTC)
        for n in range(12):  # due 0.3 s to 1.4 s ahead, every other one by delay=
            when = start + timedelta(seconds=0.3 + 0.1 * n)
            async with database.begin() as conn:
                if n % 2:
                    ids[n] = await bus.publish(OrderPaid(order_id=n), conn, deliver_at=when)
                else:
                    before = datetime.now(UTC)
                    delay = when - before
                    ids[n] = await bus.publish(OrderPaid(order_id=n), conn, delay=delay)
                    when = before + delay  # due at publish's own now + delay: not before this
            due[n] = when
        cancelled = {2, 5, 9}
        for n in cancelled:  # each in its own transaction, before it falls due
            async with database.begin() as conn:
                assert await bus.cancel_scheduled(ids[n], conn) is True
        # The last one (11) is due after every cancelled one: once it arrived they all would have.
        await wait_until(lambda: 11 in arrived, within=10, what="the last scheduled event")
        await wait_until(lambda: len(arrived) == 12 - len(cancelled), what="every uncancelled one")
    assert set(arrived) == set(range(12)) - cancelled
    for n, times in arrived.items():
        assert len(times) == 1, f"event {n} delivered {len(times)} times"
        assert times[0] >= due[n] - timedelta(milliseconds=1), f"event {n} delivered early"


async def test_a_cancel_rolled_back_leaves_the_event_scheduled(
    database: AsyncEngine, make_streams: Factory
) -> None:
    bus = EventBus(REG, MemoryFailureStore(), durable=make_streams(engine=database, options=FAST))
    got: list[int] = []
    bus.on(OrderPaid, lambda e: got.append(e.order_id), durable=True, name="remind")
    async with bus:
        async with database.begin() as conn:
            event_id = await bus.publish(OrderPaid(order_id=7), conn, delay=timedelta(seconds=0.3))
        async with database.connect() as conn:
            async with conn.begin() as tx:
                assert await bus.cancel_scheduled(event_id, conn) is True
                await tx.rollback()
        await wait_until(lambda: got == [7], what="the event whose cancel was rolled back")


async def test_cancelling_a_published_event_returns_false_and_logs_why(
    database: AsyncEngine, make_streams: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    bus = EventBus(REG, MemoryFailureStore(), durable=make_streams(engine=database, options=FAST))
    got: list[int] = []
    bus.on(OrderPaid, lambda e: got.append(e.order_id), durable=True, name="remind")
    async with bus:
        async with database.begin() as conn:
            event_id = await bus.publish(OrderPaid(order_id=1), conn)
        await wait_until(lambda: got == [1], what="the delivery")
        caplog.set_level(logging.INFO, logger="eventbus.durable")
        async with database.begin() as conn:
            assert await bus.cancel_scheduled(event_id, conn) is False
            assert await bus.cancel_scheduled("no-such-id", conn) is False
    assert "already published" in caplog.text and event_id in caplog.text
    async with database.connect() as conn:
        with pytest.raises(NoTransactionError, match=r"cancel_scheduled\('x'\)"):
            await bus.cancel_scheduled(
                "x", await conn.execution_options(isolation_level="AUTOCOMMIT")
            )


async def test_only_a_scheduled_row_no_relay_ever_claimed_is_cancellable(
    database: AsyncEngine,
) -> None:
    """An ordinary row stuck during an outage is not cancellable, nor a scheduled one a relay
    claimed once: its lease ran out, or a failed publish gave it back, yet its XADD may still
    land (a slow call, or a timeout Redis applied anyway)."""
    await create_durable_tables(database)
    box, now = Outbox(outbox), datetime(2026, 1, 1, tzinfo=UTC)
    due = now + timedelta(hours=1)
    async with database.begin() as conn:
        scheduled = await box.write(
            conn, [OrderPaid(order_id=n) for n in (2, 3, 4)], now=now, available_at=due
        )
        [ordinary] = await box.write(conn, [OrderPaid(order_id=1)], now=now)
    [expired, given_back, untouched] = scheduled
    claimed = await box.claim(database, token="r:1", limit=2, lease=1, now=due)  # oldest two
    assert [r.event_id for r in claimed] == [expired, given_back]
    await box.release(
        database, token="r:1", ids=[claimed[1].id], error="timeout", retry_at=due
    )  # given back after a timeout; the other's lease runs out unmarked
    async with database.begin() as conn:
        assert [await box.cancel(conn, i) for i in (ordinary, expired, given_back)] == [
            False,
            False,
            False,
        ]
        assert await box.cancel(conn, untouched) is True
    async with database.connect() as conn:
        left = (await conn.execute(sa.select(outbox.c.event_id))).scalars().all()
    assert sorted(left) == sorted([ordinary, expired, given_back])


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"deliver_at": datetime(2030, 1, 1)}, r"deliver_at=2030-01-01T00:00:00 is naive"),
        ({"deliver_at": datetime.now(UTC) - timedelta(minutes=1)}, r"deliver_at=.* in the past"),
        ({"delay": timedelta(seconds=-1)}, r"delay=.* is negative"),
        (
            {"delay": timedelta(1), "deliver_at": datetime.now(UTC)},
            "give deliver_at= or delay=, not both",
        ),
    ],
)
async def test_bad_times_are_refused_naming_the_argument_and_write_nothing(
    engine: AsyncEngine, make_streams: Factory, kwargs: dict[str, object], error: str
) -> None:
    streams = make_streams()
    await create_durable_tables(engine)
    async with engine.begin() as conn:
        with pytest.raises(ValueError, match=error):
            await streams.publish(OrderPaid(order_id=1), conn, **kwargs)  # type: ignore[arg-type]
    assert await _outbox_count(engine) == 0


async def test_a_time_just_past_is_now(engine: AsyncEngine, make_streams: Factory) -> None:
    streams = make_streams()
    await create_durable_tables(engine)
    async with engine.begin() as conn:
        await streams.publish(
            OrderPaid(order_id=1), conn, deliver_at=datetime.now(UTC) - timedelta(seconds=1)
        )
    assert await streams.scheduled() == [] and await _outbox_count(engine) == 1


async def test_cli_lists_and_cancels_scheduled_events(
    engine: AsyncEngine,
    make_streams: Factory,
    redis_url: str,
    db_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    streams = make_streams()
    await create_durable_tables(engine)
    async with engine.begin() as conn:
        soon = await streams.publish(
            OrderPaid(order_id=1), conn, delay=timedelta(hours=1), aggregate_key="order-1"
        )
        later = await streams.publish(OrderPaid(order_id=2), conn, delay=timedelta(hours=2))
        await streams.publish(OrderPaid(order_id=3), conn)  # due now: not listed
    where = ["--redis", redis_url, "--db", db_url]

    async def cli(*argv: str) -> int:  # main() runs its own event loop: in a thread
        return await anyio.to_thread.run_sync(main, ["streams", *argv, *where])

    assert await cli("scheduled") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["DUE", "(UTC)", "EVENT", "KEY", "EVENT", "ID"]
    assert [line.split()[1:] for line in lines[1:]] == [
        ["order.paid", "order-1", soon],
        ["order.paid", "-", later],
    ]
    assert await cli("cancel", soon) == 0
    assert capsys.readouterr().out.strip() == f"{soon}  cancelled"
    assert await cli("cancel", soon) == 1
    assert "not cancelled" in capsys.readouterr().out
    assert [row.event_id for row in await streams.scheduled()] == [later]


async def _outbox_count(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int(
            (await conn.execute(sa.select(sa.func.count()).select_from(outbox))).scalar_one()
        )


async def test_a_row_falling_due_while_the_relay_publishes_waits_for_no_poll(
    engine: AsyncEngine, make_streams: Factory
) -> None:
    """The relay claims the first event, then stalls while the second falls due: it looks for
    rows due since its claim, not since now, and publishes the second without its poll."""
    stalled: list[str] = []

    async def stall_once(point: str) -> None:
        if point == "claimed" and not stalled:
            stalled.append(point)
            await anyio.sleep(0.3)

    streams = make_streams(options=SLOW_POLL, _fault=stall_once)
    got: list[int] = []

    async def remind(e: OrderPaid) -> None:
        got.append(e.order_id)

    streams.subscribe(OrderPaid, remind, name="remind")
    async with streams:
        first = datetime.now(UTC) + timedelta(seconds=0.3)
        async with engine.begin() as conn:
            for n in range(2):
                due = first + timedelta(milliseconds=100 * n)
                await streams.publish(OrderPaid(order_id=n), conn, deliver_at=due)
        await wait_until(lambda: sorted(got) == [0, 1], within=10, what="both, before a poll")
    assert stalled == ["claimed"]


async def test_scheduled_rows_are_no_backlog_until_due(
    engine: AsyncEngine, make_streams: Factory
) -> None:
    """The relay's backlog (its statistics, the backlog-high alarm) counts due rows only, and
    a row that fell due counts its age from its due time."""
    streams = make_streams()
    await create_durable_tables(engine)
    async with engine.begin() as conn:
        await streams.publish(OrderPaid(order_id=1), conn, delay=timedelta(hours=1))
    now = datetime.now(UTC)
    assert await streams.rt.outbox.backlog(engine, now=now) == Backlog(0, None)
    later = now + timedelta(hours=1, seconds=10)
    backlog = await streams.rt.outbox.backlog(engine, now=later)
    assert backlog.count == 1 and 9 <= (backlog.oldest_age(later) or 0) <= 11
