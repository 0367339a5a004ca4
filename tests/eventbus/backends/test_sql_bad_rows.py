"""A record the driver cannot bind is one bad row, not an outage: the store refuses it with one
ERROR line naming it and writes the rest of its batch, from the buffer and from a spill file
alike. Real SQLite files and the suite's PostgreSQL."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import FailureRecord
from eventbus.backends._sql_spill import SpillFile
from eventbus.backends.sql import SqlFailureStore, make_engine
from tests.eventbus.helpers import make_record

GOOD = ["rec-00001", "rec-00003"]


def unbindable(n: int) -> FailureRecord:
    """A durable failure whose ``seq`` is past 64 bits (sqlite3: ``OverflowError``)."""
    return make_record(n).replace(durable_group="svc:grant", durable_seq=2**70)


@pytest.fixture(params=["sqlite", "postgres"])
async def any_engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    url = (
        str(tmp_path / "failures.db")
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    engine = make_engine(url)
    yield engine
    await engine.dispose()


async def stored_ids(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        ids = (await conn.execute(sa.text("SELECT id FROM eventbus_failures"))).scalars()
        return sorted(ids)


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "NOT stored" in r.getMessage()]


async def test_a_record_the_driver_cannot_bind_is_refused_and_its_batch_written(
    any_engine: AsyncEngine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression test: sqlite3's ``OverflowError`` was taken for an outage, and the same
    batch was retried forever (nothing more written, WARNINGs ten a second)."""
    caplog.set_level(logging.WARNING)
    async with SqlFailureStore(any_engine, spill_path=tmp_path / "spill.jsonl") as store:
        for rec in (make_record(1), unbindable(2), make_record(3)):
            store.record(rec)
        with anyio.fail_after(10):
            await store.flush()
        assert store.statistics().rejected == 1
        assert store.statistics().written == 2
        store.record(make_record(4))  # and the store goes on writing
        with anyio.fail_after(10):
            await store.flush()
    assert await stored_ids(any_engine) == [*GOOD, "rec-00004"]
    [line] = refusals(caplog)
    assert "rec-00002" in line and "the database refused a failure record" in line
    assert not [r for r in caplog.records if "unavailable" in r.getMessage()]


async def test_the_spill_file_reingest_refuses_that_record_and_stores_the_others(
    any_engine: AsyncEngine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression test: after a restart the re-ingest hit the same record and the innocent
    records of the spill file never reached the table."""
    spill = tmp_path / "spill.jsonl"
    SpillFile(spill).append([make_record(1), unbindable(2), make_record(3)])
    store = SqlFailureStore(any_engine, spill_path=spill)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await store.start(tg)
            await store.flush()
            await store.aclose()
    assert await stored_ids(any_engine) == GOOD
    assert store.statistics().rejected == 1 and store.statistics().reingested == 2
    [line] = refusals(caplog)
    assert "rec-00002" in line
    assert not spill.exists()
