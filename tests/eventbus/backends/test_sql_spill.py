"""SqlFailureStore when the writer falls behind: nothing is lost and the log stays readable.

Records that do not fit the buffer go to a spill file (JSON lines) and are written to the table
when the writer catches up, or at the next start, without duplicates. Real SQLite files and the
suite's PostgreSQL; a real second connection holds locks where a test needs the database down.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import EventBus
from eventbus.backends._sql_spill import SpillFile, encode
from eventbus.backends.sql import SqlFailureStore, make_engine
from tests.eventbus.backends.test_sql_store import reg, table_rows
from tests.eventbus.helpers import make_record


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "failures.db"


def store_log(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "eventbus.failures" and r.levelno >= level
    ]


def leftovers(spill: Path) -> list[Path]:
    """The spill file and any claimed (``.ingesting``) copy of it that is still there."""
    return sorted(p for p in spill.parent.iterdir() if p.name.startswith(spill.name))


async def start_flush_close(store: SqlFailureStore) -> None:
    """Start *store* (the writer reads a spill file it finds), flush it, close it."""
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await store.start(tg)
            await store.flush()
            await store.aclose()


PG_URL = "postgresql+asyncpg://app:s3cret@db.example:5432/shop"
PG_SPILL = "eventbus-spill-postgresql-db.example-5432-shop-eventbus_failures.jsonl"


def test_the_spill_file_sits_next_to_a_sqlite_file_else_in_the_users_state_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression test: for a server database the spill file went to the current directory
    (read-only or shared for a service; a checkout for a developer)."""
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.delenv("EVENTBUS_SPILL_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert SqlFailureStore(tmp_path / "app.db").spill_path == (
        tmp_path / "app.db-eventbus_failures-spill.jsonl"
    )
    assert SqlFailureStore("rel.db", table="t").spill_path == tmp_path / "rel.db-t-spill.jsonl"
    assert SqlFailureStore(PG_URL).spill_path == state / "eventbus" / PG_SPILL
    assert SqlFailureStore("sqlite+aiosqlite://").spill_path == (
        state / "eventbus" / "eventbus-spill-sqlite-eventbus_failures.jsonl"
    )
    assert (
        SqlFailureStore(tmp_path / "a.db", spill_path="x.jsonl").spill_path == tmp_path / "x.jsonl"
    )
    assert not state.exists()  # made at the first spill, not by a store that never spills


def test_eventbus_spill_dir_names_the_directory_of_every_default_spill_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVENTBUS_SPILL_DIR", str(tmp_path / "spills"))
    assert SqlFailureStore(PG_URL).spill_path == tmp_path / "spills" / PG_SPILL
    db = SqlFailureStore(tmp_path / "app.db").spill_path
    assert db.parent == tmp_path / "spills" and db.name.endswith("app.db-eventbus_failures.jsonl")
    given = SqlFailureStore(PG_URL, spill_path=tmp_path / "x.jsonl").spill_path
    assert given == tmp_path / "x.jsonl"  # the argument wins


async def test_the_state_directory_is_made_private_and_the_first_warning_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("EVENTBUS_SPILL_DIR", raising=False)
    store = SqlFailureStore("sqlite+aiosqlite://", buffer_size=1)
    for n in range(3):  # not started: what does not fit the buffer is spilled at once
        store.record(make_record(n))
    where = tmp_path / "state" / "eventbus"
    assert store.spill_path.parent == where and store.spill_path.exists()
    assert where.stat().st_mode & 0o777 == 0o700
    [first, *_] = store_log(caplog, logging.WARNING)
    assert f"spilled to {store.spill_path}" in first
    await store.aclose()


@pytest.fixture(params=["sqlite", "postgres"])
async def any_engine(request: pytest.FixtureRequest, db_path: Path) -> AsyncIterator[AsyncEngine]:
    url = str(db_path) if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    engine = make_engine(url)
    yield engine
    await engine.dispose()


async def stored_ids(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        return list((await conn.execute(sa.text("SELECT id FROM eventbus_failures"))).scalars())


async def test_what_overflows_the_buffer_is_spilled_then_written_when_the_writer_catches_up(
    any_engine: AsyncEngine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression test: each record beyond the buffer was logged at ERROR and dropped."""
    spill = tmp_path / "spill.jsonl"
    store = SqlFailureStore(any_engine, buffer_size=3, spill_path=spill)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await store.start(tg)
            for n in range(10):  # no await: the writer cannot run, the buffer fills up
                store.record(make_record(n))
            assert (store.statistics().overflowed, store.statistics().waiting) == (7, 10)
            await store.flush()
            stats = store.statistics()
            assert (stats.written, stats.spilled, stats.reingested, stats.lost) == (3, 7, 7, 0)
            assert stats.waiting == 0
            assert sorted(await stored_ids(any_engine)) == [f"rec-{n:05d}" for n in range(10)]
            assert leftovers(spill) == []  # read back and deleted
            await store.aclose()
    assert not list(store_log(caplog, logging.ERROR))


async def test_a_storm_logs_a_few_lines_with_counts_and_keeps_every_record(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression test: 20,000 records past a full buffer made 20,000 ERROR lines."""
    caplog.set_level(logging.INFO, logger="eventbus.failures")
    store = SqlFailureStore(db_path, buffer_size=100)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await store.start(tg)
            for n in range(20_100):
                store.record(make_record(n))
                if n % 50 == 0:
                    await anyio.lowlevel.checkpoint()  # the spiller and the writer run now
            await store.aclose()
    assert len({r[0] for r in table_rows(db_path)}) == len(table_rows(db_path)) == 20_100
    stats = store.statistics()
    assert stats.overflowed == stats.spilled == stats.reingested >= 10_000
    assert stats.written + stats.reingested == 20_100 and stats.lost == 0
    lines = store_log(caplog)
    assert 1 <= len(lines) <= 6
    assert "spilled to" in lines[0]
    assert f"{stats.overflowed} records overflowed the buffer, {stats.spilled} spilled" in lines[-1]


async def test_a_store_not_started_spills_from_record_rather_than_grow_or_drop(
    db_path: Path, tmp_path: Path
) -> None:
    spill = tmp_path / "spill.jsonl"
    store = SqlFailureStore(db_path, buffer_size=10, spill_path=spill)
    for n in range(100):
        store.record(make_record(n))
    # nobody ran: the spill queue reached buffer_size 9 times, and record() wrote it each time
    assert (store.statistics().buffered, store.statistics().spilled) == (10, 90)
    assert len(spill.read_text().splitlines()) == 90
    with anyio.fail_after(10):
        await store.aclose()
    assert len({r[0] for r in table_rows(db_path)}) == 100
    assert store.statistics().reingested == 90 and leftovers(spill) == []


async def test_close_moves_what_it_could_not_write_to_the_spill_file_and_the_next_start_reads_it(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression test: records still unwritten when close gave up were logged and lost."""
    first = SqlFailureStore(db_path, busy_timeout=0.01, retry_backoff=0.01, close_timeout=0.2)
    await first.flush()  # makes the table
    blocker = sqlite3.connect(db_path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                await first.start(tg)
                for n in range(5):
                    first.record(make_record(n))
                await first.aclose()
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    stats = first.statistics()
    assert (stats.written, stats.spilled, stats.lost) == (0, 5, 0)
    assert len(first.spill_path.read_text().splitlines()) == 5
    assert (
        "the spill file" in store_log(caplog)[-1]
        and "read at the next start" in (store_log(caplog)[-1])
    )

    bus = EventBus(reg, SqlFailureStore(db_path))
    with anyio.fail_after(10):
        async with bus:
            await bus.failures.flush()
    assert sorted(r[0] for r in table_rows(db_path)) == [f"rec-{n:05d}" for n in range(5)]
    assert leftovers(first.spill_path) == []


async def test_reingesting_skips_ids_already_stored_and_reads_files_a_crash_left_claimed(
    any_engine: AsyncEngine, tmp_path: Path
) -> None:
    spill = tmp_path / "spill.jsonl"
    async with SqlFailureStore(any_engine, spill_path=spill) as store:
        store.record(make_record(2))
        await store.flush()
    SpillFile(spill).append([make_record(n) for n in (1, 2, 3)])
    # a file claimed by a process that died while reading it: 3 was read, then the crash
    orphan = spill.with_name(f"{spill.name}.0badc0de.ingesting")
    orphan.write_text("".join(encode(make_record(n)) + "\n" for n in (3, 4)))
    store = SqlFailureStore(any_engine, spill_path=spill)
    await start_flush_close(store)
    ids = await stored_ids(any_engine)
    assert sorted(ids) == [f"rec-{n:05d}" for n in (1, 2, 3, 4)]  # each once
    assert leftovers(spill) == []


async def test_unreadable_lines_are_counted_and_logged_the_rest_is_stored(
    db_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spill = tmp_path / "spill.jsonl"
    good = [encode(make_record(n)) for n in (1, 2)]
    spill.write_text(f'{good[0]}\nnot json\n{{"id": "half"}}\n{good[1]}\n{good[0][:40]}')
    store = SqlFailureStore(db_path, spill_path=spill)
    await start_flush_close(store)
    assert sorted(r[0] for r in table_rows(db_path)) == ["rec-00001", "rec-00002"]
    assert store.statistics().rejected == 3
    errors = store_log(caplog, logging.ERROR)
    assert len(errors) == 3 and all("unreadable line" in e for e in errors)


def test_concurrent_appends_and_claims_lose_no_line_and_duplicate_none(tmp_path: Path) -> None:
    """The flock protocol between appenders and a claimer (threads: separate descriptors)."""
    spill = SpillFile(tmp_path / "spill.jsonl")
    claimed: list[Path] = []
    done = threading.Event()

    def appender(k: int) -> None:
        for i in range(50):
            spill.append([make_record(k * 1000 + i * 10 + j) for j in range(10)])

    def claimer() -> None:
        while not done.is_set():
            claimed.extend(spill.claim(False))
        claimed.extend(spill.claim(False))

    threads = [threading.Thread(target=appender, args=(k,)) for k in range(4)]
    watcher = threading.Thread(target=claimer)
    watcher.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    done.set()
    watcher.join(timeout=30)
    ids = [json.loads(line)["id"] for path in claimed for line in path.read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 4 * 50 * 10
    assert not spill.path.exists()


async def test_batches_grow_while_the_buffer_is_deep_and_shrink_back_after_an_outage(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every batch counts as quick, however loaded the machine: growth is what is tested here.
    monkeypatch.setattr("eventbus.backends._sql_writer.TARGET_BATCH_SECONDS", 60.0)
    store = SqlFailureStore(
        f"sqlite+aiosqlite:///{db_path}?timeout=0.01",
        batch_size=100,
        max_batch_size=800,
        retry_backoff=0.01,
        max_backoff=0.01,
    )
    sizes: list[int] = []

    @sa.event.listens_for(store.engine.sync_engine, "before_cursor_execute")
    def count(
        conn: object, cursor: object, stmt: str, params: object, ctx: object, many: bool
    ) -> None:
        if stmt.startswith("INSERT") and many:
            assert isinstance(params, list)
            sizes.append(len(params))

    await store.flush()  # the table
    for n in range(3_000):
        store.record(make_record(n))
    with anyio.fail_after(20):
        await store.flush()
        assert sizes == [100, 200, 400, 800, 800, 700]
        blocker = sqlite3.connect(db_path, isolation_level=None)
        blocker.execute("BEGIN EXCLUSIVE")
        for n in range(3_000, 4_000):
            store.record(make_record(n))
        async with anyio.create_task_group() as tg:
            tg.start_soon(store.flush)
            while not store.statistics().outage:  # noqa: ASYNC110
                await anyio.sleep(0.005)
            blocker.execute("ROLLBACK")
            blocker.close()
        assert sizes[-4:] == [100, 200, 400, 300]  # back to batch_size, then growing again
    assert len(table_rows(db_path)) == 4_000
    await store.aclose()
