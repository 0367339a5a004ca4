"""SqlFailureStore against a real SQLite file: batching, outages, overflow, close, ownership.

The contract it shares with ``MemoryFailureStore`` (queries, exactly once, close flushes,
retries) is in ``test_failure_stores.py``, on SQLite and PostgreSQL; the table, its indexes
and its UTC timestamps are checked here on both.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from eventbus import Event, EventBus, EventRegistry, FailureRecord, FailureStatus
from eventbus.backends.sql import (
    DEFAULT_DB_URL,
    SqlFailureStore,
    create_tables,
    default_db_url,
    failures_table,
)
from tests.eventbus.helpers import make_record

reg = EventRegistry()


class OrderPaid(Event, name="order.paid", registry=reg):
    order_id: int


class UserRegistered(Event, name="user.registered", registry=reg):
    user_id: int


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "failures.db"


@pytest.fixture
def db_url(db_path: Path) -> str:
    # A short busy timeout, so that a locked database is reported in milliseconds, not 5 s.
    return f"sqlite+aiosqlite:///{db_path}?timeout=0.01"


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    eng = create_async_engine(db_url)
    yield eng
    await eng.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
async def any_engine(request: pytest.FixtureRequest, db_url: str) -> AsyncIterator[AsyncEngine]:
    """The portable contract runs on both databases (PostgreSQL: the session's throwaway one)."""
    url = db_url if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    eng = create_async_engine(url)
    yield eng
    assert eng.pool.checkedout() == 0  # type: ignore[attr-defined]
    await eng.dispose()


def table_rows(db_path: Path) -> list[tuple[str, str, str]]:
    """Rows as another process would see them: (id, event_id, listener)."""
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute("SELECT id, event_id, listener FROM eventbus_failures").fetchall()
    conn.close()
    return [tuple(r) for r in rows]


def failing_bus(store: SqlFailureStore) -> EventBus:
    """A bus on *store* whose listener ``boom`` raises for every ``OrderPaid``."""
    bus = EventBus(reg, store)

    @bus.on(OrderPaid, name="boom")
    def boom(e: OrderPaid) -> None:
        raise ValueError("boom")

    return bus


async def wait_for_outage(store: SqlFailureStore) -> None:
    # Polls a counter the store exposes; the store has no event for "an outage began".
    with anyio.fail_after(5):
        while not store.statistics().outage:  # noqa: ASYNC110
            await anyio.sleep(0.005)


def test_default_url_is_a_file_in_the_cwd_unless_env_says_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("EVENTBUS_DB", raising=False)
    assert default_db_url() == DEFAULT_DB_URL == "sqlite+aiosqlite:///eventbus.db"
    monkeypatch.setenv("EVENTBUS_DB", "sqlite+aiosqlite:///elsewhere.db")
    assert default_db_url() == "sqlite+aiosqlite:///elsewhere.db"


async def test_repr_shows_configuration_but_never_the_password() -> None:
    store = SqlFailureStore("postgresql+asyncpg://app:s3cret@db.example/app", batch_size=10)
    text = repr(store)
    assert "s3cret" not in text
    assert "db.example" in text and "batch_size=10" in text and "eventbus_failures" in text
    await store.aclose()  # never connected; disposes the engine it built


async def test_create_tables_makes_the_table_and_its_indexes(any_engine: AsyncEngine) -> None:
    engine = any_engine
    await create_tables(engine)
    await create_tables(engine)  # idempotent
    async with engine.connect() as conn:
        names = await conn.run_sync(lambda c: sa.inspect(c).get_table_names())
        indexes = await conn.run_sync(
            lambda c: {i["name"] for i in sa.inspect(c).get_indexes("eventbus_failures")}
        )
    assert names == ["eventbus_failures"]
    assert {
        "ix_eventbus_failures_status_seq",
        "ix_eventbus_failures_event_seq",
        "ix_eventbus_failures_listener_seq",
        "ix_eventbus_failures_last_failed_at",
    } <= indexes


async def test_every_field_round_trips_and_timestamps_come_back_aware_utc(
    any_engine: AsyncEngine,
) -> None:
    plus2 = timezone(timedelta(hours=2))
    rec = make_record(1).replace(
        first_failed_at=datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=plus2),
        last_failed_at=datetime(2026, 5, 1, 13, 0, tzinfo=plus2),
        resolved_at=datetime(2026, 5, 1, 14, 0, tzinfo=plus2),
        status=FailureStatus.RESOLVED,
        attempts=3,
        payload_ok=False,
        note="a note ünïcode",
    )
    with anyio.fail_after(10):
        async with SqlFailureStore(any_engine) as store:
            store.record(rec)
            [back] = await store.query()
    assert back == rec  # aware datetimes compare as instants
    assert back.first_failed_at.tzinfo is UTC
    assert back.first_failed_at == datetime(2026, 5, 1, 10, 0, 0, 123456, tzinfo=UTC)
    assert back.status is FailureStatus.RESOLVED


async def test_flush_without_start_writes_directly(engine: AsyncEngine, db_path: Path) -> None:
    store = SqlFailureStore(engine, batch_size=7)
    for n in range(20):
        store.record(make_record(n))
    with anyio.fail_after(5):
        await store.flush()
    assert len(table_rows(db_path)) == 20
    assert store.statistics().written == 20
    await store.aclose()


async def test_a_query_before_the_first_write_finds_no_records_not_a_missing_table(
    engine: AsyncEngine,
) -> None:
    """Regression test: the writer makes the table on its first turn, and a query that ran
    before that turn (a busy machine, a listener's failure not yet recorded) failed with
    ``no such table`` instead of finding nothing."""
    store = SqlFailureStore(engine)
    assert await store.query() == []  # never started
    assert await store.get("nope") is None
    assert await store.purge() == 0
    async with anyio.create_task_group() as tg:
        started = SqlFailureStore(engine, table="started_failures")
        await started.start(tg)
        assert await started.query(status=FailureStatus.DEAD) == []
        await started.aclose()
    await store.aclose()


async def test_locked_database_during_a_burst_loses_nothing(
    db_url: str, db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = SqlFailureStore(db_url, batch_size=25, retry_backoff=0.01, max_backoff=0.02)
    bus = failing_bus(store)

    caplog.set_level(logging.WARNING, logger="eventbus.failures")
    with anyio.fail_after(10):
        async with bus:
            bus.emit(OrderPaid(order_id=0))
            await store.flush()  # the table exists before the lock is taken
            blocker = sqlite3.connect(db_path, isolation_level=None)
            try:
                blocker.execute("BEGIN EXCLUSIVE")
                for n in range(1, 301):
                    bus.emit(OrderPaid(order_id=n))  # returns at once: the buffer takes it
                await wait_for_outage(store)
                assert len(table_rows(db_path)) == 1  # nothing got past the lock
                assert store.statistics().buffered == 300
            finally:
                blocker.execute("ROLLBACK")
                blocker.close()
            await store.flush()
            assert not store.statistics().outage
    rows = table_rows(db_path)
    assert len(rows) == 301 and len({r[1] for r in rows}) == 301
    warnings = [r for r in caplog.records if "cannot write" in r.getMessage()]
    assert len(warnings) == 1  # once per outage, not once per attempt
    assert any("available again" in r.getMessage() for r in caplog.records)


async def test_a_write_locked_file_past_the_writers_patience_is_an_outage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression test: another connection holding a write transaction while the store started
    gave one DEBUG line and ``outage`` stayed false; now one WARNING, ``outage``, one "available
    again", and the records emitted meanwhile are all written."""
    path = tmp_path / "locked.db"
    blocker = sqlite3.connect(path, isolation_level=None)  # a fresh file: rollback journal
    blocker.execute("BEGIN EXCLUSIVE")
    store = SqlFailureStore(path, busy_timeout=0.02, retry_backoff=0.01, max_backoff=0.02)
    bus = failing_bus(store)

    caplog.set_level(logging.DEBUG, logger="eventbus.failures")
    with anyio.fail_after(10):
        async with bus:
            try:
                await wait_for_outage(store)  # the writer tried to make its table, and gave up
                for n in range(5):
                    bus.emit(OrderPaid(order_id=n))
                await anyio.sleep(0.1)  # several retries while the lock is held
                assert store.statistics().outage and store.statistics().buffered == 5
            finally:
                blocker.execute("ROLLBACK")
                blocker.close()
            await store.flush()
            assert not store.statistics().outage
    assert len(table_rows(path)) == 5
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.name == "eventbus.failures" and r.levelno >= logging.WARNING
    ]
    assert len(lines) == 2
    assert "cannot write (OperationalError: database is locked)" in lines[0]
    assert "\n" not in lines[0]  # one line, not the statement and its parameters
    assert "database available again" in lines[1]


async def test_bus_starts_and_records_while_the_database_is_unreachable(tmp_path: Path) -> None:
    missing_dir = tmp_path / "not-yet"
    store = SqlFailureStore(
        f"sqlite+aiosqlite:///{missing_dir / 'f.db'}", retry_backoff=0.01, max_backoff=0.02
    )
    bus = failing_bus(store)

    with anyio.fail_after(10):
        async with bus:
            for n in range(10):
                bus.emit(OrderPaid(order_id=n))
            await wait_for_outage(store)
            missing_dir.mkdir()  # the database becomes reachable
            records = await store.query(limit=None)
    assert sorted(r.payload for r in records) == sorted(f'{{"order_id": {n}}}' for n in range(10))
    assert len(table_rows(missing_dir / "f.db")) == 10


async def test_close_gives_up_after_close_timeout_and_logs_what_it_could_not_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = SqlFailureStore(
        f"sqlite+aiosqlite:///{tmp_path / 'missing' / 'f.db'}",
        retry_backoff=0.01,
        max_backoff=0.01,
        close_timeout=0.05,
    )
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await store.start(tg)
            store.record(make_record(1))
            await wait_for_outage(store)
            await store.aclose()
    assert store.statistics().lost == 1
    [lost] = [r for r in caplog.records if "NOT stored" in r.getMessage()]
    assert lost.levelno == logging.ERROR and "rec-00001" in lost.getMessage()


async def test_one_row_the_database_refuses_does_not_hold_back_the_batch(
    engine: AsyncEngine, db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad = make_record(2).replace(message=None)  # NOT NULL violation
    async with SqlFailureStore(engine) as store:
        for rec in (make_record(1), bad, make_record(3)):
            store.record(rec)
        with anyio.fail_after(5):
            await store.flush()
        assert store.statistics().rejected == 1
    assert sorted(r[0] for r in table_rows(db_path)) == ["rec-00001", "rec-00003"]
    assert any("rec-00002" in r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)


async def test_a_given_engine_is_left_open_and_a_built_one_is_disposed(
    engine: AsyncEngine, db_url: str
) -> None:
    assert isinstance(engine.pool, sa.pool.QueuePool)
    given = SqlFailureStore(engine)
    given.record(make_record(1))
    await given.aclose()
    assert engine.pool.checkedin() == 1  # its pooled connection is still there

    built = SqlFailureStore(db_url)
    built.record(make_record(2))
    await built.flush()
    pool = built.engine.pool
    assert isinstance(pool, sa.pool.QueuePool) and pool.checkedin() == 1
    await built.aclose()
    assert pool.checkedin() == 0  # its connections were closed by dispose()


def test_failures_table_has_the_record_fields() -> None:
    assert set(failures_table.c.keys()) == {
        "seq",
        *FailureRecord.__dataclass_fields__,
    }


async def test_the_sqlite_fast_path_stores_exactly_what_sqlalchemy_would(
    tmp_path: Path,
) -> None:
    """The driver-level batch insert must stay byte-compatible with ``insert(table)``."""
    from eventbus.backends._sql_insert import _DriverInsert

    plus2 = timezone(timedelta(hours=2))
    records = [
        make_record(1),
        make_record(2).replace(
            resolved_at=datetime(2026, 2, 1, 1, 2, 3, 4, tzinfo=plus2),
            status=FailureStatus.RESOLVED,
            payload_ok=False,
            note="n",
        ),
    ]
    dumps = []
    for name, portable in (("fast", False), ("portable", True)):
        path = tmp_path / f"{name}.db"
        async with SqlFailureStore(f"sqlite+aiosqlite:///{path}") as store:
            if portable:
                store._writer._insert._driver = _DriverInsert("", (), ())
            for rec in records:
                store.record(rec)
            assert [r.id for r in await store.query()] == ["rec-00002", "rec-00001"]
        with sqlite3.connect(path) as conn:
            dumps.append(conn.execute("SELECT * FROM eventbus_failures ORDER BY seq").fetchall())
        conn.close()
    assert dumps[0] == dumps[1]
    resolved_at = list(failures_table.c.keys()).index("resolved_at")
    assert dumps[0][1][resolved_at] == "2026-01-31 23:02:03.000004"  # stored in UTC


class Odd(Event, name="odd.thing", registry=reg):
    thing: object


async def test_an_unencodable_payload_is_still_recorded_as_repr(db_url: str) -> None:
    store = SqlFailureStore(db_url)
    bus = EventBus(reg, store)

    @bus.on(Odd, name="boom")
    def boom(e: Odd) -> None:
        raise ValueError("boom")

    event = Odd(thing={1, 2})  # a set under ``object``: the codec cannot encode it
    with anyio.fail_after(5):
        async with bus:
            bus.emit(event)
            [row] = await store.query()
    assert (row.payload_ok, row.payload) == (False, repr(event))


async def test_the_store_starts_again_when_the_bus_is_entered_again(
    db_url: str, db_path: Path
) -> None:
    store = SqlFailureStore(db_url)
    bus = failing_bus(store)

    with anyio.fail_after(5):
        for n in range(3):
            async with bus:
                bus.emit(OrderPaid(order_id=n))
            assert len(table_rows(db_path)) == n + 1


def test_starting_on_trio_is_a_clear_error(db_url: str) -> None:
    store = SqlFailureStore(db_url)

    async def start() -> None:
        async with anyio.create_task_group() as tg:
            await store.start(tg)

    with pytest.RaisesGroup(pytest.RaisesExc(RuntimeError, match="SqlFailureStore needs asyncio")):
        anyio.run(start, backend="trio")
