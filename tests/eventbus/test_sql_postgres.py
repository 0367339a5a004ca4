"""SqlFailureStore and bus.retry_failures() against a real PostgreSQL (asyncpg).

The portable contract (tables and indexes, field round trip, queries) is parametrised over
SQLite and PostgreSQL in test_sql_store.py; this module adds the PostgreSQL runs of batched
flushes, exactly once under concurrent emits, close flushes and retries, plus what only a
strict server checks: a value longer than its column is refused as one row, not as the whole
batch. Each test gets a fresh database from the ``postgres_url`` fixture.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from eventbus import Event, EventBus, FailureStatus
from eventbus.backends.sql import SqlFailureStore
from tests.eventbus.test_retry import PAID, Flaky, record_failures, sql_bus
from tests.eventbus.test_sql_store import OrderPaid, make_record, reg


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def engine(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    eng = create_async_engine(postgres_url)
    yield eng
    assert eng.pool.checkedout() == 0  # type: ignore[attr-defined]
    await eng.dispose()


async def table_rows(url: str) -> list[tuple[str, str, str]]:
    """Rows as another connection sees them: (id, event_id, listener)."""
    eng = create_async_engine(url)
    try:
        async with eng.connect() as conn:
            result = await conn.execute(
                sa.text("SELECT id, event_id, listener FROM eventbus_failures")
            )
            return [(r[0], r[1], r[2]) for r in result]
    finally:
        await eng.dispose()


async def test_flush_without_start_writes_in_batches(
    engine: AsyncEngine, postgres_url: str
) -> None:
    store = SqlFailureStore(engine, batch_size=7)
    for n in range(20):
        store.record(make_record(n))
    with anyio.fail_after(10):
        await store.flush()
        assert len(await table_rows(postgres_url)) == 20
        await store.aclose()
    assert store.statistics().written == 20


async def test_concurrent_emits_record_every_failure_once_and_only_once(postgres_url: str) -> None:
    bus = EventBus(reg, SqlFailureStore(postgres_url, batch_size=50), queue_size=10_000)

    @bus.on(OrderPaid, name="sync_boom")
    def sync_boom(e: OrderPaid) -> None:
        raise ValueError("sync")

    @bus.on("order.*", name="async_boom")
    async def async_boom(e: Event) -> None:
        await anyio.lowlevel.checkpoint()
        raise RuntimeError("async")

    async def publisher(task: int) -> None:
        for i in range(5):
            bus.emit(OrderPaid(order_id=task * 100 + i))
            await bus.emit_async(OrderPaid(order_id=task * 100 + i))

    with anyio.fail_after(20):
        async with bus:
            async with anyio.create_task_group() as tg:
                for task in range(40):
                    tg.start_soon(publisher, task)
        rows = await table_rows(postgres_url)
    emissions = 40 * 5 * 2
    assert len(rows) == emissions * 2  # two failing listeners per emission
    assert len({r[0] for r in rows}) == len(rows)
    assert len({(r[1], r[2]) for r in rows}) == len(rows)  # once per (emission, listener)
    assert {r[2] for r in rows} == {"sync_boom", "async_boom"}


async def test_close_flushes_everything_accepted_before_close(postgres_url: str) -> None:
    store = SqlFailureStore(postgres_url, batch_size=10)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await store.start(tg)
            for n in range(95):
                store.record(make_record(n))
            await store.aclose()
        assert len(await table_rows(postgres_url)) == 95


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(make_record(2).replace(message=None), id="null-in-not-null"),
        pytest.param(make_record(2).replace(listener="x" * 300), id="longer-than-varchar-255"),
    ],
)
async def test_one_row_postgres_refuses_does_not_hold_back_the_batch(
    engine: AsyncEngine, postgres_url: str, bad: object, caplog: pytest.LogCaptureFixture
) -> None:
    with anyio.fail_after(10):
        async with SqlFailureStore(engine) as store:
            for rec in (make_record(1), bad, make_record(3)):
                store.record(rec)  # type: ignore[arg-type]
            await store.flush()
            assert store.statistics().rejected == 1
        rows = await table_rows(postgres_url)
    assert sorted(r[0] for r in rows) == ["rec-00001", "rec-00003"]
    assert any("rec-00002" in r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)


async def test_retry_resolves_a_row_with_the_rehydrated_event(postgres_url: str) -> None:
    await record_failures(postgres_url, PAID)
    bus = sql_bus(postgres_url)
    flaky = Flaky()
    flaky.failing = False
    bus.on("**", flaky, name="flaky")
    with anyio.fail_after(10):
        async with bus:
            report = await bus.retry_failures()
            [row] = await bus.failures.query()
    assert flaky.seen == [PAID]
    assert (report.resolved, report.failed, report.dead, report.skipped) == (1, 0, 0, 0)
    assert row.status is FailureStatus.RESOLVED
    assert row.attempts == 2 and row.resolved_at is not None


async def test_retry_marks_a_row_dead_after_max_attempts(postgres_url: str) -> None:
    await record_failures(postgres_url, PAID)
    bus = sql_bus(postgres_url)
    bus.on("**", Flaky(), name="flaky")
    with anyio.fail_after(10):
        async with bus:
            first = await bus.retry_failures(max_attempts=3)
            second = await bus.retry_failures(max_attempts=3)
            third = await bus.retry_failures(max_attempts=3)
            [row] = await bus.failures.query()
    assert (first.failed, second.dead, third.items) == (1, 1, ())
    assert row.status is FailureStatus.DEAD and row.attempts == 3
    assert row.note == "dead after 3 attempts (max_attempts=3)"
