"""SqlFailureStore against a real PostgreSQL (asyncpg): what only PostgreSQL shows.

The Protocol's contract (queries, exactly once under concurrent emits, close flushes, retries)
runs on PostgreSQL in test_failure_stores.py, and the tables, indexes and UTC timestamps in
test_sql_store.py; this module adds batched flushes, and what only a strict server checks: a
value longer than its column is refused as one row, not as the whole batch. Each test gets a
fresh database from the ``postgres_url`` fixture.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from eventbus.backends.sql import SqlFailureStore
from tests.eventbus.helpers import make_record


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
